/*
 * `run --queue=N`: at most N runs wait for a key (Temporal's BufferOne at
 * N = 1: the cron job that runs once more after the current run if it was
 * triggered meanwhile, without piling up).  Each key has N place keys,
 * text keys "<KEY_ID>#queue<i>" by the SHA-256 rule.  A run takes any
 * free one (pglock_lock_any(), a try: one round trip) before it waits for
 * the key, holds it while it waits, and gives it back once the key is
 * granted, so the holder holds none; no place free means N runs wait
 * already, and the run exits 75 at once.  A waiter whose session ends
 * (killed, its connection lost) frees its place with it.  The server
 * counts, so two runs arriving together never both take the last place.
 *
 * Session lifetime only: in a holding transaction (through a pooler) a
 * place could not be given back before the job ends, so --queue is
 * refused there for now.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "run.h"

/* The place keys of key: n of them into places. */
static int places_of(const pglock_key *key, int n, pglock_key *places)
{
    char id[32];
    if (pglock_key_format(key, id, sizeof id) < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        char name[64];
        snprintf(name, sizeof name, "%s#queue%d", id, i);
        if (pglock_key_int64(&places[i],
                             pglock_name_to_int64(name, strlen(name))) != 0)
            return -1;
    }
    return 0;
}

int run_queue_enter(run_state *st, const pglock_key *keys, run_error *err)
{
    int n = st->args->queue;
    if (pglock_client_lifetime(st->client) != PGLOCK_LIFETIME_SESSION) {
        run_error_set(err, 0,
                      "--queue needs a session lock (a direct connection): "
                      "through a pooler a place in the queue could not be "
                      "given back before the command ends");
        return PGLOCK_EPOOLER;
    }
    for (int k = 0; k < st->nkeys; k++) {
        pglock_key places[RUN_MAX_QUEUE];
        int taken = -1;
        if (places_of(&keys[k], n, places) != 0) {
            run_error_set(err, 0, "could not derive the queue of \"%s\"",
                          st->key_texts[k]);
            return PGLOCK_EINVAL;
        }
        int rc = pglock_lock_any(st->client, places, n, PGLOCK_EXCLUSIVE,
                                 &taken);
        if (rc < 0) {
            run_error_of(err, rc, st->client);
            if (rc == PGLOCK_EBUSY)
                st->queue_full = k + 1;
            return rc;
        }
        st->queue_place[k] = places[taken];
    }
    return 0;
}

int run_queue_leave(run_state *st, run_error *err)
{
    for (int k = 0; k < st->nkeys; k++) {
        int rc = pglock_unlock(st->client, &st->queue_place[k],
                               PGLOCK_EXCLUSIVE);
        if (rc < 0) {
            run_error_of(err, rc, st->client);
            return rc;
        }
    }
    return 0;
}
