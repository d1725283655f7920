/*
 * live.h — small helpers shared by the library's live tests: an observer
 * connection that looks at the server from outside, bounded polling, and
 * the harness's proxy control socket.  Header-only (each test_*.c is one
 * binary).
 */
#ifndef PGLOCK_TEST_LIVE_H
#define PGLOCK_TEST_LIVE_H

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <cmocka.h>
#include <libpq-fe.h>
#include "pglock.h"

/* The harness's conninfo in variable name, or skip the test saying so. */
#define LIVE_ENV_OR_SKIP(var, name)                                         \
    const char *var = getenv(name);                                         \
    do {                                                                    \
        if (!var || !*var) {                                                \
            print_message("skipped: %s is not set\n", name);                \
            skip();                                                         \
        }                                                                   \
    } while (0)

static inline PGconn *live_connect(const char *conninfo)
{
    PGconn *c = PQconnectdb(conninfo);
    if (PQstatus(c) != CONNECTION_OK)
        fail_msg("could not connect to %s: %s", conninfo, PQerrorMessage(c));
    return c;
}

/* Runs sql (printf-style) and returns the first value as a long; fails
 * the test on error. */
__attribute__((format(printf, 2, 3)))
static inline long live_scalar(PGconn *c, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGresult *r = PQexec(c, sql);
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) < 1)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    const char *v = PQgetvalue(r, 0, 0);
    long out = (*v == 't') ? 1 : (*v == 'f') ? 0 : strtol(v, NULL, 10);
    PQclear(r);
    return out;
}

__attribute__((format(printf, 2, 3)))
static inline void live_exec(PGconn *c, const char *fmt, ...)
{
    char sql[2048];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(sql, sizeof sql, fmt, ap);
    va_end(ap);
    PGresult *r = PQexec(c, sql);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    PQclear(r);
}

/* Whether another session could take the exclusive lock on the bigint k
 * right now (it is released again at once). */
static inline int live_free_int64(PGconn *obs, int64_t k)
{
    int got = (int)live_scalar(obs, "SELECT pg_try_advisory_lock(%lld)",
                               (long long)k);
    if (got)
        live_exec(obs, "SELECT pg_advisory_unlock(%lld)", (long long)k);
    return got;
}

static inline int live_shared_free_int64(PGconn *obs, int64_t k)
{
    int got = (int)live_scalar(obs,
                               "SELECT pg_try_advisory_lock_shared(%lld)",
                               (long long)k);
    if (got)
        live_exec(obs, "SELECT pg_advisory_unlock_shared(%lld)",
                  (long long)k);
    return got;
}

/* Advisory locks of backend pid: granted ones, or waiting ones. */
static inline long live_granted(PGconn *obs, int pid)
{
    return live_scalar(obs, "SELECT count(*) FROM pg_locks WHERE pid = %d"
                       " AND locktype = 'advisory' AND granted", pid);
}

static inline long live_waiting(PGconn *obs, int pid)
{
    return live_scalar(obs, "SELECT count(*) FROM pg_locks WHERE pid = %d"
                       " AND NOT granted", pid);
}

static inline int64_t live_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Polls (bounded) until backend pid waits for a lock; fails otherwise. */
static inline void live_until_waiting(PGconn *obs, int pid)
{
    int64_t end = live_ms() + 10000;
    while (live_waiting(obs, pid) == 0) {
        if (live_ms() > end)
            fail_msg("backend %d never started waiting", pid);
        usleep(2000);
    }
}

/* Polls (bounded) until backend pid is gone from pg_stat_activity. */
static inline int live_until_gone(PGconn *obs, int pid)
{
    int64_t end = live_ms() + 10000;
    while (live_scalar(obs, "SELECT count(*) FROM pg_stat_activity"
                       " WHERE pid = %d", pid) != 0) {
        if (live_ms() > end)
            return 0;
        usleep(5000);
    }
    return 1;
}

/* Sends one command ("cut", "heal", "count", "reset") to the proxy's
 * control socket; the answer goes to out.  Returns 0 or -1. */
static inline int live_proxy_ctl(const char *path, const char *cmd, char *out,
                                 size_t len)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", path);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof sa) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char line[64];
    int n = snprintf(line, sizeof line, "%s\n", cmd);
    if (write(fd, line, (size_t)n) != n) {
        close(fd);
        return -1;
    }
    /* Always read the answer: it also says the command was done. */
    char scratch[128];
    if (!out || !len) {
        out = scratch;
        len = sizeof scratch;
    }
    size_t got = 0;
    {
        ssize_t r;
        while (got + 1 < len && (r = read(fd, out + got, len - 1 - got)) > 0) {
            got += (size_t)r;
            if (memchr(out, '\n', got))
                break;
        }
        out[got] = '\0';
    }
    close(fd);
    return 0;
}

/* Round trips the proxy counted since its last reset, or -1. */
static inline long live_proxy_roundtrips(const char *ctl)
{
    char buf[128];
    if (live_proxy_ctl(ctl, "count", buf, sizeof buf) != 0)
        return -1;
    const char *p = strstr(buf, "roundtrips=");
    return p ? strtol(p + 11, NULL, 10) : -1;
}

/* A key unique to this process and call, to keep tests apart. */
static inline int64_t live_key(void)
{
    static int n;
    return ((int64_t)getpid() << 20) + 7000 + (++n);
}

#endif
