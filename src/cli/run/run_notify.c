/*
 * What `pglock lead` tells whoever runs it: a service manager through
 * systemd's notify protocol, a probe through --state-file.
 *
 * The notify protocol is sd_notify(3)'s, written here rather than linked
 * from libsystemd so that pglock needs only libpq and libcrypto at run
 * time: one datagram of "KEY=VALUE" lines to the AF_UNIX socket named by
 * $NOTIFY_SOCKET (a path, or an abstract address written with a leading
 * '@').  READY=1 once lead contends, STATUS= at each transition, and
 * WATCHDOG=1 each time the server answers (a heartbeat confirmed, a wait
 * slice answered) when $WATCHDOG_USEC asks for pings and $WATCHDOG_PID,
 * if set, is ours.  The three variables are then removed from the
 * environment: the command must not take pglock's socket for its own.
 *
 * The state file is one word on its first line (waiting or leader), then
 * since=TIME (UTC) and, when leader, token=N; it is replaced by rename()
 * so that a reader sees the old file or the new, never half of one, and
 * removed when lead exits.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"
#include "run.h"

struct run_notify {
    int fd; /* the notify socket, or -1 */
    struct sockaddr_un addr;
    socklen_t addr_len;
    long watchdog_ms; /* WATCHDOG_USEC in ms, or 0: no pings */
    int ready_sent;
    const char *state_file; /* --state-file, or NULL */
    int state_warned;       /* a failed rewrite was said once */
    char state[16];         /* what the state file says now */
};

/* $NOTIFY_SOCKET as an address: 0, or -1 when it names none we can use. */
static int notify_address(run_notify *n, const char *path)
{
    size_t len = strlen(path);
    if ((path[0] != '/' && path[0] != '@') || len < 2 ||
        len >= sizeof n->addr.sun_path)
        return -1;
    memset(&n->addr, 0, sizeof n->addr);
    n->addr.sun_family = AF_UNIX;
    memcpy(n->addr.sun_path, path, len);
    if (path[0] == '@')
        n->addr
            .sun_path[0] = '\0'; /* the abstract namespace: no NUL at the end */
    n->addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len +
                              (path[0] == '/'));
    return 0;
}

/* WATCHDOG_USEC, unless WATCHDOG_PID names another process (a variable
 * inherited from a parent that was itself watched). */
static long watchdog_ms(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
    if (!usec || !*usec)
        return 0;
    if (pid && *pid && strtol(pid, NULL, 10) != (long)getpid())
        return 0;
    char *end;
    errno = 0;
    unsigned long long us = strtoull(usec, &end, 10);
    if (errno || *end || us == 0)
        return 0;
    return us / 1000 > 0 && us / 1000 < 2147483647ULL ? (long)(us / 1000) : 1;
}

static void send_message(run_notify *n, const char *msg)
{
    if (n->fd < 0)
        return;
    if (sendto(n->fd, msg, strlen(msg), MSG_NOSIGNAL,
               (struct sockaddr *)&n->addr, n->addr_len) < 0)
        cli_verbose("could not notify the service manager: %s",
                    strerror(errno));
}

static void utc_now(char *buf, size_t len)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(buf, len, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Rewrites the state file: a temporary file beside it, then rename(). */
static int write_state(run_notify *n, const char *state, const char *since,
                       int64_t token, char *err, size_t errlen)
{
    if (!n->state_file)
        return 0;
    char tmp[4096], body[160];
    int len = snprintf(body, sizeof body, "%s\nsince=%s\n", state, since);
    if (token > 0)
        len += snprintf(body + len, sizeof body - (size_t)len, "token=%lld\n",
                        (long long)token);
    if (snprintf(tmp, sizeof tmp, "%s.%ld.tmp", n->state_file,
                 (long)getpid()) >= (int)sizeof tmp) {
        snprintf(err, errlen, "could not write state file \"%s\": %s",
                 n->state_file, strerror(ENAMETOOLONG));
        return -1;
    }
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    int ok = fd >= 0 && write(fd, body, (size_t)len) == len;
    int saved = errno;
    if (fd >= 0 && close(fd) != 0 && ok) {
        ok = 0;
        saved = errno;
    }
    if (ok && rename(tmp, n->state_file) != 0) {
        ok = 0;
        saved = errno;
    }
    if (!ok) {
        if (fd >= 0)
            unlink(tmp);
        snprintf(err, errlen, "could not write state file \"%s\": %s",
                 n->state_file, strerror(saved));
        return -1;
    }
    snprintf(n->state, sizeof n->state, "%s", state);
    return 0;
}

/* A transition: the state file (when it changes) and STATUS=. */
static void report(run_notify *n, const char *state, int64_t token,
                   const char *status)
{
    if (!n)
        return;
    if (strcmp(n->state, state) != 0) {
        char since[32], err[600];
        utc_now(since, sizeof since);
        if (write_state(n, state, since, token, err, sizeof err) != 0 &&
            !n->state_warned) {
            n->state_warned = 1;
            cli_warning("%s", err);
        }
    }
    char msg[1200];
    snprintf(msg, sizeof msg, "STATUS=%s", status);
    /* one line: a newline would start another assignment */
    for (char *p = msg; *p; p++)
        if (*p == '\n')
            *p = ' ';
    send_message(n, msg);
}

int run_notify_open(run_notify **out, const char *state_file, char *err,
                    size_t errlen)
{
    *out = NULL;
    const char *sock = getenv("NOTIFY_SOCKET");
    if (!state_file && (!sock || !*sock))
        return 0;
    run_notify *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    n->fd = -1;
    n->state_file = state_file;
    if (sock && *sock) {
        if (notify_address(n, sock) != 0)
            cli_warning("NOTIFY_SOCKET \"%s\" is not a socket address: the "
                        "service manager is not told",
                        sock);
        else if ((n->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) < 0)
            cli_warning("could not open the notify socket: %s",
                        strerror(errno));
        else
            n->watchdog_ms = watchdog_ms();
    }
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    unsetenv("WATCHDOG_PID");
    char since[32];
    utc_now(since, sizeof since);
    if (write_state(n, "waiting", since, 0, err, errlen) != 0) {
        run_notify_close(n);
        return -1;
    }
    *out = n;
    return 0;
}

void run_notify_close(run_notify *n)
{
    if (!n)
        return;
    if (n->state_file && n->state[0])
        unlink(n->state_file);
    if (n->fd >= 0) {
        send_message(n, "STOPPING=1");
        close(n->fd);
    }
    free(n);
}

long run_notify_watchdog_ms(const run_notify *n)
{
    return n ? n->watchdog_ms : 0;
}

void run_notify_ready(run_notify *n)
{
    if (n && !n->ready_sent) {
        n->ready_sent = 1;
        send_message(n, "READY=1");
    }
}

void run_notify_alive(run_notify *n)
{
    if (n && n->watchdog_ms > 0)
        send_message(n, "WATCHDOG=1");
}

void run_notify_status(run_notify *n, const char *state, const char *fmt, ...)
{
    if (!n)
        return;
    char status[1000];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(status, sizeof status, fmt, ap);
    va_end(ap);
    report(n, state, 0, status);
}

void run_notify_leader(run_notify *n, int64_t token)
{
    if (!n)
        return;
    char since[32], status[200];
    utc_now(since, sizeof since);
    snprintf(status, sizeof status, "leader since %s, token %lld", since,
             (long long)token);
    report(n, "leader", token, status);
}
