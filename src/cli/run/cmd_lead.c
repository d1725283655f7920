/*
 * pglock lead — leader election for long-running daemons: run COMMAND
 * whenever this host holds KEY.
 *
 * A loop around run's flow (run.h): connect, wait for the lock (the server
 * wakes the waiter the moment the leader's lock goes), take a fencing
 * token, run the command under the same lease and supervision as `pglock
 * run`.  When the command exits, lead exits with its status, or with
 * --restart runs it again while still leader.  When leadership is lost the
 * command is stopped (TERM, grace, KILL) and lead contends again, after a
 * jittered, capped backoff.  A server that goes away is never a reason to
 * exit: only a stop signal, the command's end, or a usage error are.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "lease_rules.h"
#include "run.h"

enum { OPT_RESTART = 300, OPT_LOCK_DELAY, OPT_STATE_FILE, OPT_REFUSED };

/* What contend() and lead_term() return besides an exit status (and
 * contend()'s CLI_GO_ON: leader): back off and contend again. */
enum { LEAD_CONTEND_AGAIN = CLI_OPT_NOT_MINE + 1 };

static const cli_opt lead_opts[] = {
    {0, 0, NULL, 0, NULL, "Leadership:"},
    {OPT_RESTART, 0, "restart", CLI_OPT_OPTIONAL, "DELAY",
     "when the command exits, run it again after DELAY\n"
     "(default 0) while still leader; without it,\n"
     "pglock exits with the command's status"},
    {OPT_LOCK_DELAY, 0, "lock-delay", CLI_OPT_VALUE, "DURATION",
     "a new leader holds the lock this long before it\n"
     "starts the command (default 0), so that a leader\n"
     "ended without a release has time to stop"},
    {OPT_STATE_FILE, 0, "state-file", CLI_OPT_VALUE, "PATH",
     "keep PATH saying \"waiting\" or \"leader\" (first\n"
     "line), for a readiness probe; removed on exit"},
    /* run's, refused with a reason rather than "unrecognized" */
    {'n', 'n', "try", CLI_OPT_NO_VALUE, NULL, NULL},
    {'w', 'w', "wait", CLI_OPT_VALUE, NULL, NULL},
    {OPT_REFUSED, 0, "min-hold", CLI_OPT_VALUE, NULL, NULL},
    CLI_OPT_END};

static int lead_option(run_args *a, int id, const char *value)
{
    switch (id) {
    case OPT_RESTART:
        a->restart_ms = 0;
        return value ? run_duration_option("lead", "--restart", value, &a->restart_ms)
                     : CLI_GO_ON;
    case OPT_LOCK_DELAY:
        return run_duration_option("lead", "--lock-delay", value, &a->lock_delay_ms);
    case OPT_STATE_FILE:
        if (!*value)
            return cli_usage_error("lead", "--state-file needs a path");
        a->state_file = value;
        return CLI_GO_ON;
    case 'n':
    case 'w':
    case OPT_REFUSED:
        return cli_usage_error("lead", "--try, --wait and --min-hold are for "
                               "pglock run: a leader waits as long as it takes");
    default:
        return CLI_OPT_NOT_MINE;
    }
}

static const run_command lead_cmd = {
    "lead",
    "pglock lead runs a command whenever this host is the leader: while it\n"
    "holds a PostgreSQL advisory lock.",
    "The command gets PGLOCK_LEADER=1 and PGLOCK_FENCING_TOKEN (a number that\n"
    "grows with each leadership), besides run's PGLOCK_KEY and friends.\n"
    "Exit status: the command's (128+N if killed by signal N), 126/127 if it\n"
    "could not be run, 128+N when pglock was stopped by signal N, 74 leadership\n"
    "lost in the command's last moments (a loss while it runs restarts the\n"
    "contention instead), 69 connection refused for good (a pooler with\n"
    "--mode=session, a server older than 14, a database or role that does\n"
    "not exist), 64 usage.\n",
    lead_opts, lead_option, 0};

/* A connection refused for the same reason is said again this often. */
#define LEAD_SAY_AGAIN_MS 60000

/* Why lead keeps contending without leadership, as a warning when the
 * reason changes and again every minute, so a daemon never waits in
 * silence; verbose in between. */
static void say_retrying(const char *what, const char *why)
{
    static char last_error[512];
    static int64_t said_at;
    int64_t now = pglock_now_ms();
    if (strcmp(last_error, why) != 0 || now - said_at >= LEAD_SAY_AGAIN_MS) {
        snprintf(last_error, sizeof last_error, "%s", why);
        said_at = now;
        cli_warning("%s: %s; retrying", what, why);
    } else {
        cli_verbose("%s: %s", what, why);
    }
}

/* Waits for the lock: forever, or, when systemd's watchdog wants pings,
 * in slices of half its interval, each ended by the server's answer (a
 * ping, and a fresh STATUS naming the holder).  pglock_lock()'s code. */
static int wait_for_leadership(run_state *st, pglock_key *key)
{
    long slice = run_notify_watchdog_ms(st->notify) / 2;
    for (;;) {
        if (st->notify) {
            char holder[512];
            run_busy_holder(st, key, holder, sizeof holder);
            run_notify_status(st->notify, "waiting", "waiting; held by %s", holder);
            run_notify_ready(st->notify);
        }
        int rc = pglock_lock(st->client, key, st->args->mode,
                             slice <= 0 ? PGLOCK_WAIT_FOREVER
                                        : slice < 500 ? 500 : slice);
        if (rc != PGLOCK_ETIMEDOUT || slice <= 0 || run_stop_signal())
            return rc;
        run_notify_alive(st->notify);
    }
}

/* Connects and waits for leadership.  CLI_GO_ON when leader; else a stop
 * signal's exit status (128+N), a usage status, or LEAD_CONTEND_AGAIN. */
static int contend(run_state *st, pglock_key *key, const char *connect_timeout)
{
    const run_args *a = st->args;
    int rc = run_connect(st, key, connect_timeout);
    if (rc < 0) {
        if (run_stop_signal())
            return 128 + run_stop_signal();
        if (rc == PGLOCK_EINVAL || rc == PGLOCK_ENOMEM)
            return cli_error(cli_exit_status_for(rc), "%s", st->error);
        if (rc == PGLOCK_EPOOLER || rc == PGLOCK_EVERSION ||
            run_connect_refusal(st, rc) == RUN_REFUSAL_FOR_GOOD)
            /* the path itself says no, every time: not a passing outage
             * (a database or role that does not exist) */
            return cli_error(CLI_EXIT_UNAVAILABLE, "%s", st->error);
        /* A server that is down, a standby (a failover under way), even a
         * refused password (being rotated), a server out of connection
         * slots may pass: keep contending, but say why. */
        say_retrying("could not connect", st->error);
        run_notify_status(st->notify, "waiting", "could not connect: %s; retrying",
                          st->error);
        run_notify_ready(st->notify);
        return LEAD_CONTEND_AGAIN;
    }
    if ((rc = run_record_prepare(st)) != CLI_GO_ON) {
        pglock_client_close(st->client);
        st->client = NULL;
        return rc;
    }
    cli_verbose("waiting for leadership of \"%s\" (%s)", a->key_text, st->key_id);
    rc = wait_for_leadership(st, key);
    if (run_stop_signal() || rc < 0)
        run_record_not_run(st, 0);
    if (run_stop_signal()) {
        pglock_client_close(st->client);
        st->client = NULL;
        return 128 + run_stop_signal();
    }
    if (rc == PGLOCK_ELOCKTABLE) {
        /* The server's lock table is full: a limit the operator must
         * hear of, and one that other sessions' locks going may lift. */
        say_retrying("could not take the lock", pglock_client_error(st->client));
        pglock_client_close(st->client);
        st->client = NULL;
        return LEAD_CONTEND_AGAIN;
    }
    if (rc < 0) {
        /* A lost connection, or a wait someone cancelled on the server
         * (pg_cancel_backend): neither is a reason to stop contending. */
        cli_verbose("%s while waiting: %s",
                    rc == PGLOCK_EINTR ? "the wait was cancelled on the server"
                                       : "lost the connection",
                    pglock_client_error(st->client));
        pglock_client_close(st->client);
        st->client = NULL;
        return LEAD_CONTEND_AGAIN;
    }
    st->acquired_at = pglock_now_ms();
    if ((rc = run_job_env(st)) < 0) {
        /* The command never started: let the lock go and contend again. */
        int code = run_job_env_failed(st, rc, 1);
        run_record_not_run(st, 0);
        pglock_client_close(st->client);
        st->client = NULL;
        return run_stop_signal() ? code : LEAD_CONTEND_AGAIN;
    }
    return CLI_GO_ON;
}

/* Runs the command (again, with --restart) while leader.  Returns the
 * exit status to end with, or LEAD_CONTEND_AGAIN when leadership was
 * lost. */
static int lead_term(run_state *st, run_job *job)
{
    const run_args *a = st->args;
    for (;;) {
        st->lost = 0;
        st->fatal = 0;
        int code = run_job_term(st, job);
        if (code != CLI_GO_ON && !st->lost)
            return code; /* a stop signal before the start, or a pipe */
        if (st->lost) {
            cli_verbose("leadership lost: %s; the command was stopped", st->lost_reason);
            return LEAD_CONTEND_AGAIN;
        }
        code = run_term_status(st);
        if (st->fatal || st->exec_errno)
            return code;
        if (a->restart_ms >= 0 && run_stop_signal())
            /* With --restart only a stop signal ends lead, even one that
             * arrives as the command exits by itself. */
            return 128 + run_stop_signal();
        if (a->restart_ms < 0) {
            /* The command ended by itself: prove it ran as leader to the
             * end, as pglock run does: with the release, unless --record's
             * end row is still to be written under the lock. */
            int64_t by = run_deadline(st);
            if ((a->record ? run_confirm_now(st, by)
                           : run_release_now(st, by)) < 0)
                return cli_error(a->lost_code, "leadership of \"%s\" lost while "
                                 "the command ran: %s", st->key_label,
                                 st->lost_reason);
            return code;
        }
        char d[32];
        run_format_ms(a->restart_ms, d, sizeof d);
        cli_verbose("command exited with status %d; restarting in %s", code, d);
        if (a->restart_ms > 0)
            run_supervise(st, pglock_now_ms() + a->restart_ms);
        if (st->lost) {
            cli_verbose("leadership lost: %s", st->lost_reason);
            return LEAD_CONTEND_AGAIN;
        }
        if (run_stop_signal())
            return 128 + run_stop_signal();
        /* Still ours: confirmed within the client deadline, or now. */
        if (run_confirm_now(st, run_deadline(st)) < 0) {
            cli_verbose("leadership lost: %s", st->lost_reason);
            return LEAD_CONTEND_AGAIN;
        }
    }
}

/* --lock-delay: the new leader holds the lock, heartbeating, before its
 * command starts, so that a leader whose end was no release (terminated,
 * its server-side session lost) has time to stop its command.
 * CLI_GO_ON; else the lock is released and it returns LEAD_CONTEND_AGAIN
 * (lost meanwhile) or a stop signal's 128+N. */
static int lock_delay(run_state *st)
{
    char d[32];
    run_format_ms(st->args->lock_delay_ms, d, sizeof d);
    cli_verbose("the command starts after --lock-delay=%s", d);
    run_notify_status(st->notify, "waiting", "lock taken, token %lld; the "
                      "command starts after --lock-delay=%s", (long long)st->token, d);
    st->lost = 0;
    run_supervise(st, pglock_now_ms() + st->args->lock_delay_ms);
    if (!st->lost && !run_stop_signal())
        return CLI_GO_ON;
    run_hold_end(st);
    run_record_not_run(st, 0);
    pglock_client_close(st->client);
    st->client = NULL;
    if (!st->lost)
        return 128 + run_stop_signal();
    cli_verbose("leadership lost during --lock-delay: %s", st->lost_reason);
    return LEAD_CONTEND_AGAIN;
}

/* Contends, leads, and contends again after a loss, until lead must
 * exit: returns that exit status.  The registry stays the caller's. */
static int lead(run_state *st, run_job *job, pglock_key *key)
{
    const run_args *a = st->args;
    /* A blackholed network must not hang a reconnect: give up on it
     * within a third of the lease (libpq counts whole seconds). */
    char connect_timeout[24];
    snprintf(connect_timeout, sizeof connect_timeout, "%ld",
             lease_connect_timeout_s(st->lease.server_ms));

    long base = RUN_BACKOFF_MIN_MS;
    for (;;) {
        int rc = contend(st, key, connect_timeout);
        if (rc == CLI_GO_ON && a->lock_delay_ms > 0)
            rc = lock_delay(st);
        if (rc != CLI_GO_ON && rc != LEAD_CONTEND_AGAIN)
            return rc;
        if (rc == CLI_GO_ON) {
            base = RUN_BACKOFF_MIN_MS;
            cli_verbose("leader: \"%s\" (%s), backend pid %d, fencing token %lld",
                        a->key_text, st->key_id,
                        pglock_client_backend_pid(st->client), (long long)st->token);
            run_record_start(st);
            run_notify_leader(st->notify, st->token);
            rc = lead_term(st, job);
            run_hold_end(st);
            run_record_end(st, rc != LEAD_CONTEND_AGAIN ? rc : a->lost_code);
            pglock_client_close(st->client);
            st->client = NULL;
            if (rc != LEAD_CONTEND_AGAIN) {
                cli_verbose("released leadership");
                return rc;
            }
            /* Lost: the command is gone; contend again. */
        }
        long wait = run_next_backoff(&base);
        cli_verbose("contending again in %ldms", wait);
        int sig = run_pause_ms(wait);
        if (sig)
            return 128 + sig;
    }
}

int cmd_lead(int argc, char **argv)
{
    run_args a;
    run_state st;
    run_job job;
    pglock_key key;
    run_args_init(&a, &lead_cmd);
    a.fencing_token = 1; /* a new leadership is exactly what to fence */
    int rc = run_prepare(argc, argv, &a, &st, &job, &key);
    if (rc != CLI_GO_ON)
        return rc;
    /* A conninfo libpq refuses (a misspelt keyword) never becomes valid:
     * the first connect says so with 64 rather than retrying forever. */
    setenv("PGLOCK_LEADER", "1", 1);
    char err[600];
    if (run_notify_open(&st.notify, a.state_file, err, sizeof err) != 0) {
        cli_registry_free(st.registry);
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    }
    rc = lead(&st, &job, &key);
    run_notify_close(st.notify);
    cli_registry_free(st.registry);
    return rc;
}
