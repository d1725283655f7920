/*
 * bench_contend — N processes locking in a loop: lock, tiny work, unlock,
 * optionally an idle gap before the next attempt.
 *
 * Same key (contention): acquisitions per second, handoff latency (the
 * holder's timestamp just before its unlock to the next holder's timestamp
 * just after its acquisition, both CLOCK_MONOTONIC, in shared memory) p50
 * and p99, the wait from attempt start to acquisition (p99, max: shows
 * starvation), and per acquisition the requests the client sent (calls:
 * one round trip each) and the statements the server ran
 * (pg_stat_database transactions, Redis total_commands_processed, which
 * counts a script's inner commands too), minus what connecting costs
 * (measured once per locker).  Mutual exclusion is
 * checked too: a holder flag in shared memory must never be taken twice.
 *
 * Distinct keys (--distinct): each process its own key; total operations
 * (lock + unlock) per second.
 *
 * Lockers are interleaved repetition by repetition (in reverse order every
 * other repetition), or with --slices N, N turns per repetition (each
 * 1/N of the duration, in reverse order every other turn), so that drift
 * within a repetition weighs on every locker alike; each table row gives
 * median (min–max) over the repetitions and the ratio to a named baseline
 * measured in the same run.
 *
 * Lockers: pglock, raw, raw-again (raw libpq compared with itself: how far
 * the machine alone moves a ratio), poll10, poll1, redis10, redis1.
 *
 *   bench_contend --conninfo CONNINFO [--redis SOCKET] [--lockers a,b,...]
 *                 [--procs 2,4,8] [--gaps-us 0,1000] [--work-us 10]
 *                 [--duration-ms 1000] [--reps 3] [--slices 1] [--distinct] [--pin]
 */
#include "bench.h"

#include <getopt.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#ifdef BENCH_HAVE_HIREDIS
#include <hiredis/hiredis.h>
#endif

enum { MAX_PROCS = 16, MAX_SAMPLES = 100000 };
#define WORKER_APPNAME "pglock-bench-worker"

typedef struct worker_out {
    long acquisitions;     /* acquired before the deadline */
    long acquisitions_all; /* including the ones after it */
    long queries;          /* client-side count */
    long nsamples, nwaits;
    uint32_t samples[MAX_SAMPLES]; /* handoff latencies, ns */
    uint32_t waits[MAX_SAMPLES];   /* attempt start to acquisition, ns */
} worker_out;

typedef struct shared {
    atomic_int ready;
    atomic_int go;
    int64_t end_ns;
    atomic_llong last_release_ns;
    atomic_int last_releaser; /* worker index, -1: none yet */
    atomic_int holder;        /* worker index + 1, 0: free */
    atomic_long violations;
    atomic_long unpinned; /* --pin: workers that could not be */
    worker_out out[MAX_PROCS];
} shared;

typedef struct config {
    const char *conninfo;
    const char *redis;
    int work_us;
    int duration_ms;
    int distinct;
    int pin;    /* each worker and its backend on one CPU */
    int slices; /* a repetition's duration, in turns per locker */
} config;

typedef struct entry {
    const char *id;
    const bench_locker *locker;
    int redis;        /* target is the Redis socket */
    const char *name; /* in the tables; NULL: the locker's own */
} entry;

static const char *entry_name(const entry *e)
{
    return e->name ? e->name : e->locker->name;
}

static const entry all_lockers[] = {
#ifdef BENCH_HAVE_PGLOCK
    {"pglock", &bench_locker_pglock, 0, NULL},
#endif
    {"raw", &bench_locker_raw_wait, 0, NULL},
    /* raw libpq again, compared with itself: how far this machine alone
     * moves a ratio (an A/A control) */
    {"raw-again", &bench_locker_raw_wait, 0,
     "raw libpq wait, again (A/A control)"},
    {"poll10", &bench_locker_poll_10ms, 0, NULL},
    {"poll1", &bench_locker_poll_1ms, 0, NULL},
#ifdef BENCH_HAVE_HIREDIS
    {"redis10", &bench_locker_redis_10ms, 1, NULL},
    {"redis1", &bench_locker_redis_1ms, 1, NULL},
#endif
};
enum { NALL = sizeof all_lockers / sizeof all_lockers[0] };

static void spin_us(int us)
{
    int64_t until = bench_now_ns() + (int64_t)us * 1000;
    while (bench_now_ns() < until)
        ;
}

static void sleep_us(long us)
{
    struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
    nanosleep(&ts, NULL);
}

/* One worker process: connect, wait for the start, loop until the deadline. */
static void worker(shared *sh, int me, const entry *e, const config *cfg,
                   long gap_us, int iters)
{
    setenv("PGAPPNAME", WORKER_APPNAME, 1);
    void *st = e->locker->open(e->redis ? cfg->redis : cfg->conninfo);
    worker_out *out = &sh->out[me];
    int64_t key = cfg->distinct ? 5000 + me : 4242;
    /* worker i and its backend on CPU i mod CPUs, whatever the locker, so
     * that every locker's run has the same placement (see bench_pin) */
    if (cfg->pin && (bench_pin(0, me) != 0 ||
                     (e->locker->server_pid &&
                      bench_pin(e->locker->server_pid(st), me) != 0)))
        atomic_fetch_add(&sh->unpinned, 1);
    atomic_fetch_add(&sh->ready, 1);
    while (!atomic_load(&sh->go))
        sleep_us(100);
    for (int i = 0; iters < 0 ? bench_now_ns() < sh->end_ns : i < iters; i++) {
        int64_t t0 = bench_now_ns();
        e->locker->lock(st, key, &out->queries);
        int64_t t1 = bench_now_ns();
        if (!cfg->distinct) {
            if (atomic_exchange(&sh->holder, me + 1) != 0)
                atomic_fetch_add(&sh->violations, 1);
            int who = atomic_load(&sh->last_releaser);
            int64_t released = atomic_load(&sh->last_release_ns);
            if (who >= 0 && who != me && released >= t0 &&
                out->nsamples < MAX_SAMPLES)
                out->samples[out->nsamples++] = (uint32_t)(t1 - released);
            if (out->nwaits < MAX_SAMPLES)
                out->waits[out->nwaits++] = (uint32_t)(t1 - t0 < UINT32_MAX
                                                           ? t1 - t0
                                                           : UINT32_MAX);
        }
        spin_us(cfg->work_us);
        if (!cfg->distinct) {
            atomic_store(&sh->holder, 0);
            atomic_store(&sh->last_releaser, me);
            atomic_store(&sh->last_release_ns, bench_now_ns());
        }
        e->locker->unlock(st, key, &out->queries);
        if (t1 <= sh->end_ns)
            out->acquisitions++;
        out->acquisitions_all++;
        if (gap_us > 0)
            sleep_us(gap_us);
    }
    e->locker->close(st);
    _exit(0);
}

/* ---- the server's own count of requests */

static PGconn *stats_conn;
#ifdef BENCH_HAVE_HIREDIS
static redisContext *stats_redis;
#endif

static long server_requests(const entry *e, const config *cfg)
{
    if (e->redis) {
#ifdef BENCH_HAVE_HIREDIS
        if (!stats_redis) {
            stats_redis = redisConnectUnix(cfg->redis);
            if (!stats_redis || stats_redis->err)
                bench_die("redis connect %s failed", cfg->redis);
        }
        redisReply *r = redisCommand(stats_redis, "INFO stats");
        if (!r || r->type != REDIS_REPLY_STRING)
            bench_die("redis INFO failed");
        const char *p = strstr(r->str, "total_commands_processed:");
        long n = p ? strtol(p + strlen("total_commands_processed:"), NULL, 10)
                   : -1;
        freeReplyObject(r);
        return n;
#else
        return -1;
#endif
    }
    if (!stats_conn)
        stats_conn = bench_connect(cfg->conninfo);
    /* Backends flush their counters when they exit: wait until the
     * workers' backends are gone (bounded). */
    for (int i = 0; i < 500; i++) {
        PGresult *res = PQexec(stats_conn,
                               "SELECT count(*) FROM pg_stat_activity"
                               " WHERE application_name = '" WORKER_APPNAME
                               "'");
        int left = PQresultStatus(res) == PGRES_TUPLES_OK
                       ? atoi(PQgetvalue(res, 0, 0))
                       : 0;
        PQclear(res);
        if (left == 0)
            break;
        sleep_us(10000);
    }
    PGresult *res = PQexec(
        stats_conn, "SELECT xact_commit + xact_rollback FROM pg_stat_database"
                    " WHERE datname = current_database()");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        bench_die("pg_stat_database: %s", PQerrorMessage(stats_conn));
    long n = atol(PQgetvalue(res, 0, 0));
    PQclear(res);
    return n;
}

typedef struct result {
    double per_sec;
    double handoffs_per_sec; /* acquisitions by a waiter */
    double p50_us, p99_us;
    double wait_p99_ms, wait_max_ms; /* attempt start to acquisition */
    double queries_per_acq;          /* server-counted */
    double requests_per_acq;         /* client-counted calls */
    long violations;
    long samples;
    long served; /* server requests, less setup_requests per worker */
} result;

static long total_unpinned; /* --pin: worker runs that could not be */

/* Runs nprocs workers of one locker for one slice of a repetition, in
 * sh (one per locker); iters >= 0 runs that many iterations per worker
 * instead of a timed loop (calibration).  The first slice (fresh) starts
 * the counts and samples, later ones add to them.  Returns the server
 * requests the slice took, less setup_requests per worker. */
static long run_slice(shared *sh, const entry *e, const config *cfg, int nprocs,
                      long gap_us, int iters, long setup_requests, int fresh)
{
    if (fresh)
        memset(sh, 0, sizeof *sh);
    atomic_store(&sh->ready, 0);
    atomic_store(&sh->go, 0);
    atomic_store(&sh->holder, 0);
    atomic_store(&sh->last_release_ns, 0);
    atomic_store(&sh->last_releaser, -1);
    long before = server_requests(e, cfg);
    pid_t pids[MAX_PROCS];
    for (int p = 0; p < nprocs; p++) {
        fflush(NULL);
        pids[p] = fork();
        if (pids[p] < 0)
            bench_die("fork failed");
        if (pids[p] == 0)
            worker(sh, p, e, cfg, gap_us, iters);
    }
    while (atomic_load(&sh->ready) < nprocs)
        sleep_us(200);
    int64_t start = bench_now_ns();
    sh->end_ns = start + (int64_t)cfg->duration_ms / cfg->slices * 1000000;
    atomic_store(&sh->go, 1);
    int failed = 0;
    for (int p = 0; p < nprocs; p++) {
        int status;
        if (waitpid(pids[p], &status, 0) < 0 || !WIFEXITED(status) ||
            WEXITSTATUS(status) != 0)
            failed = 1;
    }
    if (failed)
        bench_die("a %s worker failed", e->locker->name);
    return server_requests(e, cfg) - before - setup_requests * nprocs;
}

/* One repetition's figures, from the counts and samples its slices left
 * in sh and the server requests they took. */
static result summarize(shared *sh, const config *cfg, int nprocs, long served)
{
    result r = {0};
    long acq = 0, acq_all = 0, nsamples = 0, requests = 0;
    for (int p = 0; p < nprocs; p++) {
        requests += sh->out[p].queries;
        acq += sh->out[p].acquisitions;
        acq_all += sh->out[p].acquisitions_all;
        nsamples += sh->out[p].nsamples;
    }
    r.per_sec = (double)acq / (cfg->duration_ms / 1000.0);
    r.handoffs_per_sec = (double)nsamples / (cfg->duration_ms / 1000.0);
    double *lat = malloc(sizeof *lat * (size_t)(nsamples + 1));
    if (!lat)
        bench_die("out of memory");
    size_t k = 0;
    for (int p = 0; p < nprocs; p++)
        for (long i = 0; i < sh->out[p].nsamples; i++)
            lat[k++] = sh->out[p].samples[i] / 1000.0;
    r.p50_us = bench_quantile(lat, k, 0.50);
    r.p99_us = bench_quantile(lat, k, 0.99);
    free(lat);
    long nwaits = 0;
    for (int p = 0; p < nprocs; p++)
        nwaits += sh->out[p].nwaits;
    double *w = malloc(sizeof *w * (size_t)(nwaits + 1));
    if (!w)
        bench_die("out of memory");
    k = 0;
    for (int p = 0; p < nprocs; p++)
        for (long i = 0; i < sh->out[p].nwaits; i++)
            w[k++] = sh->out[p].waits[i] / 1e6;
    r.wait_p99_ms = bench_quantile(w, k, 0.99);
    r.wait_max_ms = k ? w[k - 1] : 0;
    free(w);
    r.samples = nsamples;
    r.violations = atomic_load(&sh->violations);
    total_unpinned += atomic_load(&sh->unpinned);
    r.served = served;
    r.queries_per_acq = acq_all > 0 ? (double)served / (double)acq_all : 0;
    r.requests_per_acq = acq_all > 0 ? (double)requests / (double)acq_all : 0;
    return r;
}

/* Parses "2,4,8" into v (at most max values); returns the count. */
static int parse_list(const char *s, long *v, int max)
{
    int n = 0;
    char *end;
    while (*s && n < max) {
        v[n++] = strtol(s, &end, 10);
        if (end == s)
            bench_die("bad list \"%s\"", s);
        s = *end == ',' ? end + 1 : end;
    }
    return n;
}

static const char *fmt_spread(char *buf, size_t len, const char *fmt,
                              result *rs, int reps, size_t offset)
{
    double v[64];
    for (int r = 0; r < reps; r++)
        v[r] = *(double *)((char *)&rs[r] + offset);
    return bench_spread(buf, len, fmt, v, (size_t)reps);
}

static double median_of(result *rs, int reps, size_t offset)
{
    double v[64];
    for (int r = 0; r < reps; r++)
        v[r] = *(double *)((char *)&rs[r] + offset);
    return bench_quantile(v, (size_t)reps, 0.5);
}

int main(int argc, char **argv)
{
    config cfg = {.work_us = 10, .duration_ms = 1000, .slices = 1};
    const char *lockers = "pglock,raw,poll10,poll1,redis10,redis1";
    const char *procs_s = "2,4,8", *gaps_s = "0,1000";
    int reps = 3;
    static const struct option longopts[] = {
        {"conninfo", required_argument, NULL, 'c'},
        {"redis", required_argument, NULL, 'R'},
        {"lockers", required_argument, NULL, 'L'},
        {"procs", required_argument, NULL, 'p'},
        {"gaps-us", required_argument, NULL, 'g'},
        {"work-us", required_argument, NULL, 'w'},
        {"duration-ms", required_argument, NULL, 'd'},
        {"reps", required_argument, NULL, 'r'},
        {"distinct", no_argument, NULL, 'D'},
        {"pin", no_argument, NULL, 'P'},
        {"slices", required_argument, NULL, 'S'},
        {NULL, 0, NULL, 0}};
    int ch;
    while ((ch = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c':
            cfg.conninfo = optarg;
            break;
        case 'R':
            cfg.redis = optarg;
            break;
        case 'L':
            lockers = optarg;
            break;
        case 'p':
            procs_s = optarg;
            break;
        case 'g':
            gaps_s = optarg;
            break;
        case 'w':
            cfg.work_us = atoi(optarg);
            break;
        case 'd':
            cfg.duration_ms = atoi(optarg);
            break;
        case 'r':
            reps = atoi(optarg);
            break;
        case 'D':
            cfg.distinct = 1;
            break;
        case 'P':
            cfg.pin = 1;
            break;
        case 'S':
            cfg.slices = atoi(optarg);
            break;
        default:
            return 64;
        }
    }
    /* Turns of whole milliseconds, so that the rates' duration is exact. */
    if (reps < 1 || reps > 64 || cfg.slices < 1 ||
        cfg.duration_ms < cfg.slices || cfg.duration_ms % cfg.slices != 0)
        bench_die(
            "bad --reps, --slices or --duration-ms (a multiple of --slices)");

    /* The lockers asked for that can run here (Redis needs --redis). */
    const entry *sel[NALL];
    int nsel = 0;
    for (const char *p = lockers; *p;) {
        size_t len = strcspn(p, ",");
        for (int i = 0; i < NALL; i++)
            if (strlen(all_lockers[i].id) == len &&
                strncmp(all_lockers[i].id, p, len) == 0 &&
                (!all_lockers[i].redis || cfg.redis) && nsel < NALL)
                sel[nsel++] = &all_lockers[i];
        p += len + (p[len] == ',');
    }
    if (nsel == 0)
        bench_die("no lockers to run");
    long procs[8], gaps[8];
    int nprocs = parse_list(procs_s, procs, 8),
        ngaps = parse_list(gaps_s, gaps, 8);
    if (cfg.distinct)
        ngaps = 1, gaps[0] = 0;
    for (int i = 0; i < nprocs; i++)
        if (procs[i] < 1 || procs[i] > MAX_PROCS)
            bench_die("--procs: 1 to %d", MAX_PROCS);

    shared *shm[NALL];
    for (int i = 0; i < nsel; i++) {
        shm[i] = mmap(NULL, sizeof *shm[i], PROT_READ | PROT_WRITE,
                      MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (shm[i] == MAP_FAILED)
            bench_die("mmap failed");
    }

    /* What connecting and disconnecting cost each locker in server
     * requests: one worker, no iterations. */
    long setup[NALL];
    for (int i = 0; i < nsel; i++) {
        /* Redis counts our INFO reading too: once per run, not per worker. */
        setup[i] = run_slice(shm[i], sel[i], &cfg, 1, 0, 0, 0, 1) -
                   (sel[i]->redis ? 1 : 0);
        if (setup[i] < 0)
            setup[i] = 0;
    }

    for (int i = 0; i < nsel; i++)
        if (!sel[i]->name)
            printf("- **%s**: %s\n", entry_name(sel[i]),
                   sel[i]->locker->describe);
    char turns[96] = "in reverse order every other repetition";
    if (cfg.slices > 1)
        snprintf(turns, sizeof turns,
                 "%d turns of %g s each per repetition, in reverse "
                 "order every other turn",
                 cfg.slices, cfg.duration_ms / 1000.0 / cfg.slices);
    printf(
        "\n%s, %d µs of work under the lock, %g s per run, %d repetitions "
        "(the lockers in turn, %s; median (min–max) over them)%s.\n\n",
        cfg.distinct ? "Each process its own key" : "All processes on one key",
        cfg.work_us, cfg.duration_ms / 1000.0, reps, turns,
        cfg.distinct
            ? ""
            : "; handoff = holder's unlock to the next holder's acquisition; "
              "a handoff is an acquisition by a process that was waiting when "
              "another released (the rest are a holder re-taking the lock it "
              "just released); wait = attempt start to acquisition (p99 and "
              "max, medians over the repetitions: starvation shows here)");
    if (cfg.pin)
        printf(
            "Worker i and the server process serving it (its backend; Redis is "
            "one server process, left alone) run on CPU i mod the CPUs, for every "
            "locker alike: left to the scheduler, which processes share a CPU "
            "changes a run by more than the lockers differ.\n\n");
    if (cfg.distinct) {
        printf(
            "| processes | locker | lock+unlock per second | ratio |\n|---:|---|---:|---|\n");
    } else {
        printf(
            "| processes | idle gap | locker | acquisitions/s | of which handoffs/s "
            "| handoff p50 µs | "
            "handoff p99 µs | wait p99 / max ms | requests / server statements "
            "per acquisition | ratio (acquisitions/s) |\n"
            "|---:|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    }
    long total_violations = 0;
    result(*rs)[64] = calloc((size_t)nsel, sizeof *rs);
    if (!rs)
        bench_die("out of memory");
    for (int pi = 0; pi < nprocs; pi++) {
        for (int gi = 0; gi < ngaps; gi++) {
            /* in turn, slice by slice, and every other slice in reverse
             * order: no locker always runs right after another, or first,
             * and a machine's drift within a repetition weighs on all */
            for (int r = 0; r < reps; r++) {
                long served[NALL] = {0};
                for (int sl = 0; sl < cfg.slices; sl++)
                    for (int k = 0; k < nsel; k++) {
                        int i = (r * cfg.slices + sl) % 2 ? nsel - 1 - k : k;
                        served[i] += run_slice(shm[i], sel[i], &cfg,
                                               (int)procs[pi], gaps[gi], -1,
                                               setup[i], sl == 0);
                    }
                for (int i = 0; i < nsel; i++)
                    rs[i][r] = summarize(shm[i], &cfg, (int)procs[pi],
                                         served[i]);
            }
            for (int i = 0; i < nsel; i++) {
                char a[96], b[96], c[96], q[96], ratio[160] = "(baseline)";
                /* pglock is compared with raw libpq (its limit); every
                 * alternative with pglock. */
                int base = -1;
                const char *want = strcmp(sel[i]->id, "pglock") == 0 ||
                                           strcmp(sel[i]->id, "raw-again") == 0
                                       ? "raw"
                                       : "pglock";
                for (int j = 0; j < nsel; j++)
                    if (strcmp(sel[j]->id, want) == 0)
                        base = j;
                if (strcmp(sel[i]->id, "raw") == 0)
                    snprintf(ratio, sizeof ratio, "(pglock's baseline)");
                else if (base >= 0 && base != i) {
                    double v[64];
                    for (int r = 0; r < reps; r++)
                        v[r] = rs[i][r].per_sec / rs[base][r].per_sec;
                    char s[96];
                    bench_spread(s, sizeof s, "%.2f", v, (size_t)reps);
                    snprintf(ratio, sizeof ratio, "%s × %s", s,
                             entry_name(sel[base]));
                }
                fmt_spread(a, sizeof a, "%.0f", rs[i], reps,
                           offsetof(result, per_sec));
                for (int r = 0; r < reps; r++)
                    total_violations += rs[i][r].violations;
                if (cfg.distinct) {
                    printf("| %ld | %s | %s | %s |\n", procs[pi],
                           entry_name(sel[i]), a, ratio);
                    continue;
                }
                long nsamples = 0;
                for (int r = 0; r < reps; r++)
                    nsamples += rs[i][r].samples;
                if (nsamples > 0) {
                    fmt_spread(b, sizeof b, "%.0f", rs[i], reps,
                               offsetof(result, p50_us));
                    fmt_spread(c, sizeof c, "%.0f", rs[i], reps,
                               offsetof(result, p99_us));
                } else {
                    snprintf(b, sizeof b, "no handoffs");
                    snprintf(c, sizeof c, "–");
                }
                char gap[32] = "none";
                if (gaps[gi] > 0)
                    snprintf(gap, sizeof gap, "%g ms", gaps[gi] / 1000.0);
                snprintf(
                    q, sizeof q, "%.2f / %.2f",
                    median_of(rs[i], reps, offsetof(result, requests_per_acq)),
                    median_of(rs[i], reps, offsetof(result, queries_per_acq)));
                char w[64];
                snprintf(w, sizeof w, "%.1f / %.0f",
                         median_of(rs[i], reps, offsetof(result, wait_p99_ms)),
                         median_of(rs[i], reps, offsetof(result, wait_max_ms)));
                printf(
                    "| %ld | %s | %s | %s | %.0f | %s | %s | %s | %s | %s |\n",
                    procs[pi], gap, entry_name(sel[i]), a,
                    median_of(rs[i], reps, offsetof(result, handoffs_per_sec)),
                    b, c, w, q, ratio);
                fflush(stdout);
            }
        }
    }
    printf("\nMutual exclusion violations seen: %ld.\n\n", total_violations);
    if (total_unpinned)
        printf("%ld worker runs could not be pinned to their CPU.\n\n",
               total_unpinned);
    free(rs);
    if (stats_conn)
        PQfinish(stats_conn);
    return total_violations ? 1 : 0;
}
