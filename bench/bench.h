/*
 * bench.h — what the benchmark programs share: a clock, statistics,
 * markdown output, the test proxy's round-trip counter, and the "locker"
 * interface every lock implementation under test provides.
 */
#ifndef PGLOCK_BENCH_H
#define PGLOCK_BENCH_H

#include <stddef.h>
#include <stdint.h>
#include <libpq-fe.h>

/* CLOCK_MONOTONIC in ns; comparable across processes of one machine. */
int64_t bench_now_ns(void);

/* Prints "bench: error: MESSAGE" and exits 1. */
void bench_die(const char *fmt, ...)
    __attribute__((format(printf, 1, 2), noreturn));

/* Sorts v in place and returns the q-quantile (0..1), nearest rank. */
double bench_quantile(double *v, size_t n, double q);

/* "median (min–max)" of v, formatted with fmt (e.g. "%.1f"), into buf. */
const char *bench_spread(char *buf, size_t len, const char *fmt, double *v,
                         size_t n);

/*
 * Pins process pid (0: this one) to the cpu-th CPU this process may run on
 * (modulo their count).  On a 2-core machine a client and its backend are
 * either on one CPU or on two, and a round trip costs ~28 µs one way and
 * ~39 µs the other: left to the scheduler, which way a connection falls
 * decides a comparison more than the SQL does.  Pinning both sides of every
 * compared connection alike removes that.  Returns 0, or -1 when pid is
 * not on this machine or may not be moved.
 */
int bench_pin(int pid, int cpu);
/* Undoes bench_pin(pid, ...): pid may run again on every CPU this process
 * was allowed before its first pin.  Returns 0 or -1 as bench_pin(). */
int bench_unpin(int pid);

/* Connects with libpq or dies, saying why. */
PGconn *bench_connect(const char *conninfo);

#ifdef BENCH_HAVE_PGLOCK
#include "pglock.h"
/* Opens a pglock client with the default options (application_name
 * "pglock-bench") or dies, saying why (locker_pglock.c). */
pglock_client *bench_pglock_open(const char *conninfo);
#endif

/* Runs sql (no parameters, or one bigint parameter when key != NULL) and
 * dies unless the result has status expect. */
void bench_exec(PGconn *conn, const char *sql, const int64_t *key,
                ExecStatusType expect);

/*
 * The test proxy's control socket (PGLOCK_TEST_PROXY_CTL: a Unix socket
 * path, or HOST:PORT).  bench_proxy_roundtrips() returns the proxy's
 * round-trip count, -1 when there is no proxy or it does not answer;
 * bench_proxy_reset() zeroes it.
 */
long bench_proxy_roundtrips(const char *ctl);
int bench_proxy_reset(const char *ctl);

/*
 * A lock implementation under test (contention benchmarks).  open() is
 * called once per process (after fork), lock() acquires key (waiting,
 * however the implementation waits), unlock() releases it.  *queries
 * counts the requests sent to the server (client side), for the
 * implementations where the server's own counters are not used.
 */
typedef struct bench_locker {
    const char *name;     /* short name in the tables */
    const char *describe; /* one line for the report */
    void *(*open)(const char *target);
    void (*lock)(void *state, int64_t key, long *queries);
    void (*unlock)(void *state, int64_t key, long *queries);
    void (*close)(void *state);
    /* the pid of the server process serving this state, which --pin moves
     * beside its client; NULL when it is not ours alone (Redis) */
    int (*server_pid)(void *state);
} bench_locker;

/* Lockers defined in locker_*.c; poll_us is set by the poll variants. */
extern const bench_locker bench_locker_raw_wait;
extern const bench_locker bench_locker_poll_10ms;
extern const bench_locker bench_locker_poll_1ms;
extern const bench_locker bench_locker_pglock;
#ifdef BENCH_HAVE_HIREDIS
extern const bench_locker bench_locker_redis_10ms;
extern const bench_locker bench_locker_redis_1ms;
#endif

#endif
