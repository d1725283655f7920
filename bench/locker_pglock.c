/* The locker under test: pglock's session lock; the server wakes the waiter. */
#include "bench.h"
#include "pglock.h"

#include <stdlib.h>

pglock_client *bench_pglock_open(const char *conninfo)
{
    pglock_client *client;
    pglock_options opts;
    pglock_options_init(&opts, PGLOCK_OPTIONS_VERSION);
    opts.application_name = "pglock-bench";
    int rc = pglock_client_open(&client, conninfo, &opts);
    if (rc != 0)
        bench_die("pglock_client_open: %s",
                  client ? pglock_client_error(client) : pglock_strerror(rc));
    return client;
}

static void *pglock_open(const char *conninfo)
{
    return bench_pglock_open(conninfo);
}

static void pglock_lock_one(void *state, int64_t key, long *queries)
{
    pglock_key k;
    pglock_key_int64(&k, key);
    int rc = pglock_lock(state, &k, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER);
    if (rc != 0)
        bench_die("pglock_lock: %s", pglock_client_error(state));
    ++*queries;
}

static void pglock_unlock_one(void *state, int64_t key, long *queries)
{
    pglock_key k;
    pglock_key_int64(&k, key);
    int rc = pglock_unlock(state, &k, PGLOCK_EXCLUSIVE);
    if (rc != 0)
        bench_die("pglock_unlock: %s", pglock_client_error(state));
    ++*queries;
}

static void pglock_close_one(void *state)
{
    pglock_client_close(state);
}

static int pglock_server_pid(void *state)
{
    return pglock_client_backend_pid(state);
}

const bench_locker bench_locker_pglock = {
    "pglock",
    "pglock's library, `pglock_lock` waiting (the server wakes the waiter)",
    pglock_open,
    pglock_lock_one,
    pglock_unlock_one,
    pglock_close_one,
    pglock_server_pid};
