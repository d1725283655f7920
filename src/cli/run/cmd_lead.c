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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "run.h"

/* How a step of lead's loop ended: its outcome, never mixed with an exit
 * status (which goes to the step's *code). */
typedef enum {
    LEAD_LEADER, /* this host leads: the lock held, the token taken */
    LEAD_AGAIN,  /* leadership not won, or lost: contend again */
    LEAD_EXIT    /* lead ends with *code (its message printed) */
} lead_step;

/* --restart[=DELAY]: 0 without a DELAY. */
static cli_step restart_option(const char *command, const cli_opt *o,
                               cli_common *target, const char *value)
{
    long *delay = cli_opt_field(o, target);
    *delay = 0;
    return value ? cli_opt_read_duration(command, o, value, delay) : CLI_GO_ON;
}

static cli_step state_file_option(const char *command, const cli_opt *o,
                                  cli_common *target, const char *value)
{
    if (!*value)
        return cli_usage_error(command, "--%s needs a path", o->long_name);
    *(const char **)cli_opt_field(o, target) = value;
    return CLI_GO_ON;
}

/* run's --try, --wait and --min-hold, refused with a reason rather than
 * "unrecognized". */
static cli_step run_only_option(const char *command, const cli_opt *o,
                                cli_common *target, const char *value)
{
    (void)o, (void)target, (void)value;
    return cli_usage_error(command,
                           "--try, --wait and --min-hold are for "
                           "pglock run: a leader waits as long as it takes");
}

static const cli_opt lead_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Leadership:"},
    {.type = CLI_OPT_CALL,
     .long_name = "restart",
     .field = offsetof(run_args, restart_ms),
     .value_name = "DELAY",
     .optional = 1,
     .call = restart_option,
     .help = "when the command exits, run it again after DELAY\n"
             "(default 0) while still leader; without it,\n"
             "pglock exits with the command's status"},
    {.type = CLI_OPT_DURATION,
     .long_name = "lock-delay",
     .field = offsetof(run_args, lock_delay_ms),
     .value_name = "DURATION",
     .help = "a new leader holds the lock this long before it\n"
             "starts the command (default 0), so that a leader\n"
             "ended without a release has time to stop"},
    {.type = CLI_OPT_FLAG,
     .long_name = "replace",
     .field = offsetof(run_args, replace),
     .help = "take over at once: the leader, on whichever host,\n"
             "stops its command (SIGTERM, its grace) and steps\n"
             "down; asked once, at this lead's first contention"},
    {.type = CLI_OPT_CALL,
     .long_name = "state-file",
     .field = offsetof(run_args, state_file),
     .value_name = "PATH",
     .call = state_file_option,
     .help = "keep PATH saying \"waiting\" or \"leader\" (first\n"
             "line), for a readiness probe; removed on exit"},
    {.type = CLI_OPT_CALL,
     .short_name = 'n',
     .long_name = "try",
     .call = run_only_option},
    {.type = CLI_OPT_CALL,
     .short_name = 'w',
     .long_name = "wait",
     .value_name = "DURATION",
     .call = run_only_option},
    {.type = CLI_OPT_CALL,
     .long_name = "min-hold",
     .value_name = "DURATION",
     .call = run_only_option},
    {.type = CLI_OPT_END}};

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
    lead_opts, 0};

/* A connection refused for the same reason is said again this often. */
#define LEAD_SAY_AGAIN_MS 60000

/* What lead last said of why it keeps contending without leadership,
 * and when. */
typedef struct lead_said {
    char why[512];
    int64_t at;
} lead_said;

/* Why lead keeps contending without leadership, as a warning when the
 * reason changes and again every minute, so a daemon never waits in
 * silence; verbose in between. */
static void say_retrying(lead_said *said, const char *what, const char *why)
{
    int64_t now = pglock_now_ms();
    if (strcmp(said->why, why) != 0 || now - said->at >= LEAD_SAY_AGAIN_MS) {
        snprintf(said->why, sizeof said->why, "%s", why);
        said->at = now;
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
            run_notify_status(st->notify, "waiting", "waiting; held by %s",
                              holder);
            run_notify_ready(st->notify);
        }
        int rc = pglock_lock(st->client, key, st->args->mode,
                             slice <= 0    ? PGLOCK_WAIT_FOREVER
                             : slice < 500 ? 500
                                           : slice);
        if (rc != PGLOCK_ETIMEDOUT || slice <= 0 || run_stop_signal())
            return rc;
        run_notify_alive(st->notify);
    }
}

/* Lead's voice while it connects (run_reconnect()): a failed attempt
 * is said (say_retrying()) and reported, each pause in a verbose line. */
static void tell_lead(run_state *st, void *said, run_retry_event ev,
                      long pause_ms, const run_error *why)
{
    if (ev == RUN_RETRY_PAUSE) {
        cli_verbose("contending again in %ldms", pause_ms);
    } else if (ev == RUN_RETRY_FAILED) {
        /* A server that is down, a standby (a failover under way), even a
         * refused password (being rotated), a server out of connection
         * slots may pass: keep contending, but say why. */
        say_retrying(said, "could not connect", why->message);
        run_notify_status(st->notify, "waiting",
                          "could not connect: %s; retrying", why->message);
        run_notify_ready(st->notify);
    }
}

/* lead_step's LEAD_EXIT with *code = code. */
static lead_step lead_exit(int *code, int value)
{
    *code = value;
    return LEAD_EXIT;
}

/* Connects (as r says) and waits for leadership: LEAD_LEADER, LEAD_AGAIN,
 * or LEAD_EXIT after a stop signal (128+N) or a connection refused for
 * good. */
static lead_step contend(run_state *st, pglock_key *key, const run_retry *r,
                         int *code)
{
    const run_args *a = st->args;
    run_error err;
    int rc = run_reconnect(st, key, r, &err);
    if (rc < 0) {
        if (run_stop_signal())
            return lead_exit(code, 128 + run_stop_signal());
        return lead_exit(code,
                         cli_error(cli_exit_status_for(rc), "%s", err.message));
    }
    cli_step step = run_record_prepare(st);
    if (step != CLI_GO_ON) {
        run_client_drop(st);
        return lead_exit(code, step);
    }
    cli_verbose("waiting for leadership of \"%s\" (%s)", a->key_text,
                st->key_id);
    run_error asked = {"", ""};
    rc = a->replace && !st->replace_done
             ? run_replace_ask(st, key, 1, PGLOCK_WAIT_FOREVER, &asked)
             : 0;
    if (rc == 0)
        rc = wait_for_leadership(st, key);
    if (run_stop_signal() || rc < 0)
        run_record_not_run(st, 0);
    if (run_stop_signal()) {
        run_client_drop(st);
        return lead_exit(code, 128 + run_stop_signal());
    }
    if (rc == PGLOCK_ELOCKTABLE) {
        /* The server's lock table is full: a limit the operator must
         * hear of, and one that other sessions' locks going may lift. */
        say_retrying(r->voice, "could not take the lock",
                     pglock_client_error(st->client));
        run_client_drop(st);
        return LEAD_AGAIN;
    }
    if (rc < 0) {
        /* A lost connection, or a wait someone cancelled on the server
         * (pg_cancel_backend): neither is a reason to stop contending. */
        cli_verbose("%s while waiting: %s",
                    rc == PGLOCK_EINTR ? "the wait was cancelled on the server"
                                       : "lost the connection",
                    pglock_client_error(st->client));
        run_client_drop(st);
        return LEAD_AGAIN;
    }
    st->acquired_at = pglock_now_ms();
    if ((rc = run_job_env(st, &err)) < 0) {
        /* The command never started: let the lock go and contend again. */
        int failed = run_job_env_failed(st, rc, &err, 1);
        run_record_not_run(st, 0);
        run_client_drop(st);
        return run_stop_signal() ? lead_exit(code, failed) : LEAD_AGAIN;
    }
    return LEAD_LEADER;
}

/* Another lead's --replace stopped the command: the lock goes (the
 * release, which proves it was held to the end) and this lead contends
 * again, behind the new leader. */
static lead_step step_down(run_state *st)
{
    if (run_release_now(st, run_deadline(st)) < 0)
        cli_verbose("leadership lost while stepping down: %s", st->lost_reason);
    else
        cli_verbose("stepped down: the command was stopped for --replace");
    return LEAD_AGAIN;
}

/* Runs the command (again, with --restart) while leader: LEAD_EXIT with
 * the exit status to end with, or LEAD_AGAIN when leadership was lost. */
static lead_step lead_while_leader(run_state *st, run_job *job, int *code)
{
    const run_args *a = st->args;
    for (;;) {
        st->lost = 0;
        st->fatal = 0;
        cli_step step = run_job_under_lock(st, job);
        if (step != CLI_GO_ON && !st->lost)
            return lead_exit(code, step); /* a stop signal before the
                                             start, or a pipe */
        if (st->lost) {
            cli_verbose("leadership lost: %s; the command was stopped",
                        st->lost_reason);
            return LEAD_AGAIN;
        }
        if (st->replaced)
            return step_down(st);
        int status = run_job_status(st);
        if (st->fatal || st->exec_errno)
            return lead_exit(code, status);
        if (a->restart_ms >= 0 && run_stop_signal())
            /* With --restart only a stop signal ends lead, even one that
             * arrives as the command exits by itself. */
            return lead_exit(code, 128 + run_stop_signal());
        if (a->restart_ms < 0) {
            /* The command ended by itself: prove it ran as leader to the
             * end, as pglock run does: with the release, unless --record's
             * end row is still to be written under the lock. */
            int64_t by = run_deadline(st);
            if ((a->record ? run_confirm_now(st, by)
                           : run_release_now(st, by)) < 0)
                return lead_exit(code,
                                 cli_error(a->lost_code,
                                           "leadership of \"%s\" lost while "
                                           "the command ran: %s",
                                           st->key_label, st->lost_reason));
            return lead_exit(code, status);
        }
        char d[32];
        run_format_ms(a->restart_ms, d, sizeof d);
        cli_verbose("command exited with status %d; restarting in %s", status,
                    d);
        if (a->restart_ms > 0)
            run_supervise(st, pglock_now_ms() + a->restart_ms);
        if (st->lost) {
            cli_verbose("leadership lost: %s", st->lost_reason);
            return LEAD_AGAIN;
        }
        if (run_stop_signal())
            return lead_exit(code, 128 + run_stop_signal());
        /* Still ours: confirmed within the client deadline, or now. */
        if (run_confirm_now(st, run_deadline(st)) < 0) {
            cli_verbose("leadership lost: %s", st->lost_reason);
            return LEAD_AGAIN;
        }
    }
}

/* --lock-delay: the new leader holds the lock, heartbeating, before its
 * command starts, so that a leader whose end was no release (terminated,
 * its server-side session lost) has time to stop its command.
 * LEAD_LEADER; else the lock is released and it returns LEAD_AGAIN (lost
 * meanwhile) or LEAD_EXIT with a stop signal's 128+N. */
static lead_step lock_delay(run_state *st, int *code)
{
    char d[32];
    run_format_ms(st->args->lock_delay_ms, d, sizeof d);
    cli_verbose("the command starts after --lock-delay=%s", d);
    run_notify_status(st->notify, "waiting",
                      "lock taken, token %lld; the "
                      "command starts after --lock-delay=%s",
                      (long long)st->token, d);
    st->lost = 0;
    run_supervise(st, pglock_now_ms() + st->args->lock_delay_ms);
    if (!st->lost && !run_stop_signal())
        return LEAD_LEADER;
    run_hold_end(st);
    run_record_not_run(st, 0);
    run_client_drop(st);
    if (!st->lost)
        return lead_exit(code, 128 + run_stop_signal());
    cli_verbose("leadership lost during --lock-delay: %s", st->lost_reason);
    return LEAD_AGAIN;
}

/* Contends, leads, and contends again after a loss, until lead must
 * exit: returns that exit status.  The registry stays the caller's. */
static int lead(run_state *st, run_job *job, pglock_key *key)
{
    const run_args *a = st->args;
    /* Forever, giving up only on a refusal for good; the backoff grows
     * across losses and starts afresh with each leadership. */
    long base = RUN_BACKOFF_MIN_MS;
    lead_said said = {"", 0};
    run_retry r = {.gives_up_at = RUN_REFUSAL_FOR_GOOD,
                   .backoff = &base,
                   .tell = tell_lead,
                   .voice = &said};
    for (;;) {
        int code = 0;
        lead_step step = contend(st, key, &r, &code);
        r.pause_first = 1; /* every later contention follows a pause */
        if (step == LEAD_LEADER && a->lock_delay_ms > 0)
            step = lock_delay(st, &code);
        if (step == LEAD_EXIT)
            return code;
        if (step == LEAD_AGAIN)
            continue;
        /* --replace asks once: a lead that later steps down or loses
         * must not take leadership back from the one that replaced it */
        st->replace_done = 1;
        st->replaced = 0;
        base = RUN_BACKOFF_MIN_MS;
        cli_verbose("leader: \"%s\" (%s), backend pid %d, fencing token %lld",
                    a->key_text, st->key_id,
                    pglock_client_backend_pid(st->client),
                    (long long)st->token);
        run_record_start(st);
        run_notify_leader(st->notify, st->token);
        step = lead_while_leader(st, job, &code);
        run_hold_end(st);
        /* A leadership handed on to a --replace ended with its command's
         * own status (its SIGTERM's), not a loss: it kept the lock to the
         * end. */
        run_record_end(st, step == LEAD_EXIT ? code
                           : st->replaced    ? run_job_status(st)
                                             : a->lost_code);
        run_client_drop(st);
        if (step == LEAD_EXIT) {
            cli_verbose("released leadership");
            return code;
        }
        /* Lost: the command is gone; contend again, after a pause. */
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
    cli_step step = run_prepare(argc, argv, &a, &st, &job, &key);
    if (step != CLI_GO_ON)
        return step;
    /* A conninfo libpq refuses (a misspelt keyword) never becomes valid:
     * the first connect says so with 64 rather than retrying forever. */
    setenv("PGLOCK_LEADER", "1", 1);
    char err[600];
    if (run_notify_open(&st.notify, a.state_file, err, sizeof err) != 0) {
        cli_registry_free(st.registry);
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    }
    int code = lead(&st, &job, &key);
    run_notify_close(st.notify);
    cli_registry_free(st.registry);
    return code;
}
