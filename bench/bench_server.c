/*
 * bench_server — the server's cost per holder.  With 0, 10,000 and
 * 100,000 advisory locks held by another session: the latency and the
 * server CPU (the backend's own, from /proc/PID/schedstat) of pglock's
 * heartbeat, in session and in xact hold, against `SELECT pg_backend_pid()`
 * (the floor: one round trip that proves the same backend answers) and
 * against the heartbeat pglock sent before (the same backend's locks
 * looked up in pg_locks, sent by hand).  Then N library clients holding a
 * lock each and heartbeating at the default lease's interval (T_h 5 s),
 * for a while, and as many raw connections running the floor at the same
 * pace: the server CPU they take.
 *
 *   bench_server --conninfo CONNINFO [--counts 0,10000,100000] [--iters N]
 *                [--reps N] [--holders N] [--hold-ms MS] [--settle-ms MS]
 */
#include "bench.h"

#include <getopt.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pglock.h"

#define MAX_REPS 32
#define HEARTBEAT_MS 5000 /* a 30 s lease / 6, as pglock run heartbeats */
#define BEFORE_SQL \
    "SELECT pg_backend_pid(), (SELECT count(*) FROM" \
    " unnest('{0}'::oid[], '{777000}'::oid[], '{1}'::int2[]," \
    " '{ExclusiveLock}'::text[]) AS k(c, o, s, m)" \
    " WHERE NOT EXISTS (SELECT 1 FROM pg_locks l" \
    "  WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()" \
    "  AND l.granted AND l.classid = k.c AND l.objid = k.o" \
    "  AND l.objsubid = k.s AND l.mode = k.m))"
/* The session heartbeat of run's and lead's holds, which watch for stop
 * requests (heartbeat.c's send_watching(), stop_request.c): the floor and
 * a try of the lock's stop-request key, given back at the statement's
 * end.  By hand, as BEFORE_SQL: the library sends it only from a hold's
 * thread, which times nothing. */
#define WATCHING_SQL \
    "SELECT pg_backend_pid(), pg_try_advisory_xact_lock('777003'::int8)"

/* CPU time a process has run, in ns (/proc/PID/schedstat), or -1. */
static int64_t cpu_ns(int pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/schedstat", pid);
    FILE *f = fopen(path, "r");
    long long ns = -1;
    if (f) {
        if (fscanf(f, "%lld", &ns) != 1)
            ns = -1;
        fclose(f);
    }
    return ns;
}

typedef struct sample {
    double wall_us, cpu_us; /* per operation; cpu_us < 0: unknown */
} sample;

/* One way to confirm possession, timed iters times on its backend. */
typedef struct prover {
    const char *name;
    PGconn *raw; /* a raw query on it, or */
    const char *sql;
    pglock_client *client; /* a pglock heartbeat */
} prover;

static int prover_pid(const prover *p)
{
    return p->client ? pglock_client_backend_pid(p->client)
                     : PQbackendPID(p->raw);
}

static sample run_prover(const prover *p, int iters)
{
    int pid = prover_pid(p);
    int64_t c0 = cpu_ns(pid), t0 = bench_now_ns();
    for (int i = 0; i < iters; i++) {
        if (p->client) {
            int rc = pglock_heartbeat(p->client, 60000);
            if (rc != 0)
                bench_die("heartbeat: %s: %s", pglock_err_name(rc),
                          pglock_client_error(p->client));
        } else {
            bench_exec(p->raw, p->sql, NULL, PGRES_TUPLES_OK);
        }
    }
    int64_t t1 = bench_now_ns(), c1 = cpu_ns(pid);
    sample s = {(double)(t1 - t0) / iters / 1000.0,
                c0 < 0 || c1 < 0 ? -1 : (double)(c1 - c0) / iters / 1000.0};
    return s;
}

static pglock_client *holder(const char *conninfo, pglock_lifetime hold,
                             int64_t key)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = hold;
    o.application_name = "pglock-bench";
    pglock_client *c = NULL;
    int rc = pglock_client_open(&c, conninfo, &o);
    if (rc != 0)
        bench_die("pglock_client_open: %s",
                  c ? pglock_client_error(c) : pglock_strerror(rc));
    pglock_key k;
    pglock_key_int64(&k, key);
    rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY);
    if (rc != 0)
        bench_die("lock: %s", pglock_client_error(c));
    return c;
}

/* The filler session takes advisory locks (777, i) up to count. */
static void fill_to(PGconn *filler, long *held, long count)
{
    if (count <= *held)
        return;
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(pg_advisory_lock(777, g::int))"
             " FROM generate_series(%ld, %ld) g",
             *held + 1, count);
    bench_exec(filler, sql, NULL, PGRES_TUPLES_OK);
    *held = count;
}

static void print_cell(const char *fmt, double *v, size_t n)
{
    char buf[96];
    printf(" %s |", n ? bench_spread(buf, sizeof buf, fmt, v, n) : "n/a");
}

#define MAX_PROVERS 8

/* The latency and CPU table for one lock count (np <= MAX_PROVERS). */
static void measure_count(prover *pv, int np, long count, int iters, int reps)
{
    double wall[MAX_PROVERS][MAX_REPS], cpu[MAX_PROVERS][MAX_REPS];
    double ratio[MAX_PROVERS][MAX_REPS];
    size_t ncpu[MAX_PROVERS] = {0};
    for (int r = 0; r < reps; r++) {
        for (int i = 0; i < np; i++) {
            /* the pg_locks query costs ~10 µs per lock held: fewer turns */
            int n = pv[i].sql && strstr(pv[i].sql, "pg_locks")
                        ? (count > 1000 ? 5 : iters / 4 + 1)
                        : iters;
            sample s = run_prover(&pv[i], n);
            wall[i][r] = s.wall_us;
            if (s.cpu_us >= 0)
                cpu[i][ncpu[i]++] = s.cpu_us;
        }
        for (int i = 0; i < np; i++)
            ratio[i][r] = wall[i][r] / wall[0][r];
    }
    for (int i = 0; i < np; i++) {
        printf("| %ld | %s |", count, pv[i].name);
        print_cell("%.1f", wall[i], (size_t)reps);
        if (i)
            print_cell("%.2f", ratio[i], (size_t)reps);
        else
            printf(" 1 |");
        print_cell("%.1f", cpu[i], ncpu[i]);
        printf("\n");
    }
}

/* A new backend flushes the statistics of its first statements once,
 * PGSTAT_IDLE_INTERVAL (10 s) after them: a one-time cost, about 1 % of a
 * core for 200 new backends during a 10 s window, that is not the fleet's
 * steady state.  The fleet waits it out (--settle-ms) before measuring. */
#define SETTLE_MS 11000

/* The backend pid of fleet member i. */
static int member_pid(pglock_client **c, PGconn **raw, int i)
{
    return c ? pglock_client_backend_pid(c[i]) : PQbackendPID(raw[i]);
}

/* n clients each holding one lock and proving it every HEARTBEAT_MS, at
 * phases spread over the interval, for ms: prints the server CPU their
 * backends took.  The clients are pglock's (a heartbeat), or with raw
 * libpq connections running the floor, SELECT pg_backend_pid(): at a
 * fleet's pace every backend's caches have gone cold by its next turn,
 * and any query costs far more than in a loop; the floor fleet shows
 * how much. */
static void fleet(const char *conninfo, int n, long ms, long settle_ms,
                  long others, int raw)
{
    pglock_client **c = raw ? NULL : calloc((size_t)n, sizeof *c);
    PGconn **conns = raw ? calloc((size_t)n, sizeof *conns) : NULL;
    int64_t *next = calloc((size_t)n, sizeof *next);
    if ((!c && !conns) || !next)
        bench_die("out of memory");
    for (int i = 0; i < n; i++) {
        if (raw) {
            conns[i] = bench_connect(conninfo);
            int64_t key = 778000000 + i;
            bench_exec(conns[i], "SELECT pg_advisory_lock($1)", &key,
                       PGRES_TUPLES_OK);
        } else {
            c[i] = holder(conninfo, PGLOCK_LIFETIME_SESSION, 778000000 + i);
            /* a holder's steady state: its backend's caches are warm */
            if (pglock_heartbeat(c[i], 60000) != 0)
                bench_die("heartbeat: %s", pglock_client_error(c[i]));
        }
    }
    poll(NULL, 0, (int)settle_ms);
    int64_t start = pglock_now_ms(), cpu0 = 0, beats = 0;
    for (int i = 0; i < n; i++) {
        next[i] = start + (int64_t)HEARTBEAT_MS * i / n;
        int64_t ns = cpu_ns(member_pid(c, conns, i));
        cpu0 = ns < 0 || cpu0 < 0 ? -1 : cpu0 + ns;
    }
    int64_t now;
    while ((now = pglock_now_ms()) < start + ms) {
        int64_t wake = start + ms;
        for (int i = 0; i < n; i++) {
            if (next[i] <= now) {
                if (raw) {
                    bench_exec(conns[i], "SELECT pg_backend_pid()", NULL,
                               PGRES_TUPLES_OK);
                } else if (pglock_heartbeat(c[i], 60000) != 0) {
                    bench_die("heartbeat: %s", pglock_client_error(c[i]));
                }
                beats++;
                next[i] += HEARTBEAT_MS;
            }
            if (next[i] < wake)
                wake = next[i];
        }
        now = pglock_now_ms();
        if (wake > now)
            poll(NULL, 0, (int)(wake - now));
    }
    /* the window ends here, not after the closes (a pglock client's
     * close unlocks first: 200 of them took seconds) */
    double secs = (double)(pglock_now_ms() - start) / 1000.0;
    int64_t cpu1 = 0;
    for (int i = 0; i < n; i++) {
        int64_t ns = cpu_ns(member_pid(c, conns, i));
        cpu1 = ns < 0 || cpu1 < 0 ? -1 : cpu1 + ns;
    }
    for (int i = 0; i < n; i++) {
        if (raw)
            PQfinish(conns[i]);
        else
            pglock_client_close(c[i]);
    }
    const char *who = raw ? "raw libpq, `SELECT pg_backend_pid()` (the floor)"
                          : "pglock heartbeat";
    if (cpu0 < 0 || cpu1 < 0)
        printf(
            "| %d | %s | %ld | %.1f | n/a (the server is not on this machine) | n/a |\n",
            n, who, others, (double)beats / secs);
    else
        printf("| %d | %s | %ld | %.1f | %.3f %% | %.1f |\n", n, who, others,
               (double)beats / secs, (double)(cpu1 - cpu0) / 1e7 / secs,
               (double)(cpu1 - cpu0) / 1000.0 / (double)(beats ? beats : 1));
    free(next);
    free(c);
    free(conns);
}

static long *parse_counts(const char *s, int *n)
{
    static long v[16];
    *n = 0;
    for (char *end; *s && *n < 16; s = *end ? end + 1 : end) {
        v[(*n)++] = strtol(s, &end, 10);
        if (end == s)
            bench_die("bad --counts");
    }
    return v;
}

int main(int argc, char **argv)
{
    const char *conninfo = NULL, *counts_arg = "0,10000,100000";
    int iters = 500, reps = 5, holders = 200;
    long hold_ms = 10000, settle_ms = SETTLE_MS;
    static const struct option longopts[] = {
        {"conninfo", required_argument, NULL, 'd'},
        {"counts", required_argument, NULL, 'c'},
        {"iters", required_argument, NULL, 'i'},
        {"reps", required_argument, NULL, 'r'},
        {"holders", required_argument, NULL, 'n'},
        {"hold-ms", required_argument, NULL, 't'},
        {"settle-ms", required_argument, NULL, 's'},
        {NULL, 0, NULL, 0}};
    for (int o; (o = getopt_long(argc, argv, "", longopts, NULL)) != -1;) {
        if (o == 'd')
            conninfo = optarg;
        else if (o == 'c')
            counts_arg = optarg;
        else if (o == 'i')
            iters = atoi(optarg);
        else if (o == 'r')
            reps = atoi(optarg);
        else if (o == 'n')
            holders = atoi(optarg);
        else if (o == 't')
            hold_ms = atol(optarg);
        else if (o == 's')
            settle_ms = atol(optarg);
        else
            bench_die(
                "usage: bench_server --conninfo C [--counts L] "
                "[--iters N] [--reps N] [--holders N] [--hold-ms MS] [--settle-ms MS]");
    }
    if (!conninfo || iters < 1 || reps < 1 || reps > MAX_REPS ||
        settle_ms < 0 || settle_ms > 600000)
        bench_die("--conninfo is required; --reps 1..%d; --settle-ms 0..600000",
                  MAX_REPS);
    int ncounts;
    long *counts = parse_counts(counts_arg, &ncounts);

    PGconn *filler = bench_connect(conninfo), *raw = bench_connect(conninfo);
    PGconn *raw_again = bench_connect(conninfo);
    PGconn *before = bench_connect(conninfo);
    PGconn *watching = bench_connect(conninfo);
    bench_exec(watching, "SELECT pg_advisory_lock(777004)", NULL,
               PGRES_TUPLES_OK);
    bench_exec(before, "SELECT pg_advisory_lock(777000)", NULL,
               PGRES_TUPLES_OK);
    /* The floor twice: the second, an A/A control, shows how far this
     * machine alone moves a ratio to the floor. */
    enum { NPROVERS = 6 }; /* <= MAX_PROVERS */
    prover pv[NPROVERS] = {
        {"`SELECT pg_backend_pid()` (the floor)", raw,
         "SELECT pg_backend_pid()", NULL},
        {"the floor again, another connection (A/A control)", raw_again,
         "SELECT pg_backend_pid()", NULL},
        {"pglock heartbeat, session hold", NULL, NULL,
         holder(conninfo, PGLOCK_LIFETIME_SESSION, 777001)},
        {"pglock heartbeat, xact hold", NULL, NULL,
         holder(conninfo, PGLOCK_LIFETIME_XACT, 777002)},
        {"run's and lead's session heartbeat, watching for stop requests "
         "(its SQL, by hand)",
         watching, WATCHING_SQL, NULL},
        {"before: the heartbeat that read `pg_locks` (by hand)", before,
         BEFORE_SQL, NULL}};

    /* every compared round trip crosses the same CPUs (see bench_pin) */
    int pinned = bench_pin(0, 0) == 0;
    for (int i = 0; i < NPROVERS; i++)
        pinned = pinned && bench_pin(prover_pid(&pv[i]), 0) == 0;
    printf(
        "%s\n\n",
        pinned
            ? "This program and the six backends it times share one CPU, so that"
              " every row's round trips cross the same CPUs (on this 2-core machine"
              " one CPU or two makes ~28 or ~39 µs, whichever the scheduler picks)."
            : "The backends could not be pinned to one CPU (the server is elsewhere"
              " or the bench may not move them): rows may differ by where the"
              " scheduler put each backend.");
    printf("| other locks on the server | query | µs per heartbeat | × floor |"
           " server CPU µs per heartbeat |\n|---:|---|---:|---:|---:|\n");
    for (int i = 0; i < NPROVERS; i++)
        run_prover(&pv[i], 20); /* the backends' caches warm */
    long held = 0;
    for (int i = 0; i < ncounts; i++) {
        fill_to(filler, &held, counts[i]);
        measure_count(pv, NPROVERS, counts[i], iters, reps);
    }
    /* The pin is for comparing round trips; it must not cover the fleet,
     * whose 200 clients all run in this process: with the process left on
     * one CPU the fleet's server CPU was seen to rise from 2.3-2.8 % to
     * 5.1-5.3 % of a core.  The fleet runs as it did before the pin, this
     * process and the six backends back on every CPU they were allowed
     * (unconditionally: a failed pin may have moved some of them). */
    bench_unpin(0);
    for (int i = 0; i < NPROVERS; i++)
        bench_unpin(prover_pid(&pv[i]));
    printf("\n%d library clients, each holding one lock and heartbeating "
           "every %d ms (a 30 s lease), for %.1f s each (after "
           "%.0f s for their backends' first statistics flush), with the "
           "largest count of other locks held, then none; then %d raw libpq "
           "connections each holding one lock and running the floor query "
           "at the same pace (at a fleet's pace a backend's caches have gone "
           "cold by its next turn: any query costs far more than in the loop "
           "above):\n\n",
           holders, HEARTBEAT_MS, (double)hold_ms / 1000.0,
           (double)settle_ms / 1000.0, holders);
    printf(
        "| clients | proving by | other locks | proofs/s | server CPU (%% of one core)"
        " | server CPU µs per proof |\n|---:|---|---:|---:|---:|---:|\n");
    fleet(conninfo, holders, hold_ms, settle_ms, held, 0);
    if (held > 0) {
        bench_exec(filler, "SELECT pg_advisory_unlock_all()", NULL,
                   PGRES_TUPLES_OK);
        fleet(conninfo, holders, hold_ms, settle_ms, 0, 0);
    }
    fleet(conninfo, holders, hold_ms, settle_ms, 0, 1);
    printf("\n");
    pglock_client_close(pv[2].client);
    pglock_client_close(pv[3].client);
    PQfinish(before);
    PQfinish(watching);
    PQfinish(raw_again);
    PQfinish(raw);
    PQfinish(filler);
    return 0;
}
