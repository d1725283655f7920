/*
 * pglock run — flock(1) across hosts: run a command while holding a lock,
 * with a lease, so that the command never runs without it.
 *
 * The flow: parse and check everything (64), connect (69), take the lock
 * (75 when busy or timed out), take the fencing token if asked and set the
 * job's environment (69, the command not run, when that cannot finish in
 * time), run the job under the supervisor (run_supervisor.c, with the
 * watchdog of run_watchdog.c), confirm ownership once more, hold until
 * --min-hold, release.  A loss stops the job and exits 74.  The lock
 * connection is closed only after the watchdog has exited, and the
 * watchdog exits only when no process of the job remains.
 */
#include <limits.h>
#include <stdlib.h>
#include <stdio.h>
#include "cli.h"
#include "run.h"

enum { OPT_MIN_HOLD = 300, OPT_CONFLICT, OPT_FENCING_TOKEN, OPT_SLOTS };

static const cli_opt run_opts[] = {
    {0, 0, NULL, 0, NULL, "Locking:"},
    {'n', 'n', "try", CLI_OPT_NO_VALUE, NULL,
     "do not wait: if the lock is held, exit 75"},
    {'w', 'w', "wait", CLI_OPT_VALUE, "DURATION",
     "wait at most DURATION, then exit 75; a lost\n"
     "connection is retried within it\n"
     "(default: wait as long as it takes)"},
    {OPT_MIN_HOLD, 0, "min-hold", CLI_OPT_VALUE, "DURATION",
     "keep the lock at least this long from acquisition"},
    {OPT_CONFLICT, 'E', "conflict-exit-code", CLI_OPT_VALUE, "N",
     "exit status when busy or timed out (default 75)"},
    {OPT_FENCING_TOKEN, 0, "fencing-token", CLI_OPT_NO_VALUE, NULL,
     "give the command PGLOCK_FENCING_TOKEN, a number\n"
     "that grows with each acquisition (costs a WAL\n"
     "flush; behind a pooler, a second connection)"},
    {OPT_SLOTS, 0, "slots", CLI_OPT_VALUE, "N",
     "a semaphore: at most N jobs hold KEY at once,\n"
     "each in its own slot, given as PGLOCK_SLOT\n"
     "(1 to 64; every user of KEY gives the same N)"},
    CLI_OPT_END};

static int run_option(run_args *a, int id, const char *value)
{
    switch (id) {
    case 'n':
    case 'w':
        /* "Do not wait" and "wait up to" contradict each other: say so
         * rather than let the last one silently win. */
        if (a->timeout_option && a->timeout_option != id)
            return cli_usage_error("run", "--try and --wait cannot be used together");
        a->timeout_option = id;
        if (id == 'n') {
            a->timeout_ms = PGLOCK_TRY;
            return CLI_GO_ON;
        }
        int rc = run_duration_option("run", "--wait", value, &a->timeout_ms);
        /* the library takes waits up to INT_MAX ms: say so here, before
         * connecting, rather than fail the lock call */
        if (rc == CLI_GO_ON && a->timeout_ms > INT_MAX)
            return cli_usage_error("run", "invalid value for --wait: \"%s\" is "
                                   "out of range (at most 24 days)", value);
        return rc;
    case OPT_MIN_HOLD:
        return run_duration_option("run", "--min-hold", value, &a->min_hold_ms);
    case OPT_CONFLICT:
        return run_exit_code_option("run", "--conflict-exit-code", value,
                                    &a->conflict_code);
    case OPT_FENCING_TOKEN:
        a->fencing_token = 1;
        return CLI_GO_ON;
    case OPT_SLOTS:
        return run_slots_option(a, value);
    default:
        return CLI_OPT_NOT_MINE;
    }
}

static const run_command run_cmd = {
    "run",
    "pglock run runs a command while holding a PostgreSQL advisory lock.",
    "Exit status: the command's (128+N if killed by signal N), 126/127 if it\n"
    "could not be run, 75 busy, 74 lock lost, 69 server unavailable or the\n"
    "command not run (no fencing token in time), 64 usage.\n",
    run_opts, run_option, 1};

static int connect_within_wait(run_args *a, run_state *st, pglock_key *keys);
static int lock_and_run(run_state *st, run_job *job, pglock_key *keys);

int cmd_run(int argc, char **argv)
{
    run_args a;
    run_state st;
    run_job job;
    pglock_key keys[RUN_MAX_KEYS];
    run_args_init(&a, &run_cmd);
    /* Only lead's job is a leader: never one inherited from an outer lead. */
    unsetenv("PGLOCK_LEADER");
    int code = run_prepare(argc, argv, &a, &st, &job, keys);
    if (code != CLI_GO_ON)
        return code; /* nothing to free */
    code = run_slots_check(&a);
    if (code == CLI_GO_ON)
        code = connect_within_wait(&a, &st, keys);
    if (code == CLI_GO_ON)
        code = run_record_prepare(&st);
    if (code == CLI_GO_ON)
        code = lock_and_run(&st, &job, keys);
    /* The one cleanup, whatever step ended the command: lock_and_run()
     * has already closed a client that held the lock (after the job). */
    pglock_client_close(st.client);
    cli_registry_free(st.registry);
    return code;
}

/* Opens st->client.  --wait=DURATION bounds the connection's setup too
 * (through a full pooler its first query waits for a server connection)
 * and waits for a server not there yet, taking what that costs from
 * a->timeout_ms.  CLI_GO_ON, else the exit status (printed). */
static int connect_within_wait(run_args *a, run_state *st, pglock_key *keys)
{
    int64_t started = pglock_now_ms();
    /* libpq counts whole seconds, at least 2 */
    char wait_ct[24];
    long wait_s = a->timeout_ms > 0 ? (a->timeout_ms + 999) / 1000 : 0;
    snprintf(wait_ct, sizeof wait_ct, "%ld", wait_s < 2 ? 2 : wait_s);
    int rc = run_connect(st, keys, a->timeout_ms > 0 ? wait_ct : NULL);
    if (rc < 0 && a->timeout_ms > 0 && run_connect_may_pass(st, rc) &&
        !run_stop_signal() &&
        pglock_now_ms() + RUN_BACKOFF_MIN_MS + RUN_MIN_ATTEMPT_MS <
            started + a->timeout_ms) {
        /* A server not there yet (a container that starts before its
         * database) is waited for, as a lost one is; the hosts of a fleet
         * that start with it do not retry in step. */
        cli_warning("could not connect: %s; retrying within --wait", st->error);
        rc = run_reconnect(st, keys, started + a->timeout_ms);
        if (rc == 0) {
            long left = (long)(started + a->timeout_ms - pglock_now_ms());
            a->timeout_ms = left > 0 ? left : 1;
        }
    }
    if (rc == 0)
        return CLI_GO_ON;
    if (run_stop_signal()) {
        cli_verbose("interrupted while connecting");
        return 128 + run_stop_signal();
    }
    int code = cli_error(cli_exit_status_for(rc), "%s", st->error);
    cli_connect_hint(st->error);
    if (rc == PGLOCK_EPOOLER)
        cli_hint("Use --mode=auto or --mode=xact to hold the lock in a "
                 "transaction through a transaction-mode pooler.");
    return code;
}

static int lock_not_taken(run_state *st, int rc, const pglock_key *key,
                          const char *key_text, const char *db);
static int slots_not_taken(run_state *st, int rc, const char *db);
static int run_locked(run_state *st, run_job *job);

/* Takes the lock (or a slot), sets the job's environment and runs the job
 * under the lock: the exit status.  A client that held the lock is closed
 * here (st->client NULL); one that did not is left to the caller. */
static int lock_and_run(run_state *st, run_job *job, pglock_key *keys)
{
    const run_args *a = st->args;
    /* a copy: a reconnect while waiting replaces the client */
    char db[128];
    snprintf(db, sizeof db, "%s", pglock_client_database(st->client));
    cli_verbose("acquiring %s lock \"%s\" (%s) in database \"%s\"",
                a->mode == PGLOCK_SHARED ? "shared" : "exclusive",
                st->key_label, st->key_id, db);
    int failed = 0, code;
    run_slots slots; /* its keys borrow its names: alive until the end */
    if (a->slots && run_slots_make(&slots, &keys[0], a->slots) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not derive the slots of "
                         "\"%s\"", st->key_label);
    int rc = a->slots ? run_slots_acquire(st, &slots, keys)
                      : run_acquire(st, keys, &failed);
    if (rc < 0) {
        code = a->slots ? slots_not_taken(st, rc, db)
                        : lock_not_taken(st, rc, &keys[failed],
                                         st->key_texts[failed], db);
        run_record_not_run(st, rc);
        return code;
    }
    /* A slot wait's other watchers give their connections back (the gate
     * is already free): joined before the watchdog is forked, which must
     * not copy a thread in the middle of libpq or malloc. */
    run_slots_wait_end();
    st->acquired_at = pglock_now_ms();
    cli_verbose("acquired \"%s\" (%s), backend pid %d", st->key_label, st->key_id,
                pglock_client_backend_pid(st->client));
    if ((rc = run_job_env(st)) < 0) {
        code = run_job_env_failed(st, rc, 0);
        /* taken, then given up (a fencing token that timed out): not a
         * skip, whatever rc says */
        run_record_not_run(st, 0);
        return code;
    }
    run_record_start(st);
    return run_locked(st, job);
}

/* After the job ran to its end (not lost): prove the lock was still ours,
 * with the release itself unless the lock is still needed: a --min-hold
 * left to wait, or --record's end row, written under the lock.  The exit
 * status. */
static int after_job(run_state *st)
{
    const run_args *a = st->args;
    int code = run_term_status(st);
    int64_t by = run_deadline(st);
    int min_left = a->min_hold_ms > 0 &&
                   pglock_now_ms() < st->acquired_at + a->min_hold_ms;
    int hold_on = a->record || min_left;
    if (st->fatal || st->exec_errno) {
        /* it did not run, or the watchdog died: already reported */
    } else if ((hold_on ? run_confirm_now(st, by)
                        : run_release_now(st, by)) < 0) {
        code = cli_error(a->lost_code, "lock \"%s\" lost while the command ran: %s",
                         st->key_label, st->lost_reason);
    } else if (min_left) {
        cli_verbose("holding until --min-hold ends");
        run_supervise(st, st->acquired_at + a->min_hold_ms);
        if (run_hold_end(st) < 0)
            cli_warning("lock \"%s\" lost during --min-hold: %s",
                        st->key_label, st->lost_reason);
        else if (run_stop_signal())
            code = 128 + run_stop_signal();
    }
    return code;
}

/* Runs the job under the held lock and releases it (st->client closed and
 * NULL); returns the exit status. */
static int run_locked(run_state *st, run_job *job)
{
    int code = run_job_term(st, job);
    int ran = code == CLI_GO_ON;
    if (ran && st->lost)
        code = cli_error(st->args->lost_code, "lock \"%s\" lost: %s; the "
                         "command was stopped", st->key_label, st->lost_reason);
    else if (ran)
        code = after_job(st);
    run_hold_end(st);
    run_record_end(st, code);
    pglock_client_close(st->client);
    st->client = NULL;
    if (ran)
        cli_verbose("released");
    return code;
}

/* The lock was not taken (rc, for key as key_text gave it): the message
 * and the exit status. */
static int lock_not_taken(run_state *st, int rc, const pglock_key *key,
                          const char *key_text, const char *db)
{
    /* run_lock_all() and run_reconnect() both leave it there */
    const char *why = st->error;
    if (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT) {
        char holder[512];
        run_busy_holder(st, key, holder, sizeof holder);
        cli_notice("lock \"%s\" in database \"%s\" is %sheld by %s; the "
                   "command was not run", key_text, db,
                   rc == PGLOCK_EBUSY ? "" : "still ", holder);
        return st->args->conflict_code;
    }
    if (rc == PGLOCK_EINTR && run_stop_signal()) {
        cli_verbose("interrupted while waiting: the wait was cancelled");
        return 128 + run_stop_signal();
    }
    if (rc == PGLOCK_EINTR)
        /* Not our signal: someone cancelled the wait on the server
         * (pg_cancel_backend).  Say so; 130 would claim a Ctrl-C. */
        return cli_error(CLI_EXIT_UNAVAILABLE, "the wait for lock \"%s\" was "
                         "cancelled on the server: %s", key_text, why);
    if (!st->client && rc == PGLOCK_ECONNECT)
        return cli_error(CLI_EXIT_UNAVAILABLE, "connection lost while waiting "
                         "for lock \"%s\" and not regained within --wait; the "
                         "command was not run: %s", key_text, why);
    if (rc == PGLOCK_ECONNLOST)
        /* e.g. the server restarted, or pglock was stopped (Ctrl-Z) past
         * the lease while waiting: the command never ran */
        return cli_error(CLI_EXIT_UNAVAILABLE, "connection lost while waiting "
                         "for lock \"%s\"; the command was not run: %s",
                         key_text, why);
    return cli_error(cli_exit_status_for(rc), "%s", why);
}

/* No slot was taken (rc): the message and the exit status. */
static int slots_not_taken(run_state *st, int rc, const char *db)
{
    const run_args *a = st->args;
    int code;
    /* st->error: a watcher's failure, a declaration's, a reconnect's */
    const char *why = st->error[0] || !st->client
                          ? st->error : pglock_client_error(st->client);
    if (st->slots_in_use) {
        code = cli_error(CLI_EXIT_USAGE, "--slots=%d given, but lock \"%s\" "
                         "is in use with --slots=%d; the command was not run",
                         a->slots, st->key_label, st->slots_in_use);
    } else if (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT) {
        code = a->conflict_code;
        cli_notice("all %d slots of lock \"%s\" in database \"%s\" are %s; "
                   "the command was not run", a->slots, st->key_label, db,
                   rc == PGLOCK_EBUSY ? "held by other sessions"
                                      : "still held after the wait");
    } else if (rc == PGLOCK_EINTR && run_stop_signal()) {
        code = 128 + run_stop_signal();
        cli_verbose("interrupted while waiting: the wait was cancelled");
    } else if (rc == PGLOCK_EINTR) {
        code = cli_error(CLI_EXIT_UNAVAILABLE, "the wait for a slot of lock "
                         "\"%s\" was cancelled on the server: %s",
                         st->key_label, why);
    } else {
        code = cli_error(cli_exit_status_for(rc), "could not take a slot of "
                         "lock \"%s\"; the command was not run: %s",
                         st->key_label, why);
    }
    return code;
}
