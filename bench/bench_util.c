/* Clock, statistics, libpq helpers and the proxy counter for the benchmarks. */
#include "bench.h"

#include <errno.h>
#include <netdb.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

/* The CPUs this process was allowed before the first pin (which narrows
 * them), read once; NULL when they cannot be read. */
static const cpu_set_t *allowed_cpus(void)
{
    static cpu_set_t allowed;
    static int known;
    if (!known && sched_getaffinity(0, sizeof allowed, &allowed) != 0)
        return NULL;
    known = 1;
    return &allowed;
}

int bench_pin(int pid, int cpu)
{
    const cpu_set_t *allowed = allowed_cpus();
    if (!allowed)
        return -1;
    cpu_set_t one;
    int n = CPU_COUNT(allowed);
    if (n < 1)
        return -1;
    int want = cpu % n;
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, allowed) && want-- == 0) {
            CPU_SET(i, &one);
            break;
        }
    return sched_setaffinity(pid, sizeof one, &one) == 0 ? 0 : -1;
}

int bench_unpin(int pid)
{
    const cpu_set_t *allowed = allowed_cpus();
    if (!allowed)
        return -1;
    return sched_setaffinity(pid, sizeof *allowed, allowed) == 0 ? 0 : -1;
}

int64_t bench_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void bench_die(const char *fmt, ...)
{
    va_list ap;
    fputs("bench: error: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bench_quantile(double *v, size_t n, double q)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof *v, cmp_double);
    size_t i = (size_t)(q * (double)n);
    if (i >= n)
        i = n - 1;
    return v[i];
}

const char *bench_spread(char *buf, size_t len, const char *fmt, double *v,
                         size_t n)
{
    char a[32], b[32], c[32];
    if (n == 0) {
        snprintf(buf, len, "n/a");
        return buf;
    }
    double med = bench_quantile(v, n, 0.5); /* also sorts */
    snprintf(a, sizeof a, fmt, med);
    if (n == 1) {
        snprintf(buf, len, "%s", a);
        return buf;
    }
    snprintf(b, sizeof b, fmt, v[0]);
    snprintf(c, sizeof c, fmt, v[n - 1]);
    snprintf(buf, len, "%s (%s–%s)", a, b, c);
    return buf;
}

PGconn *bench_connect(const char *conninfo)
{
    PGconn *conn = PQconnectdb(conninfo ? conninfo : "");
    if (PQstatus(conn) != CONNECTION_OK)
        bench_die("could not connect: %s", PQerrorMessage(conn));
    return conn;
}

void bench_exec(PGconn *conn, const char *sql, const int64_t *key,
                ExecStatusType expect)
{
    char text[24];
    const char *values[1] = {text};
    PGresult *res;
    if (key) {
        snprintf(text, sizeof text, "%lld", (long long)*key);
        res = PQexecParams(conn, sql, 1, NULL, values, NULL, NULL, 0);
    } else {
        res = PQexecParams(conn, sql, 0, NULL, NULL, NULL, NULL, 0);
    }
    if (PQresultStatus(res) != expect)
        bench_die("%s: %s", sql, PQerrorMessage(conn));
    PQclear(res);
}

/* Opens the control socket: a path (contains '/') or HOST:PORT. */
static int ctl_connect(const char *ctl)
{
    if (!ctl || !*ctl)
        return -1;
    if (strchr(ctl, '/')) {
        struct sockaddr_un sa = {.sun_family = AF_UNIX};
        if (strlen(ctl) >= sizeof sa.sun_path)
            return -1;
        strcpy(sa.sun_path, ctl);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (fd < 0)
            return -1;
        if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
            close(fd);
            return -1;
        }
        return fd;
    }
    char host[256];
    const char *colon = strrchr(ctl, ':');
    if (!colon || (size_t)(colon - ctl) >= sizeof host)
        return -1;
    memcpy(host, ctl, (size_t)(colon - ctl));
    host[colon - ctl] = '\0';
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
    if (getaddrinfo(host, colon + 1, &hints, &ai) != 0)
        return -1;
    int fd = socket(ai->ai_family, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* Sends one command line and reads the one-line answer into buf. */
static int ctl_ask(const char *ctl, const char *cmd, char *buf, size_t len)
{
    int fd = ctl_connect(ctl);
    if (fd < 0)
        return -1;
    size_t cmdlen = strlen(cmd);
    if (write(fd, cmd, cmdlen) != (ssize_t)cmdlen) {
        close(fd);
        return -1;
    }
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(buf, '\n', got))
            break;
    }
    buf[got] = '\0';
    close(fd);
    return got > 0 ? 0 : -1;
}

long bench_proxy_roundtrips(const char *ctl)
{
    char buf[256];
    if (ctl_ask(ctl, "count\n", buf, sizeof buf) < 0)
        return -1;
    const char *p = strstr(buf, "roundtrips=");
    return p ? strtol(p + strlen("roundtrips="), NULL, 10) : -1;
}

int bench_proxy_reset(const char *ctl)
{
    char buf[256];
    return ctl_ask(ctl, "reset\n", buf, sizeof buf);
}
