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

/* -n and -w: "do not wait" and "wait up to" contradict each other, so
 * the second of them is refused rather than let the last one silently
 * win; --wait's DURATION is at most INT_MAX ms, what the library takes. */
static cli_step timeout_option(const char *command, const cli_opt *o,
                               cli_common *target, const char *value)
{
    run_args *a = (run_args *)target; /* (its first member) */
    if (a->timeout_option && a->timeout_option != o->short_name)
        return cli_usage_error(command,
                               "--try and --wait cannot be used together");
    a->timeout_option = o->short_name;
    if (!value) {
        a->timeout_ms = PGLOCK_TRY;
        return CLI_GO_ON;
    }
    cli_step step = cli_opt_read_duration(command, o, value, &a->timeout_ms);
    if (step != CLI_GO_ON)
        return step;
    /* said here, before connecting, rather than by the lock call */
    if (a->timeout_ms > INT_MAX)
        return cli_usage_error(command,
                               "invalid value for --%s: \"%s\" is "
                               "out of range (at most 24 days)",
                               o->long_name, value);
    return CLI_GO_ON;
}

static const cli_opt run_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Locking:"},
    {.type = CLI_OPT_CALL,
     .short_name = 'n',
     .long_name = "try",
     .call = timeout_option,
     .help = "do not wait: if the lock is held, exit 75"},
    {.type = CLI_OPT_CALL,
     .short_name = 'w',
     .long_name = "wait",
     .value_name = "DURATION",
     .call = timeout_option,
     .help = "wait at most DURATION, then exit 75; a lost\n"
             "connection is retried within it\n"
             "(default: wait as long as it takes)"},
    {.type = CLI_OPT_FLAG,
     .long_name = "replace",
     .field = offsetof(run_args, replace),
     .help = "ask the holder, on whichever host, to stop: its\n"
             "command gets SIGTERM and its grace, and this one\n"
             "runs once it is gone (with --wait: at most that)"},
    {.type = CLI_OPT_INT,
     .long_name = "queue",
     .field = offsetof(run_args, queue),
     .value_name = "N",
     .min = 1,
     .max = RUN_MAX_QUEUE,
     .help = "at most N runs wait for KEY: one that finds N\n"
             "waiting exits 75 at once (1 to 64; --queue=1:\n"
             "run once more after the current run)"},
    {.type = CLI_OPT_DURATION,
     .long_name = "min-hold",
     .field = offsetof(run_args, min_hold_ms),
     .value_name = "DURATION",
     .help = "keep the lock at least this long from acquisition"},
    {.type = CLI_OPT_INT,
     .short_name = 'E',
     .long_name = "conflict-exit-code",
     .field = offsetof(run_args, conflict_code),
     .value_name = "N",
     .min = 0,
     .max = 255,
     .help = "exit status when busy or timed out (default 75)"},
    {.type = CLI_OPT_FLAG,
     .long_name = "fencing-token",
     .field = offsetof(run_args, fencing_token),
     .help = "give the command PGLOCK_FENCING_TOKEN, a number\n"
             "that grows with each acquisition (costs a WAL\n"
             "flush; behind a pooler, a second connection)"},
    {.type = CLI_OPT_CALL,
     .long_name = "slots",
     .field = offsetof(run_args, slots),
     .value_name = "N",
     .call = run_slots_option,
     .help = "a semaphore: at most N jobs hold KEY at once,\n"
             "each in its own slot, given as PGLOCK_SLOT\n"
             "(1 to 64; every user of KEY gives the same N)"},
    {.type = CLI_OPT_END}};

static const run_command run_cmd = {
    "run",
    "pglock run runs a command while holding a PostgreSQL advisory lock.",
    "Exit status: the command's (128+N if killed by signal N), 126/127 if it\n"
    "could not be run, 75 busy, 74 lock lost, 69 server unavailable or the\n"
    "command not run (no fencing token in time), 64 usage.\n",
    run_opts, 1};

static cli_step connect_within_wait(run_args *a, run_state *st,
                                    pglock_key *keys);
static int lock_and_run(run_state *st, run_job *job, pglock_key *keys);

/* The overlap policies' conflicts.  --queue counts waiters: not with a
 * try, which never waits, nor with the slots' gate; and not in a holding
 * transaction (run_waiters_limit.c says why).  --replace asks the one
 * holder of each key to stop: not a try (it must wait for the holder to
 * go), nor a shared or slot lock, whose holders are several by design. */
static cli_step policy_check(const run_args *a)
{
    if (a->queue && (a->timeout_option == 'n' || a->slots))
        return cli_usage_error("run", "--queue cannot be used with %s",
                               a->slots ? "--slots" : "--try");
    if (a->queue && a->lifetime == PGLOCK_LIFETIME_XACT)
        return cli_usage_error("run", "--queue needs --mode=session or auto "
                                      "on a direct connection");
    if (!a->replace)
        return CLI_GO_ON;
    if (a->timeout_option == 'n')
        return cli_usage_error("run", "--replace and --try cannot be used "
                                      "together: the holder is waited for "
                                      "while it stops");
    if (a->mode == PGLOCK_SHARED || a->slots)
        return cli_usage_error("run", "--replace cannot be used with %s",
                               a->slots ? "--slots" : "--shared");
    return CLI_GO_ON;
}

int cmd_run(int argc, char **argv)
{
    run_args a;
    run_state st;
    run_job job;
    pglock_key keys[RUN_MAX_KEYS];
    run_args_init(&a, &run_cmd);
    /* Only lead's job is a leader: never one inherited from an outer lead. */
    unsetenv("PGLOCK_LEADER");
    cli_step step = run_prepare(argc, argv, &a, &st, &job, keys);
    if (step != CLI_GO_ON)
        return step; /* nothing to free */
    step = run_slots_check(&a);
    if (step == CLI_GO_ON)
        step = policy_check(&a);
    if (step == CLI_GO_ON)
        step = connect_within_wait(&a, &st, keys);
    if (step == CLI_GO_ON)
        step = run_record_prepare(&st);
    int code = step == CLI_GO_ON ? lock_and_run(&st, &job, keys) : step;
    /* The one cleanup, whatever step ended the command: lock_and_run()
     * has already closed a client that held the lock (after the job). */
    run_client_drop(&st);
    cli_registry_free(st.registry);
    return code;
}

/* Opens st->client.  --wait=DURATION bounds the connection's setup too
 * (through a full pooler its first query waits for a server connection)
 * and waits for a server not there yet, taking what that costs from
 * a->timeout_ms.  CLI_GO_ON, else the exit status (printed). */
static cli_step connect_within_wait(run_args *a, run_state *st,
                                    pglock_key *keys)
{
    int64_t started = pglock_now_ms();
    run_error err;
    /* (the library rounds it up to libpq's whole seconds, at least 2) */
    int rc = run_connect(st, keys, a->timeout_ms > 0 ? a->timeout_ms : 0, &err);
    if (rc < 0 && a->timeout_ms > 0 &&
        run_connect_again(rc, &err, RUN_REFUSAL_OTHER) && !run_stop_signal() &&
        pglock_now_ms() + RUN_BACKOFF_MIN_MS + RUN_MIN_ATTEMPT_MS <
            started + a->timeout_ms) {
        /* A server not there yet (a container that starts before its
         * database) is waited for, as a lost one is; the hosts of a fleet
         * that start with it do not retry in step. */
        cli_warning("could not connect: %s; retrying within --wait",
                    err.message);
        run_retry r = run_retry_within(started + a->timeout_ms);
        rc = run_reconnect(st, keys, &r, &err);
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
    int code = cli_error(cli_exit_status_for(rc), "%s", err.message);
    cli_connect_hint(err.message);
    if (rc == PGLOCK_EPOOLER)
        cli_hint("Use --mode=auto or --mode=xact to hold the lock in a "
                 "transaction through a transaction-mode pooler.");
    return code;
}

static int lock_not_taken(const run_state *st, int rc, const run_error *err,
                          const pglock_key *key, const char *key_text,
                          const char *db);
static int slots_not_taken(const run_state *st, int rc, const run_error *err,
                           const char *db);
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
    run_error err;
    run_slots slots; /* its keys borrow its names: alive until the end */
    if (a->slots && run_slots_make(&slots, &keys[0], a->slots) < 0)
        return cli_error(CLI_EXIT_SOFTWARE,
                         "could not derive the slots of "
                         "\"%s\"",
                         st->key_label);
    int rc = a->slots ? run_slots_acquire(st, &slots, keys, &err)
                      : run_acquire(st, keys, &failed, &err);
    if (rc < 0) {
        code = a->slots ? slots_not_taken(st, rc, &err, db)
                        : lock_not_taken(st, rc, &err, &keys[failed],
                                         st->key_texts[failed], db);
        run_record_not_run(st, rc);
        return code;
    }
    /* A slot wait's other watchers give their connections back (the gate
     * is already free): joined before the watchdog is forked, which must
     * not copy a thread in the middle of libpq or malloc. */
    if (a->slots)
        run_slots_wait_end(&slots);
    st->acquired_at = pglock_now_ms();
    cli_verbose("acquired \"%s\" (%s), backend pid %d", st->key_label,
                st->key_id, pglock_client_backend_pid(st->client));
    if ((rc = run_job_env(st, &err)) < 0) {
        code = run_job_env_failed(st, rc, &err, 0);
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
    int code = run_job_status(st);
    int64_t by = run_deadline(st);
    int min_left = a->min_hold_ms > 0 &&
                   pglock_now_ms() < st->acquired_at + a->min_hold_ms;
    int hold_on = a->record || min_left;
    if (st->fatal || st->exec_errno) {
        /* it did not run, or the watchdog died: already reported */
    } else if ((hold_on ? run_confirm_now(st, by) : run_release_now(st, by)) <
               0) {
        code = cli_error(a->lost_code,
                         "lock \"%s\" lost while the command ran: %s",
                         st->key_label, st->lost_reason);
    } else if (min_left) {
        cli_verbose("holding until --min-hold ends");
        run_supervise(st, st->acquired_at + a->min_hold_ms);
        if (run_hold_end(st) < 0)
            cli_warning("lock \"%s\" lost during --min-hold: %s", st->key_label,
                        st->lost_reason);
        else if (run_stop_signal())
            code = 128 + run_stop_signal();
    }
    return code;
}

/* Runs the job under the held lock and releases it (st->client closed and
 * NULL); returns the exit status. */
static int run_locked(run_state *st, run_job *job)
{
    cli_step step = run_job_under_lock(st, job);
    int ran = step == CLI_GO_ON, code = step;
    if (ran && st->lost)
        code = cli_error(st->args->lost_code,
                         "lock \"%s\" lost: %s; the "
                         "command was stopped",
                         st->key_label, st->lost_reason);
    else if (ran)
        code = after_job(st);
    run_hold_end(st);
    run_record_end(st, code);
    run_client_drop(st);
    if (ran)
        cli_verbose("released");
    return code;
}

/* The lock was not taken (rc and err, for key as key_text gave it): the
 * message and the exit status. */
static int lock_not_taken(const run_state *st, int rc, const run_error *err,
                          const pglock_key *key, const char *key_text,
                          const char *db)
{
    const char *why = err->message;
    if (rc == PGLOCK_EBUSY && st->queue_full) {
        cli_notice("lock \"%s\" in database \"%s\" has %d run%s waiting "
                   "already (--queue=%d); the command was not run",
                   st->key_texts[st->queue_full - 1], db, st->args->queue,
                   st->args->queue == 1 ? "" : "s", st->args->queue);
        return st->args->conflict_code;
    }
    if (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT) {
        char holder[512];
        run_busy_holder(st, key, holder, sizeof holder);
        cli_notice("lock \"%s\" in database \"%s\" is %sheld by %s; the "
                   "command was not run",
                   key_text, db, rc == PGLOCK_EBUSY ? "" : "still ", holder);
        if (st->args->replace)
            cli_hint("--replace asks the holder to stop; it does when it can "
                     "be reached and this role may terminate its session "
                     "(pglock-run(1), REPLACE).");
        return st->args->conflict_code;
    }
    if (rc == PGLOCK_EINTR && run_stop_signal()) {
        cli_verbose("interrupted while waiting: the wait was cancelled");
        return 128 + run_stop_signal();
    }
    if (rc == PGLOCK_EINTR)
        /* Not our signal: someone cancelled the wait on the server
         * (pg_cancel_backend).  Say so; 130 would claim a Ctrl-C. */
        return cli_error(CLI_EXIT_UNAVAILABLE,
                         "the wait for lock \"%s\" was "
                         "cancelled on the server: %s",
                         key_text, why);
    if (!st->client && rc == PGLOCK_ECONNECT)
        return cli_error(CLI_EXIT_UNAVAILABLE,
                         "connection lost while waiting "
                         "for lock \"%s\" and not regained within --wait; the "
                         "command was not run: %s",
                         key_text, why);
    if (rc == PGLOCK_ECONNLOST)
        /* e.g. the server restarted, or pglock was stopped (Ctrl-Z) past
         * the lease while waiting: the command never ran */
        return cli_error(CLI_EXIT_UNAVAILABLE,
                         "connection lost while waiting "
                         "for lock \"%s\"; the command was not run: %s",
                         key_text, why);
    return cli_error(cli_exit_status_for(rc), "%s", why);
}

/* No slot was taken (rc and err): the message and the exit status. */
static int slots_not_taken(const run_state *st, int rc, const run_error *err,
                           const char *db)
{
    const run_args *a = st->args;
    int code;
    const char *why = err->message;
    if (st->slots_in_use) {
        code = cli_error(CLI_EXIT_USAGE,
                         "--slots=%d given, but lock \"%s\" "
                         "is in use with --slots=%d; the command was not run",
                         a->slots, st->key_label, st->slots_in_use);
    } else if (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT) {
        code = a->conflict_code;
        cli_notice("all %d slots of lock \"%s\" in database \"%s\" are %s; "
                   "the command was not run",
                   a->slots, st->key_label, db,
                   rc == PGLOCK_EBUSY ? "held by other sessions"
                                      : "still held after the wait");
    } else if (rc == PGLOCK_EINTR && run_stop_signal()) {
        code = 128 + run_stop_signal();
        cli_verbose("interrupted while waiting: the wait was cancelled");
    } else if (rc == PGLOCK_EINTR) {
        code = cli_error(CLI_EXIT_UNAVAILABLE,
                         "the wait for a slot of lock "
                         "\"%s\" was cancelled on the server: %s",
                         st->key_label, why);
    } else {
        code = cli_error(cli_exit_status_for(rc),
                         "could not take a slot of "
                         "lock \"%s\"; the command was not run: %s",
                         st->key_label, why);
    }
    return code;
}
