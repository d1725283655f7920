/*
 * bench_sql_variants — what each form of the lock statement costs the
 * server, the figures behind the statement pglock sends.  One
 * connection, one key per variant, no contention: each variant's statements (a lock and its unlock, or one heartbeat) are
 * sent N times in a row, and the backend's CPU time is read before and
 * after from /proc/PID/schedstat (ns) and /proc/PID/stat (utime + stime,
 * in clock ticks), beside the wall time.  Variants run in interleaved
 * rounds, forwards then backwards (A B C … C B A …), so that a machine
 * that drifts weighs on all of them alike; the report gives per variant
 * the median and min–max over rounds, and the median and 10th–90th
 * percentiles of the per-round ratios to the first variant (raw libpq,
 * the limit).  Many short rounds interleave finer than a few long ones.
 *
 *   bench_sql_variants --conninfo CONNINFO [--iters N] [--rounds N] [--pin]
 *                      [--only I,J,...]
 *
 * --pin puts the client and its backend on one CPU (as the contention
 * benchmarks do), so that every round of every variant crosses the same
 * way.  --only runs the listed variants (numbered from 0; the ratios are
 * then to the first listed), e.g. two to compare closely, or one alone to
 * profile its backend, whose pid goes to stderr first (perf record -g -p
 * PID).  The server must be on this machine (its backend's /proc entries).
 */
#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define INT8OID 20
#define MAX_ROUNDS 400

/* How a statement goes to the server. */
typedef enum how {
    EXT_TEXT,   /* PQexecParams, text parameter, type left to the server */
    EXT_TYPED,  /* PQexecParams, text parameter declared int8 */
    EXT_BINARY, /* PQexecParams, binary int8 parameter */
    EXT_NONE,   /* PQexecParams, no parameter */
    SIMPLE,     /* PQexec, the key as a literal (%lld in sql) */
    PREPARED    /* PQexecPrepared of a statement prepared once */
} how;

typedef struct stmt {
    const char *sql; /* NULL: no statement */
    how how;
    int expect_true; /* column `col` must be 't' (try, unlock) */
    int col;
    int lock_timeout; /* $1 is lock_timeout ("0"), the key $2 */
} stmt;

typedef struct variant {
    const char *name;
    stmt s[2];
} variant;

#define EXT(sql, col) \
    { \
        sql, EXT_TEXT, 1, col, 0 \
    }
#define UNLOCK_RAW EXT("SELECT pg_advisory_unlock($1)", 0)
#define UNLOCK_NOW EXT("SELECT pg_advisory_unlock($1::int8)", 0)

static const variant variants[] = {
    {"raw libpq: `SELECT pg_advisory_lock($1)` + `…unlock($1)`",
     {{"SELECT pg_advisory_lock($1)", EXT_TEXT, 0, 0, 0}, UNLOCK_RAW}},
    {"pglock before, a column more: `SELECT NULL, pg_advisory_lock($1::int8)` + `…unlock($1::int8)`",
     {{"SELECT NULL, pg_advisory_lock($1::int8)", EXT_TEXT, 0, 0, 0},
      UNLOCK_NOW}},
    {"pglock before, lock_timeout changing: `SELECT set_config('lock_timeout', $1, false), "
     "pg_advisory_lock($2::int8)` + unlock",
     {{"SELECT set_config('lock_timeout', $1, false), pg_advisory_lock($2::int8)",
       EXT_TEXT, 0, 0, 1},
      UNLOCK_NOW}},
    {"no NULL column: `SELECT pg_advisory_lock($1::int8)` + unlock",
     {{"SELECT pg_advisory_lock($1::int8)", EXT_TEXT, 0, 0, 0}, UNLOCK_NOW}},
    {"NULL column, no cast: `SELECT NULL, pg_advisory_lock($1)` + `…unlock($1)`",
     {{"SELECT NULL, pg_advisory_lock($1)", EXT_TEXT, 0, 0, 0}, UNLOCK_RAW}},
    {"`$1::bigint`: `SELECT pg_advisory_lock($1::bigint)` + `…unlock($1::bigint)`",
     {{"SELECT pg_advisory_lock($1::bigint)", EXT_TEXT, 0, 0, 0},
      EXT("SELECT pg_advisory_unlock($1::bigint)", 0)}},
    {"pglock now: `SELECT pg_advisory_lock($1)` + `…unlock($1)`, $1 declared int8 (paramTypes)",
     {{"SELECT pg_advisory_lock($1)", EXT_TYPED, 0, 0, 0},
      {"SELECT pg_advisory_unlock($1)", EXT_TYPED, 1, 0, 0}}},
    {"binary int8 parameter, no cast",
     {{"SELECT pg_advisory_lock($1)", EXT_BINARY, 0, 0, 0},
      {"SELECT pg_advisory_unlock($1)", EXT_BINARY, 1, 0, 0}}},
    {"simple protocol: `SELECT pg_advisory_lock(K)` + `…unlock(K)`",
     {{"SELECT pg_advisory_lock(%lld)", SIMPLE, 0, 0, 0},
      {"SELECT pg_advisory_unlock(%lld)", SIMPLE, 1, 0, 0}}},
    {"simple protocol, pglock's literal: `…lock((K)::int8)` + `…unlock((K)::int8)`",
     {{"SELECT pg_advisory_lock((%lld)::int8)", SIMPLE, 0, 0, 0},
      {"SELECT pg_advisory_unlock((%lld)::int8)", SIMPLE, 1, 0, 0}}},
    {"named prepared statements: `pg_advisory_lock($1::int8)` + unlock",
     {{"SELECT pg_advisory_lock($1::int8)", PREPARED, 0, 0, 0},
      {"SELECT pg_advisory_unlock($1::int8)", PREPARED, 1, 0, 0}}},
    {"try, raw libpq: `SELECT pg_try_advisory_lock($1)` + `…unlock($1)`",
     {EXT("SELECT pg_try_advisory_lock($1)", 0), UNLOCK_RAW}},
    {"try, pglock before: `SELECT NULL, pg_try_advisory_lock($1::int8)` + unlock",
     {EXT("SELECT NULL, pg_try_advisory_lock($1::int8)", 1), UNLOCK_NOW}},
    {"try, no NULL column: `SELECT pg_try_advisory_lock($1::int8)` + unlock",
     {EXT("SELECT pg_try_advisory_lock($1::int8)", 0), UNLOCK_NOW}},
    {"try, pglock now: `SELECT pg_try_advisory_lock($1)` + unlock, $1 declared int8",
     {{"SELECT pg_try_advisory_lock($1)", EXT_TYPED, 1, 0, 0},
      {"SELECT pg_advisory_unlock($1)", EXT_TYPED, 1, 0, 0}}},
    {"two `SELECT 1` (simple): the floor of two round trips",
     {{"SELECT 1", SIMPLE, 0, 0, 0}, {"SELECT 1", SIMPLE, 0, 0, 0}}},
    {"heartbeat, as pglock sends it: `SELECT pg_backend_pid()` (simple), one",
     {{"SELECT pg_backend_pid()", SIMPLE, 0, 0, 0}, {NULL, SIMPLE, 0, 0, 0}}},
    {"heartbeat, extended protocol: `SELECT pg_backend_pid()`, one",
     {{"SELECT pg_backend_pid()", EXT_NONE, 0, 0, 0}, {NULL, SIMPLE, 0, 0, 0}}},
    /* A/A/B: the session heartbeat without and with the stop-request try
     * that run's and lead's holds add (src/lib/stop_request.c); the same
     * statement twice is the control. */
    {"heartbeat, no stop request watched: `SELECT pg_backend_pid() WHERE "
     "clock_timestamp() IS NOT NULL` (simple), one",
     {{"SELECT pg_backend_pid() WHERE clock_timestamp() IS NOT NULL", SIMPLE, 0,
       0, 0},
      {NULL, SIMPLE, 0, 0, 0}}},
    {"the same again (A/A control)",
     {{"SELECT pg_backend_pid() WHERE clock_timestamp() IS NOT NULL", SIMPLE, 0,
       0, 0},
      {NULL, SIMPLE, 0, 0, 0}}},
    {"heartbeat watching stop requests: `SELECT pg_backend_pid(), "
     "pg_try_advisory_xact_lock('K'::int8) WHERE …` (simple), one",
     {{"SELECT pg_backend_pid(), pg_try_advisory_xact_lock('%lld'::int8) "
       "WHERE clock_timestamp() IS NOT NULL",
       SIMPLE, 0, 0, 0},
      {NULL, SIMPLE, 0, 0, 0}}},
};
#define NVARIANTS (sizeof variants / sizeof variants[0])

/* The backend's CPU: schedstat's ns on CPU, and stat's utime + stime in
 * ticks; -1 when unreadable. */
typedef struct cpu {
    long long ns, ticks;
} cpu;

static cpu read_cpu(int pid)
{
    cpu c = {-1, -1};
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%lld", &c.ns) != 1)
            c.ns = -1;
        fclose(f);
    }
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (f) {
        char buf[1024];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        /* Fields after the command's closing parenthesis: state is the
         * 3rd field, utime the 14th, stime the 15th. */
        char *p = strrchr(buf, ')');
        unsigned long ut, st;
        if (p && sscanf(p + 2,
                        "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u "
                        "%lu %lu",
                        &ut, &st) == 2)
            c.ticks = (long long)(ut + st);
    }
    return c;
}

typedef struct conn_state {
    PGconn *conn;
    int pid;
} conn_state;

static void check(PGconn *conn, PGresult *res, const stmt *s)
{
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1)
        bench_die("%s: %s", s->sql, PQerrorMessage(conn));
    if (s->expect_true && PQgetvalue(res, 0, s->col)[0] != 't')
        bench_die("%s: answered %s, not true", s->sql,
                  PQgetvalue(res, 0, s->col));
    PQclear(res);
}

static void statement_name(char *buf, size_t len, size_t v, int i)
{
    snprintf(buf, len, "bench_v%zu_%d", v, i);
}

/* Sends one statement of variant v with key, and checks its answer. */
static void run_stmt(PGconn *conn, size_t v, int i, const stmt *s,
                     long long key)
{
    char text[24], sql[160], name[32];
    unsigned char be[8];
    snprintf(text, sizeof text, "%lld", key);
    const char *values[2] = {text, NULL};
    if (s->lock_timeout) {
        values[0] = "0";
        values[1] = text;
    }
    int nparams = s->lock_timeout ? 2 : 1;
    PGresult *res;
    switch (s->how) {
    case EXT_TEXT:
        res = PQexecParams(conn, s->sql, nparams, NULL, values, NULL, NULL, 0);
        break;
    case EXT_TYPED: {
        const Oid types[1] = {INT8OID};
        res = PQexecParams(conn, s->sql, 1, types, values, NULL, NULL, 0);
        break;
    }
    case EXT_BINARY: {
        const Oid types[1] = {INT8OID};
        const int lengths[1] = {8}, formats[1] = {1};
        for (int b = 0; b < 8; b++) /* network byte order */
            be[b] = (unsigned char)((unsigned long long)key >> (8 * (7 - b)));
        const char *bin[1] = {(const char *)be};
        res = PQexecParams(conn, s->sql, 1, types, bin, lengths, formats, 0);
        break;
    }
    case EXT_NONE:
        res = PQexecParams(conn, s->sql, 0, NULL, NULL, NULL, NULL, 0);
        break;
    case SIMPLE:
        snprintf(sql, sizeof sql, s->sql, key);
        res = PQexec(conn, sql);
        break;
    case PREPARED:
    default:
        statement_name(name, sizeof name, v, i);
        res = PQexecPrepared(conn, name, nparams, values, NULL, NULL, 0);
        break;
    }
    check(conn, res, s);
}

typedef struct sample {
    double cpu_us, tick_us, wall_us; /* per iteration */
} sample;

static sample run_variant(conn_state *cs, size_t v, int iters)
{
    const variant *var = &variants[v];
    long long key = 3131000 + (long long)v;
    long hz = sysconf(_SC_CLK_TCK);
    cpu c0 = read_cpu(cs->pid);
    int64_t t0 = bench_now_ns();
    for (int n = 0; n < iters; n++)
        for (int i = 0; i < 2 && var->s[i].sql; i++)
            run_stmt(cs->conn, v, i, &var->s[i], key);
    int64_t t1 = bench_now_ns();
    cpu c1 = read_cpu(cs->pid);
    sample s = {-1, -1, (double)(t1 - t0) / 1e3 / iters};
    if (c0.ns >= 0 && c1.ns >= 0)
        s.cpu_us = (double)(c1.ns - c0.ns) / 1e3 / iters;
    if (c0.ticks >= 0 && c1.ticks >= 0 && hz > 0)
        s.tick_us = (double)(c1.ticks - c0.ticks) * 1e6 / (double)hz / iters;
    return s;
}

static void prepare_all(PGconn *conn)
{
    char name[32];
    for (size_t v = 0; v < NVARIANTS; v++)
        for (int i = 0; i < 2; i++) {
            const stmt *s = &variants[v].s[i];
            if (!s->sql || s->how != PREPARED)
                continue;
            statement_name(name, sizeof name, v, i);
            PGresult *res = PQprepare(conn, name, s->sql, 0, NULL);
            if (PQresultStatus(res) != PGRES_COMMAND_OK)
                bench_die("prepare %s: %s", s->sql, PQerrorMessage(conn));
            PQclear(res);
        }
}

/* "median (min–max)" of n values, or "n/a" when any is unknown. */
static const char *spread(char *buf, size_t len, const double *v, size_t n)
{
    double copy[MAX_ROUNDS];
    for (size_t i = 0; i < n; i++) {
        if (v[i] < 0) {
            snprintf(buf, len, "n/a");
            return buf;
        }
        copy[i] = v[i];
    }
    return bench_spread(buf, len, "%.1f", copy, n);
}

static double median(const double *v, size_t n)
{
    double copy[MAX_ROUNDS];
    memcpy(copy, v, n * sizeof *v);
    return bench_quantile(copy, n, 0.5);
}

int main(int argc, char **argv)
{
    const char *conninfo = NULL;
    int iters = 500, rounds = 81, pin = 0;
    size_t sel[NVARIANTS], nsel = NVARIANTS;
    for (size_t v = 0; v < NVARIANTS; v++)
        sel[v] = v;
    static const struct option longopts[] = {
        {"conninfo", required_argument, NULL, 'd'},
        {"iters", required_argument, NULL, 'i'},
        {"rounds", required_argument, NULL, 'r'},
        {"pin", no_argument, NULL, 'p'},
        {"only", required_argument, NULL, 'o'},
        {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (o == 'd')
            conninfo = optarg;
        else if (o == 'i')
            iters = atoi(optarg);
        else if (o == 'r')
            rounds = atoi(optarg);
        else if (o == 'p')
            pin = 1;
        else if (o == 'o') {
            nsel = 0;
            for (char *p = optarg; *p && nsel < NVARIANTS; p += *p == ',') {
                char *end;
                long v = strtol(p, &end, 10);
                if (end == p || v < 0 || v >= (long)NVARIANTS ||
                    (*end && *end != ','))
                    bench_die("--only: invalid variant list %s", optarg);
                sel[nsel++] = (size_t)v;
                p = end;
            }
        } else
            bench_die(
                "usage: bench_sql_variants --conninfo C [--iters N] [--rounds N] [--pin] [--only I,J,...]");
    }
    if (!conninfo || iters < 1 || rounds < 1 || rounds > MAX_ROUNDS ||
        nsel == 0)
        bench_die(
            "usage: bench_sql_variants --conninfo C [--iters N] [--rounds N] [--pin] [--only I,J,...]");

    conn_state cs = {bench_connect(conninfo), 0};
    cs.pid = PQbackendPID(cs.conn);
    if (read_cpu(cs.pid).ns < 0)
        bench_die(
            "cannot read /proc/%d/schedstat: the server must run on this machine",
            cs.pid);
    if (pin && (bench_pin(0, 0) != 0 || bench_pin(cs.pid, 0) != 0))
        bench_die("could not pin the client and backend %d to one CPU", cs.pid);
    prepare_all(cs.conn);
    fprintf(stderr, "bench_sql_variants: backend pid %d\n", cs.pid);

    /* Warm up: plans cached, the prepared statements past their custom
     * plans, the backend's caches filled. */
    for (size_t k = 0; k < nsel; k++)
        run_variant(&cs, sel[k], iters / 10 + 10);

    static sample s[NVARIANTS][MAX_ROUNDS];
    for (int r = 0; r < rounds; r++)
        for (size_t k = 0; k < nsel; k++) {
            size_t v = sel[r % 2 == 0 ? k : nsel - 1 - k];
            s[v][r] = run_variant(&cs, v, iters);
        }
    if (pin) {
        bench_unpin(cs.pid);
        bench_unpin(0);
    }
    PQfinish(cs.conn);

    printf(
        "| variant | backend CPU µs per iteration, median (min–max) "
        "| ÷ first row, median (10th–90th pct) of rounds "
        "| utime+stime µs | wall µs per iteration |\n|---|---|---|---|---|\n");
    size_t base = sel[0];
    for (size_t k = 0; k < nsel; k++) {
        size_t v = sel[k];
        double cpu[MAX_ROUNDS], tick[MAX_ROUNDS], wall[MAX_ROUNDS],
            ratio[MAX_ROUNDS];
        for (int r = 0; r < rounds; r++) {
            cpu[r] = s[v][r].cpu_us;
            tick[r] = s[v][r].tick_us;
            wall[r] = s[v][r].wall_us;
            ratio[r] = s[base][r].cpu_us > 0
                           ? s[v][r].cpu_us / s[base][r].cpu_us
                           : -1;
        }
        char a[64], b[64], c[64], d[80];
        spread(a, sizeof a, cpu, (size_t)rounds);
        spread(b, sizeof b, tick, (size_t)rounds);
        spread(c, sizeof c, wall, (size_t)rounds);
        double rq = median(ratio, (size_t)rounds);
        double r10 = bench_quantile(ratio, (size_t)rounds, 0.1);
        double r90 = bench_quantile(ratio, (size_t)rounds, 0.9);
        if (rq > 0)
            snprintf(d, sizeof d, "%.3f × (%.3f–%.3f)", rq, r10, r90);
        else
            snprintf(d, sizeof d, "n/a");
        printf("| %zu. %s | %s | %s | %s | %s |\n", v, variants[v].name, a, d,
               b, c);
    }
    printf("\n%d rounds of %d iterations per variant%s; backend pid %d.\n",
           rounds, iters, pin ? ", client and backend pinned to one CPU" : "",
           cs.pid);
    return 0;
}
