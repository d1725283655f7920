/*
 * bench_scale — one client holding 1, 100, 10,000 locks: the latency of a
 * lock+unlock of one more key and of a heartbeat while they are held, the
 * time to take them all and to release them (client close), and the
 * client's memory (VmRSS).  Raw libpq holding as many locks is the
 * baseline.  With --status-cmd, runs that command (e.g. `pglock status`)
 * while the largest count is held and reports its wall time.
 *
 *   bench_scale --conninfo CONNINFO [--counts 1,100,10000] [--iters N]
 *               [--status-cmd CMD] [--reps N]
 */
#include "bench.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef BENCH_HAVE_PGLOCK
#include "pglock.h"
#endif

/* Per-op µs of lock+unlock of key on a raw connection. */
static double raw_lock_unlock_us(PGconn *conn, int64_t key, int iters)
{
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < iters; i++) {
        bench_exec(conn, "SELECT pg_advisory_lock($1)", &key, PGRES_TUPLES_OK);
        bench_exec(conn, "SELECT pg_advisory_unlock($1)", &key,
                   PGRES_TUPLES_OK);
    }
    return (double)(bench_now_ns() - t0) / iters / 1000.0;
}

#ifdef BENCH_HAVE_PGLOCK
/* This process's resident set, in KiB (-1 if unknown). */
static long rss_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kib = -1;
    if (!f)
        return -1;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmRSS:", 6) == 0)
            kib = strtol(line + 6, NULL, 10);
    fclose(f);
    return kib;
}

static double ms_since(int64_t t0)
{
    return (double)(bench_now_ns() - t0) / 1e6;
}

/* Runs cmd (output discarded) reps times; the median wall time in ms. */
static double time_command(const char *cmd, int reps)
{
    double v[32];
    char full[4096];
    snprintf(full, sizeof full, "%s >/dev/null 2>&1", cmd);
    if (reps > 32)
        reps = 32;
    for (int r = 0; r < reps; r++) {
        int64_t t0 = bench_now_ns();
        int rc = system(full);
        v[r] = ms_since(t0);
        if (rc != 0)
            return -1;
    }
    return bench_quantile(v, (size_t)reps, 0.5);
}

static void check(pglock_client *c, int rc, const char *what)
{
    if (rc != 0)
        bench_die("%s: %s: %s", what, pglock_err_name(rc),
                  pglock_client_error(c));
}

static double pglock_lock_unlock_us(pglock_client *c, int64_t key, int iters)
{
    pglock_key k;
    pglock_key_int64(&k, key);
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < iters; i++) {
        check(c, pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER),
              "pglock_lock");
        check(c, pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), "pglock_unlock");
    }
    return (double)(bench_now_ns() - t0) / iters / 1000.0;
}

static double heartbeat_us(pglock_client *c, int iters)
{
    int64_t t0 = bench_now_ns();
    for (int i = 0; i < iters; i++)
        check(c, pglock_heartbeat(c, 60000), "pglock_heartbeat");
    return (double)(bench_now_ns() - t0) / iters / 1000.0;
}
#endif

int main(int argc, char **argv)
{
    const char *conninfo = NULL, *counts_s = "1,100,10000", *status_cmd = NULL;
    int iters = 300, reps = 3;
    static const struct option longopts[] = {
        {"conninfo", required_argument, NULL, 'c'},
        {"counts", required_argument, NULL, 'n'},
        {"iters", required_argument, NULL, 'i'},
        {"status-cmd", required_argument, NULL, 's'},
        {"reps", required_argument, NULL, 'r'},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            conninfo = optarg;
            break;
        case 'n':
            counts_s = optarg;
            break;
        case 'i':
            iters = atoi(optarg);
            break;
        case 's':
            status_cmd = optarg;
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        default:
            return 64;
        }
    }
    long counts[8];
    int ncounts = 0;
    for (const char *p = counts_s; *p && ncounts < 8;) {
        char *end;
        counts[ncounts++] = strtol(p, &end, 10);
        p = *end == ',' ? end + 1 : end;
        if (end == p && *p)
            bench_die("bad --counts");
    }
    if (iters < 1)
        bench_die("bad --iters");

    printf(
        "One client holding N session locks (and, as the baseline, a raw libpq "
        "connection holding N others); lock+unlock of one more key while they are held: "
        "mean over %d operations, median (min–max) over %d repetitions, raw and pglock "
        "in turn.\n\n",
        iters, reps);
    printf(
        "| locks held | raw libpq lock+unlock µs | pglock lock+unlock µs | ratio "
        "| pglock_heartbeat µs | taking the N, µs/lock (pglock) | close (unlock all) ms "
        "| client RSS KiB (growth while taking the N) |\n");
    printf("|---:|---:|---:|---|---:|---:|---:|---:|\n");
    double status_ms = -1;
    long status_n = 0;
    for (int ci = 0; ci < ncounts; ci++) {
        long n = counts[ci];
        /* Baseline: raw libpq holding n locks (other keys), measured in
         * turn with pglock, repetition by repetition. */
        PGconn *raw = bench_connect(conninfo);
        for (long k = 0; k < n; k++) {
            int64_t key = 100000 + k;
            bench_exec(raw, "SELECT pg_advisory_lock($1)", &key,
                       PGRES_TUPLES_OK);
        }
        double raw_us[16], pg_us[16], ratio[16];
        int nreps = reps < 16 ? reps : 16;
#ifdef BENCH_HAVE_PGLOCK
        pglock_client *c = bench_pglock_open(conninfo);
        long rss0 = rss_kib();
        int64_t t0 = bench_now_ns();
        for (long k = 0; k < n; k++) {
            pglock_key key;
            pglock_key_int64(&key, 200000 + k);
            check(c,
                  pglock_lock(c, &key, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER),
                  "pglock_lock");
        }
        double take_us = ms_since(t0) * 1000.0 / (double)n;
        long rss1 = rss_kib();
        for (int r = 0; r < nreps; r++) {
            raw_us[r] = raw_lock_unlock_us(raw, 99, iters);
            pg_us[r] = pglock_lock_unlock_us(c, 98, iters);
            ratio[r] = pg_us[r] / raw_us[r];
        }
        double hb_us = heartbeat_us(c, iters < 100 ? iters : 100);
        /* pglock status sees pglock's n locks only. */
        bench_exec(raw, "SELECT pg_advisory_unlock_all()", NULL,
                   PGRES_TUPLES_OK);
        if (status_cmd && ci == ncounts - 1) {
            status_ms = time_command(status_cmd, reps);
            status_n = n;
        }
        t0 = bench_now_ns();
        pglock_client_close(c);
        double close_ms = ms_since(t0);
        char a[96], b[96], q[96];
        bench_spread(a, sizeof a, "%.1f", raw_us, (size_t)nreps);
        bench_spread(b, sizeof b, "%.1f", pg_us, (size_t)nreps);
        bench_spread(q, sizeof q, "%.2f", ratio, (size_t)nreps);
        printf(
            "| %ld | %s | %s | %s × raw | %.1f | %.1f | %.1f | %ld (+%ld) |\n",
            n, a, b, q, hb_us, take_us, close_ms, rss1, rss1 - rss0);
#else
        char a[96];
        for (int r = 0; r < nreps; r++)
            raw_us[r] = raw_lock_unlock_us(raw, 99, iters);
        (void)pg_us;
        (void)ratio;
        bench_spread(a, sizeof a, "%.1f", raw_us, (size_t)nreps);
        printf("| %ld | %s | – | – | – | – | – | – |\n", n, a);
#endif
        PQfinish(raw);
        fflush(stdout);
    }
    if (status_cmd) {
        if (status_ms >= 0)
            printf("\n`%s` with %ld locks held: %.1f ms (median of %d).\n",
                   status_cmd, status_n, status_ms, reps);
        else
            printf("\n`%s` did not run successfully; not measured.\n",
                   status_cmd);
    }
    printf("\n");
    return 0;
}
