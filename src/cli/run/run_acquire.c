/*
 * How `pglock run` takes its keys: all of them, in order (run_keys.c),
 * within the --wait budget; and when the connection is lost while waiting
 * (a server restart, a failover to a host the conninfo also names), it
 * reconnects with backoff (run_connect.c) and waits again, as `pglock
 * lead` does, within the same budget (--wait=DURATION only).  The command
 * never runs on the strength of an earlier connection: every key is taken
 * again on the new one.  A full lock table on the server (53200) is waited
 * out the same way, on the same connection.
 */
#include <stdio.h>
#include "cli.h"
#include "run.h"

int run_acquire(run_state *st, pglock_key *keys, int *failed, run_error *err)
{
    const run_args *a = st->args;
    int64_t deadline = a->timeout_ms > 0 ? pglock_now_ms() + a->timeout_ms : 0;
    int said = 0, said_full = 0;
    long full_base = RUN_BACKOFF_MIN_MS;
    for (;;) {
        long t = a->timeout_ms;
        if (deadline) {
            int64_t left = deadline - pglock_now_ms();
            t = left > 0 ? (long)left : PGLOCK_TRY;
        }
        int rc = run_lock_all(st, keys, a->mode, t, failed, err);
        if (rc == 0)
            return 0;
        if (rc == PGLOCK_ELOCKTABLE && deadline && !run_stop_signal()) {
            /* The server's lock table is full: other sessions' locks may
             * go within the budget; the connection itself is fine.  Said
             * once, tried again with backoff to the budget's end, then 69
             * with the same words. */
            long pause = run_next_backoff(&full_base);
            int64_t left = deadline - pglock_now_ms();
            if (left <= 0)
                return rc;
            if (pause > left)
                pause = (long)left; /* one last try as the budget ends */
            if (!said_full++) {
                cli_warning("could not take lock \"%s\": %s; retrying within "
                            "--wait",
                            st->key_texts[*failed], err->message);
            } else {
                cli_verbose("lock table still full: %s", err->message);
            }
            if (run_pause_ms(pause))
                return run_error_set(err, PGLOCK_EINTR, "interrupted");
            continue;
        }
        char what[RUN_MAX_KEY_ENV + 16];
        snprintf(what, sizeof what, "lock \"%s\"", st->key_texts[*failed]);
        if ((rc = run_ride_out_loss(st, keys, deadline, rc, &said, what,
                                    err)) != 0)
            return rc;
    }
}
