/*
 * bench_ops — one client, no contention: the latency of each lock operation
 * with raw libpq (the limit: the same SQL, the same round trips) and with
 * pglock's library, measured in one run, interleaved rep by rep so that
 * machine noise hits both alike.  Prints a markdown table: round trips
 * counted at the test proxy, µs per operation as median (min–max) over the
 * repetitions, and each pglock operation's ratio to its raw baseline
 * (median and spread of the per-repetition ratios).
 *
 *   bench_ops --conninfo CONNINFO [--label TEXT] [--reps N] [--iters N]
 *             [--count-conninfo CONNINFO --count-ctl CTL]
 */
#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef BENCH_HAVE_PGLOCK
#include "pglock.h"
#endif

typedef struct ctx {
    PGconn *conn; /* plain libpq connection (raw ops, xact ops) */
#ifdef BENCH_HAVE_PGLOCK
    pglock_client *client; /* pglock's own lock connection */
#endif
} ctx;

typedef struct op {
    const char *name;
    const char *baseline; /* name of the raw op it is compared with */
    const char *same_sql; /* name of the raw op sending pglock's own SQL */
    void (*run)(ctx *c, int64_t key);
} op;

/* ---- raw libpq: the same SQL a careful hand-written client sends */

static void raw_select1(ctx *c, int64_t key)
{
    (void)key;
    bench_exec(c->conn, "SELECT 1", NULL, PGRES_TUPLES_OK);
}

static void raw_lock_unlock(ctx *c, int64_t key)
{
    bench_exec(c->conn, "SELECT pg_advisory_lock($1)", &key, PGRES_TUPLES_OK);
    bench_exec(c->conn, "SELECT pg_advisory_unlock($1)", &key, PGRES_TUPLES_OK);
}

static void raw_try_unlock(ctx *c, int64_t key)
{
    char text[24];
    const char *values[1] = {text};
    snprintf(text, sizeof text, "%lld", (long long)key);
    PGresult *res = PQexecParams(c->conn, "SELECT pg_try_advisory_lock($1)", 1,
                                 NULL, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK ||
        strcmp(PQgetvalue(res, 0, 0), "t") != 0)
        bench_die("try-lock failed: %s", PQerrorMessage(c->conn));
    PQclear(res);
    bench_exec(c->conn, "SELECT pg_advisory_unlock($1)", &key, PGRES_TUPLES_OK);
}

static void raw_xact_3(ctx *c, int64_t key)
{
    bench_exec(c->conn, "BEGIN", NULL, PGRES_COMMAND_OK);
    bench_exec(c->conn, "SELECT pg_advisory_xact_lock($1)", &key,
               PGRES_TUPLES_OK);
    bench_exec(c->conn, "COMMIT", NULL, PGRES_COMMAND_OK);
}

#ifdef BENCH_HAVE_PGLOCK
/* The SQL pglock_heartbeat() sends in session hold (src/lib/heartbeat.c),
 * in the simple protocol as it does: what the heartbeat costs on the
 * server, library aside. */
static void raw_heartbeat_sql(ctx *c, int64_t key)
{
    (void)key;
    PGresult *res = PQexec(c->conn, "SELECT pg_backend_pid()");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        bench_die("heartbeat SQL: %s", PQerrorMessage(c->conn));
    PQclear(res);
}

/* pglock_lock()'s statements (src/lib/lock.c) sent by hand.  The
 * session's lock_timeout already has the value the wait needs (the client
 * sends set_config() only when it must change), so the statement is the
 * lock call alone, its key declared int8. */
static void raw_pglock_sql_exec(ctx *c, const char *sql, int64_t key)
{
    static const Oid int8[1] = {20};
    char text[24];
    const char *values[1] = {text};
    snprintf(text, sizeof text, "%lld", (long long)key);
    PGresult *res = PQexecParams(c->conn, sql, 1, int8, values, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        bench_die("%s: %s", sql, PQerrorMessage(c->conn));
    PQclear(res);
}

static void raw_pglock_sql_lock(ctx *c, int64_t key, const char *fn)
{
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT %s($1)", fn);
    raw_pglock_sql_exec(c, sql, key);
    raw_pglock_sql_exec(c, "SELECT pg_advisory_unlock($1)", key);
}

static void raw_pglock_sql_lock_unlock(ctx *c, int64_t key)
{
    raw_pglock_sql_lock(c, key, "pg_advisory_lock");
}

static void raw_pglock_sql_try_unlock(ctx *c, int64_t key)
{
    raw_pglock_sql_lock(c, key, "pg_try_advisory_lock");
}

/* Runs a multi-statement simple query; dies unless it succeeds. */
static void simple(ctx *c, const char *sql)
{
    PGresult *res = PQexec(c->conn, sql);
    ExecStatusType st = PQresultStatus(res);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        bench_die("%s: %s", sql, PQerrorMessage(c->conn));
    PQclear(res);
}

#define XACT_WAIT(K) \
    "SELECT set_config('lock_timeout', x.old, true) FROM" \
    " (SELECT current_setting('lock_timeout') AS old," \
    " set_config('lock_timeout', '0', true), pg_advisory_xact_lock(" K ")) x"

/* pglock_xact_begin_lock()'s query (src/lib/xact_lock.c) by hand, COMMIT. */
static void raw_pglock_sql_begin_lock(ctx *c, int64_t key)
{
    char sql[400], k[24];
    snprintf(k, sizeof k, "%lld", (long long)key);
    snprintf(sql, sizeof sql, "BEGIN; " XACT_WAIT("%s"), k);
    simple(c, sql);
    bench_exec(c->conn, "COMMIT", NULL, PGRES_COMMAND_OK);
}

/* BEGIN, pglock_xact_lock()'s query (a savepoint around the wait) by
 * hand, COMMIT. */
static void raw_pglock_sql_xact_lock(ctx *c, int64_t key)
{
    char sql[400], k[24];
    snprintf(k, sizeof k, "%lld", (long long)key);
    bench_exec(c->conn, "BEGIN", NULL, PGRES_COMMAND_OK);
    snprintf(sql, sizeof sql,
             "SAVEPOINT pglock_xact_lock; " XACT_WAIT(
                 "%s") "; RELEASE SAVEPOINT pglock_xact_lock",
             k);
    simple(c, sql);
    bench_exec(c->conn, "COMMIT", NULL, PGRES_COMMAND_OK);
}

#endif

/* BEGIN and the lock in one round trip (libpq pipeline mode), then COMMIT:
 * the fewest round trips a begin+lock+commit can take. */
static void raw_xact_pipelined(ctx *c, int64_t key)
{
    char text[24];
    const char *values[1] = {text};
    snprintf(text, sizeof text, "%lld", (long long)key);
    if (!PQenterPipelineMode(c->conn) ||
        !PQsendQueryParams(c->conn, "BEGIN", 0, NULL, NULL, NULL, NULL, 0) ||
        !PQsendQueryParams(c->conn, "SELECT pg_advisory_xact_lock($1)", 1, NULL,
                           values, NULL, NULL, 0) ||
        !PQpipelineSync(c->conn))
        bench_die("pipeline: %s", PQerrorMessage(c->conn));
    /* BEGIN's result, NULL, the lock's result, NULL, the sync. */
    for (int i = 0; i < 2; i++) {
        PGresult *res = PQgetResult(c->conn);
        ExecStatusType st = PQresultStatus(res);
        if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK)
            bench_die("pipeline: %s", PQerrorMessage(c->conn));
        PQclear(res);
        if ((res = PQgetResult(c->conn)) != NULL)
            bench_die("pipeline: unexpected result");
    }
    PGresult *res = PQgetResult(c->conn);
    if (PQresultStatus(res) != PGRES_PIPELINE_SYNC)
        bench_die("pipeline: no sync");
    PQclear(res);
    if (!PQexitPipelineMode(c->conn))
        bench_die("pipeline: %s", PQerrorMessage(c->conn));
    bench_exec(c->conn, "COMMIT", NULL, PGRES_COMMAND_OK);
}

#ifdef BENCH_HAVE_PGLOCK
/* ---- pglock's library */

static void check(ctx *c, int rc, const char *what)
{
    if (rc != 0)
        bench_die("%s: %s: %s", what, pglock_err_name(rc),
                  pglock_client_error(c->client));
}

static void pg_heartbeat(ctx *c, int64_t key)
{
    (void)key;
    check(c, pglock_heartbeat(c->client, 10000), "pglock_heartbeat");
}

static void pg_lock_unlock(ctx *c, int64_t key)
{
    pglock_key k;
    pglock_key_int64(&k, key);
    check(c, pglock_lock(c->client, &k, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER),
          "pglock_lock");
    check(c, pglock_unlock(c->client, &k, PGLOCK_EXCLUSIVE), "pglock_unlock");
}

static void pg_lock_timeout_unlock(ctx *c, int64_t key)
{
    pglock_key k;
    pglock_key_int64(&k, key);
    check(c, pglock_lock(c->client, &k, PGLOCK_EXCLUSIVE, 5000), "pglock_lock");
    check(c, pglock_unlock(c->client, &k, PGLOCK_EXCLUSIVE), "pglock_unlock");
}

static void pg_try_unlock(ctx *c, int64_t key)
{
    pglock_key k;
    pglock_key_int64(&k, key);
    check(c, pglock_lock(c->client, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
          "pglock_lock");
    check(c, pglock_unlock(c->client, &k, PGLOCK_EXCLUSIVE), "pglock_unlock");
}

static void pg_xact_begin_lock(ctx *c, int64_t key)
{
    pglock_key k;
    pglock_error err = {0};
    pglock_key_int64(&k, key);
    int rc = pglock_xact_begin_lock(c->conn, &k, PGLOCK_EXCLUSIVE,
                                    PGLOCK_WAIT_FOREVER, -1, &err);
    if (rc != 0)
        bench_die("pglock_xact_begin_lock: %s", err.message);
    bench_exec(c->conn, "COMMIT", NULL, PGRES_COMMAND_OK);
}

static void pg_xact_lock(ctx *c, int64_t key)
{
    pglock_key k;
    pglock_error err = {0};
    pglock_key_int64(&k, key);
    bench_exec(c->conn, "BEGIN", NULL, PGRES_COMMAND_OK);
    int rc = pglock_xact_lock(c->conn, &k, PGLOCK_EXCLUSIVE,
                              PGLOCK_WAIT_FOREVER, -1, &err);
    if (rc != 0)
        bench_die("pglock_xact_lock: %s", err.message);
    bench_exec(c->conn, "COMMIT", NULL, PGRES_COMMAND_OK);
}
#endif

static const op ops[] = {
    {"raw: SELECT 1", NULL, NULL, raw_select1},
    {"raw: pg_advisory_lock + pg_advisory_unlock", NULL, NULL, raw_lock_unlock},
    {"raw: pg_try_advisory_lock + pg_advisory_unlock", NULL, NULL,
     raw_try_unlock},
    {"raw: BEGIN; pg_advisory_xact_lock; COMMIT (3 statements)", NULL, NULL,
     raw_xact_3},
    {"raw: BEGIN + pg_advisory_xact_lock pipelined; COMMIT", NULL, NULL,
     raw_xact_pipelined},
#ifdef BENCH_HAVE_PGLOCK
    {"same SQL: pglock_heartbeat's query", NULL, NULL, raw_heartbeat_sql},
    {"same SQL: pglock_lock's statement + unlock", NULL, NULL,
     raw_pglock_sql_lock_unlock},
    {"same SQL: pglock_lock's try statement + unlock", NULL, NULL,
     raw_pglock_sql_try_unlock},
    {"same SQL: pglock_xact_begin_lock's query + COMMIT", NULL, NULL,
     raw_pglock_sql_begin_lock},
    {"same SQL: BEGIN; pglock_xact_lock's query (savepoint); COMMIT", NULL,
     NULL, raw_pglock_sql_xact_lock},
    {"pglock_heartbeat", "raw: SELECT 1", "same SQL: pglock_heartbeat's query",
     pg_heartbeat},
    {"pglock_lock (wait) + pglock_unlock",
     "raw: pg_advisory_lock + pg_advisory_unlock",
     "same SQL: pglock_lock's statement + unlock", pg_lock_unlock},
    {"pglock_lock (5 s timeout) + pglock_unlock",
     "raw: pg_advisory_lock + pg_advisory_unlock",
     "same SQL: pglock_lock's statement + unlock", pg_lock_timeout_unlock},
    {"pglock_lock (try) + pglock_unlock",
     "raw: pg_try_advisory_lock + pg_advisory_unlock",
     "same SQL: pglock_lock's try statement + unlock", pg_try_unlock},
    {"pglock_xact_begin_lock + COMMIT",
     "raw: BEGIN + pg_advisory_xact_lock pipelined; COMMIT",
     "same SQL: pglock_xact_begin_lock's query + COMMIT", pg_xact_begin_lock},
    {"BEGIN; pglock_xact_lock; COMMIT",
     "raw: BEGIN; pg_advisory_xact_lock; COMMIT (3 statements)",
     "same SQL: BEGIN; pglock_xact_lock's query (savepoint); COMMIT",
     pg_xact_lock},
#endif
};
enum { NOPS = sizeof ops / sizeof ops[0] };

static void ctx_open(ctx *c, const char *conninfo)
{
    c->conn = bench_connect(conninfo);
#ifdef BENCH_HAVE_PGLOCK
    c->client = bench_pglock_open(conninfo);
#endif
}

static void ctx_close(ctx *c)
{
    PQfinish(c->conn);
#ifdef BENCH_HAVE_PGLOCK
    pglock_client_close(c->client);
#endif
}

static int find_op(const char *name)
{
    for (int i = 0; i < NOPS; i++)
        if (strcmp(ops[i].name, name) == 0)
            return i;
    return -1;
}

int main(int argc, char **argv)
{
    const char *conninfo = NULL, *label = "", *count_conninfo = NULL,
               *count_ctl = NULL;
    int reps = 7, iters = 1000;
    static const struct option longopts[] = {
        {"conninfo", required_argument, NULL, 'c'},
        {"label", required_argument, NULL, 'l'},
        {"reps", required_argument, NULL, 'r'},
        {"iters", required_argument, NULL, 'n'},
        {"count-conninfo", required_argument, NULL, 'C'},
        {"count-ctl", required_argument, NULL, 'X'},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            conninfo = optarg;
            break;
        case 'l':
            label = optarg;
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        case 'n':
            iters = atoi(optarg);
            break;
        case 'C':
            count_conninfo = optarg;
            break;
        case 'X':
            count_ctl = optarg;
            break;
        default:
            return 64;
        }
    }
    if (reps < 1 || iters < 1)
        bench_die("--reps and --iters must be positive");

    /* Round trips per operation, counted at the proxy on its own pass (the
     * proxy's extra hop would distort the timings). */
    double rt[NOPS];
    for (int o = 0; o < NOPS; o++)
        rt[o] = -1;
    if (count_conninfo && count_ctl) {
        ctx c;
        ctx_open(&c, count_conninfo);
        enum { COUNT_ITERS = 50 };
        for (int o = 0; o < NOPS; o++) {
            if (bench_proxy_reset(count_ctl) < 0)
                break;
            for (int i = 0; i < COUNT_ITERS; i++)
                ops[o].run(&c, 7000 + o);
            long n = bench_proxy_roundtrips(count_ctl);
            if (n >= 0)
                rt[o] = (double)n / COUNT_ITERS;
        }
        ctx_close(&c);
    }

    ctx c;
    ctx_open(&c, conninfo);
    double *us = calloc((size_t)NOPS * reps, sizeof *us);
    if (!us)
        bench_die("out of memory");
    for (int o = 0; o < NOPS; o++) /* warm up: caches, plans, the backend */
        for (int i = 0; i < iters / 10 + 1; i++)
            ops[o].run(&c, 8000 + o);
    for (int r = 0; r < reps; r++) {
        for (int o = 0; o < NOPS; o++) {
            int64_t t0 = bench_now_ns();
            for (int i = 0; i < iters; i++)
                ops[o].run(&c, 8000 + o);
            us[o * reps + r] = (double)(bench_now_ns() - t0) / iters / 1000.0;
        }
    }
    ctx_close(&c);

    printf("%s%s%d repetitions × %d operations each, µs per operation.\n\n",
           label, *label ? ": " : "", reps, iters);
    printf(
        "| operation | round trips | µs/op median (min–max) | ratio to the limit "
        "| ratio to the same SQL by hand |\n");
    printf("|---|---:|---:|---|---|\n");
    for (int o = 0; o < NOPS; o++) {
        char rtbuf[32], spread[96], ratio[2][160];
        double tmp[reps > 0 ? reps : 1];
        if (rt[o] >= 0)
            snprintf(rtbuf, sizeof rtbuf, "%.2g", rt[o]);
        else
            snprintf(rtbuf, sizeof rtbuf, "not counted");
        memcpy(tmp, &us[o * reps], sizeof tmp);
        bench_spread(spread, sizeof spread, "%.1f", tmp, (size_t)reps);
        const char *names[2] = {ops[o].baseline, ops[o].same_sql};
        for (int k = 0; k < 2; k++) {
            int b = names[k] ? find_op(names[k]) : -1;
            snprintf(ratio[k], sizeof ratio[k], "–");
            if (b < 0)
                continue;
            char s[96];
            for (int r = 0; r < reps; r++)
                tmp[r] = us[o * reps + r] / us[b * reps + r];
            bench_spread(s, sizeof s, "%.3f", tmp, (size_t)reps);
            if (k == 0)
                snprintf(ratio[k], sizeof ratio[k], "%s × `%s`", s,
                         ops[b].name + strlen("raw: "));
            else
                snprintf(ratio[k], sizeof ratio[k], "%s", s);
        }
        printf("| %s | %s | %s | %s | %s |\n", ops[o].name, rtbuf, spread,
               ratio[0], ratio[1]);
    }
    printf("\n");
    free(us);
    return 0;
}
