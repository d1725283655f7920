/*
 * Lockers on plain libpq: the server-side wait (pg_advisory_lock, the
 * limit) and the sleep-and-poll try-lock loops several libraries use
 * (pg_try_advisory_lock, then sleep 10 ms or 1 ms and try again).
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef struct pg_state {
    PGconn *conn;
    long poll_us; /* 0: wait on the server */
} pg_state;

static void *open_with(const char *conninfo, long poll_us)
{
    pg_state *s = malloc(sizeof *s);
    if (!s)
        bench_die("out of memory");
    s->conn = bench_connect(conninfo);
    s->poll_us = poll_us;
    return s;
}

static void *open_wait(const char *conninfo)
{
    return open_with(conninfo, 0);
}
static void *open_poll_10ms(const char *conninfo)
{
    return open_with(conninfo, 10000);
}
static void *open_poll_1ms(const char *conninfo)
{
    return open_with(conninfo, 1000);
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static void pg_lock(void *state, int64_t key, long *queries)
{
    pg_state *s = state;
    if (s->poll_us == 0) {
        bench_exec(s->conn, "SELECT pg_advisory_lock($1)", &key,
                   PGRES_TUPLES_OK);
        ++*queries;
        return;
    }
    char text[24];
    const char *values[1] = {text};
    snprintf(text, sizeof text, "%lld", (long long)key);
    for (;;) {
        PGresult *res = PQexecParams(s->conn, "SELECT pg_try_advisory_lock($1)",
                                     1, NULL, values, NULL, NULL, 0);
        ++*queries;
        if (PQresultStatus(res) != PGRES_TUPLES_OK)
            bench_die("pg_try_advisory_lock: %s", PQerrorMessage(s->conn));
        int got = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
        PQclear(res);
        if (got)
            return;
        sleep_us(s->poll_us);
    }
}

static void pg_unlock(void *state, int64_t key, long *queries)
{
    pg_state *s = state;
    bench_exec(s->conn, "SELECT pg_advisory_unlock($1)", &key, PGRES_TUPLES_OK);
    ++*queries;
}

static void pg_close(void *state)
{
    pg_state *s = state;
    PQfinish(s->conn);
    free(s);
}

static int pg_server_pid(void *state)
{
    return PQbackendPID(((pg_state *)state)->conn);
}

const bench_locker bench_locker_raw_wait = {
    "raw libpq wait",
    "raw libpq `pg_advisory_lock` (the server wakes the waiter) — the limit",
    open_wait,
    pg_lock,
    pg_unlock,
    pg_close,
    pg_server_pid};
const bench_locker bench_locker_poll_10ms = {
    "poll 10 ms",   "libpq `pg_try_advisory_lock`, sleep 10 ms between tries",
    open_poll_10ms, pg_lock,
    pg_unlock,      pg_close,
    pg_server_pid};
const bench_locker bench_locker_poll_1ms = {
    "poll 1 ms",   "libpq `pg_try_advisory_lock`, sleep 1 ms between tries",
    open_poll_1ms, pg_lock,
    pg_unlock,     pg_close,
    pg_server_pid};
