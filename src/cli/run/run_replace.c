/*
 * `--replace`, the asking side: before it waits for its keys, run (or
 * lead) holds each key's stop-request key (pglock_key_stop_request()) in
 * shared mode, on its lock connection, for as long as it runs.  The
 * holders' heartbeats see it (pglock.h, "Stop requests"; the holding
 * side is run_supervisor.c's), stop their jobs with SIGTERM and the whole
 * grace, and release once the jobs are gone; the wait for the key ends
 * then, as any wait does.  Nothing ends a holder's session: a holder that
 * cannot be reached, or whose role this one may not stop, is waited for
 * within --wait, as without --replace.
 */
#include <stdio.h>
#include "cli.h"
#include "run.h"

int run_replace_ask(run_state *st, const pglock_key *keys, int nkeys,
                    long timeout_ms, run_error *err)
{
    /* Nothing holds a stop-request key in exclusive mode for longer than
     * a heartbeat's statement: the wait is the budget's only in name. */
    for (int i = 0; i < nkeys; i++) {
        pglock_key stop;
        if (pglock_key_stop_request(&stop, &keys[i]) != 0) {
            run_error_set(err, 0,
                          "could not derive the stop-request key of \"%s\"",
                          st->key_texts[i]);
            return PGLOCK_EINVAL;
        }
        int rc = pglock_lock(st->client, &stop, PGLOCK_SHARED, timeout_ms);
        if (rc == PGLOCK_EBUSY && timeout_ms > 0)
            rc = PGLOCK_ETIMEDOUT;
        if (rc < 0) {
            run_error_of(err, rc, st->client);
            return rc;
        }
    }
    cli_verbose("asked the holders of \"%s\" to stop (--replace)",
                st->key_label);
    return 0;
}
