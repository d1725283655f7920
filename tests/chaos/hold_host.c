/*
 * pglock_test_chaos_hold HOST thread|loop WAIT_MS LEASE STEP_MS STEPS KEY CONNINFO
 *
 * A chaos host that uses the library's managed hold instead of `pglock
 * run`: one job per process.  It takes KEY (WAIT_MS 0: a try), a fencing
 * token, starts a hold (PGLOCK_HOLD_THREAD, or PGLOCK_HOLD_LOOP driven by
 * poll() here), then works STEPS steps of STEP_MS each, checking for the
 * loss notice between steps, and stops on it.  It writes job.sh's lines to
 * $CHAOS_DIR/jobs.log (start, a beat after each step, end ok|lost|term)
 * with MODE lib-thread or lib-loop and step_ms= in the start line, and
 * keeps job.sh's /proc bookkeeping (alive=, $CHAOS_DIR/live/PID), so that
 * check.py proves no overlap for it as for the CLI's jobs.
 *
 * LEASE is lease_ms, or "dead_peer=MS": no lease (lease_ms 0, the
 * options' default) and dead_peer_ms MS, whose T_s the hold then keeps
 * (the start line says lease=none).
 *
 * A step is work that cannot be interrupted by the notice (a sleep here):
 * after a loss the job stops within one step, and its step is kept under
 * the caller's budget T_s/6.  The end line is written and the live file
 * removed before the hold stops and the client closes, since only then
 * can the lock be freed.  SIGTERM ends it after the current step (143).
 *
 * Exit: 0 done, 74 the lock was lost, 75 busy or timed out, 69 no
 * connection or no token, 143 SIGTERM, 64 usage.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "pglock.h"

#define MAX_ALIVE 64

static volatile sig_atomic_t terminated;
/* Written by on_term: the lock wait's interrupt fd. */
static int term_pipe[2] = {-1, -1};
static volatile sig_atomic_t lost; /* thread mode: set by on_lost */

static const char *host, *mode, *dir;
static char token[24] = "-";
static int log_fd = -1;

static void on_term(int sig)
{
    (void)sig;
    terminated = 1;
    int saved = errno;
    ssize_t wr = write(term_pipe[1], "x", 1);
    (void)wr;
    errno = saved;
}

static void on_lost(void *arg, int code, const char *message)
{
    (void)arg;
    (void)code;
    (void)message;
    lost = 1;
}

/* One jobs.log line in one write(), as job.sh's `>>`: appends do not mix. */
static void line(const char *fmt, ...)
{
    char buf[1024];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    int n = snprintf(buf, sizeof buf, "%lld%06ld %s %s %s %d ",
                     (long long)ts.tv_sec, ts.tv_nsec / 1000, host, mode, token,
                     (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    if (write(log_fd, buf, (size_t)n) != n)
        _exit(70);
}

/* The state letter and start time (field 22) of a process; -1 if gone. */
static int proc_stat(int pid, char *state, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%c", state) != 1)
        return -1;
    /* the n-th space after "comm)" opens field n + 2: start is field 22 */
    for (int i = 0; i < 20 && p; i++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p + 1, "%llu", start) != 1)
        return -1;
    return 0;
}

/* Is the earlier job PID (by its live file) still there?  Its live file
 * holds its start time, so that a reused pid is not mistaken for it; a
 * job that is gone has its file removed, as job.sh does. */
static int still_alive(int pid)
{
    char path[PATH_MAX];
    unsigned long long want, start;
    char state;
    snprintf(path, sizeof path, "%s/live/%d", dir, pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int ok = fscanf(f, "%llu", &want) == 1;
    fclose(f);
    if (!ok)
        return 0;
    if (proc_stat(pid, &state, &start) != 0 || state == 'Z' || start != want) {
        unlink(path);
        return 0;
    }
    return 1;
}

/* Keeps in alive[] those still there; writes them as "a,b" or "-". */
static void recheck(int *alive, int *n, char *out, size_t len)
{
    int k = 0;
    size_t used = 0;
    out[0] = '\0';
    for (int i = 0; i < *n; i++) {
        if (!still_alive(alive[i]))
            continue;
        alive[k++] = alive[i];
        used += (size_t)snprintf(out + used, len - used, "%s%d",
                                 used ? "," : "", alive[i]);
        if (used >= len)
            used = len - 1;
    }
    *n = k;
    if (!k)
        snprintf(out, len, "-");
}

/* Every earlier job still alive, from $CHAOS_DIR/live. */
static void scan_live(int *alive, int *n)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/live", dir);
    DIR *d = opendir(path);
    *n = 0;
    if (!d)
        return;
    struct dirent *e;
    while ((e = readdir(d)) && *n < MAX_ALIVE) {
        int pid = atoi(e->d_name);
        if (pid > 0 && pid != (int)getpid())
            alive[(*n)++] = pid;
    }
    closedir(d);
}

static void write_file(const char *name, const char *fmt, ...)
{
    char path[PATH_MAX], tmp[PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    snprintf(tmp, sizeof tmp, "%s.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(f, fmt, ap);
    va_end(ap);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        unlink(tmp);
}

/* Loop mode: one step's time spent driving the hold from poll(); returns
 * the loss code (0 while held).  The hold is served before the step ends,
 * so a loss found on waking stops the job before its next beat. */
static int loop_step(pglock_hold *h, long step_ms, long *hold_timeout)
{
    int64_t end = pglock_now_ms() + step_ms;
    for (;;) {
        int rc = pglock_hold_step(h, hold_timeout);
        if (rc)
            return rc;
        int64_t left = end - pglock_now_ms();
        if (left <= 0 || terminated)
            return 0;
        long t = *hold_timeout >= 0 && *hold_timeout < left ? *hold_timeout
                                                            : (long)left;
        struct pollfd fds[2] = {{.fd = pglock_hold_fd(h), .events = POLLIN},
                                {.fd = pglock_hold_loss_fd(h),
                                 .events = POLLIN}};
        poll(fds, 2, (int)t);
    }
}

/* Thread mode: one step of work no notice interrupts (a sleep; SIGTERM
 * ends it early). */
static void thread_step(long step_ms)
{
    struct timespec t = {step_ms / 1000, (step_ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0 && errno == EINTR && !terminated) {
    }
}

int main(int argc, char **argv)
{
    if (argc != 9 || (strcmp(argv[2], "thread") && strcmp(argv[2], "loop")) ||
        !(dir = getenv("CHAOS_DIR"))) {
        fprintf(stderr,
                "usage: CHAOS_DIR=D pglock_test_chaos_hold HOST thread|loop "
                "WAIT_MS LEASE|dead_peer=MS STEP_MS STEPS KEY CONNINFO\n");
        return 64;
    }
    host = argv[1];
    int loop = !strcmp(argv[2], "loop");
    mode = loop ? "lib-loop" : "lib-thread";
    long wait_ms = atol(argv[3]), step_ms = atol(argv[5]);
    int no_lease = !strncmp(argv[4], "dead_peer=", 10);
    long lease_ms = no_lease ? 0 : atol(argv[4]);
    long t_s = no_lease ? atol(argv[4] + 10) : lease_ms;
    int steps = atoi(argv[6]);
    pglock_key key;
    if (pglock_key_int64(&key, strtoll(argv[7], NULL, 10)) != 0)
        return 64;
    if (pipe(term_pipe) < 0)
        return 69;
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);

    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = lease_ms;
    if (no_lease)
        o.dead_peer_ms = t_s;
    o.interrupt_fd = term_pipe[0];
    pglock_client *c = NULL;
    int rc = pglock_client_open(&c, argv[8], &o);
    if (rc == 0)
        rc = pglock_lock(c, &key, PGLOCK_EXCLUSIVE, wait_ms);
    if (rc != 0) {
        int busy = rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT;
        if (!busy)
            fprintf(stderr, "%s %s: %s\n", host, mode,
                    c ? pglock_client_error(c) : "out of memory");
        pglock_client_close(c);
        return terminated ? 143 : busy ? 75 : 69;
    }
    /* The token, bounded by the client deadline, as pglock run takes it. */
    int64_t tok,
        left = pglock_client_confirmed_at(c) + t_s * 2 / 3 - pglock_now_ms();
    rc = pglock_client_fencing_token(c, &tok, left > 0 ? (long)left : 0);
    pglock_hold_options ho;
    pglock_hold_options_init(&ho, PGLOCK_HOLD_OPTIONS_VERSION);
    ho.drive = loop ? PGLOCK_HOLD_LOOP : PGLOCK_HOLD_THREAD;
    ho.on_lost = loop ? NULL : on_lost;
    pglock_hold *h = NULL;
    if (rc == 0)
        rc = pglock_hold_start(&h, c, &ho);
    if (rc != 0) {
        fprintf(stderr, "%s %s: %s\n", host, mode, pglock_client_error(c));
        pglock_client_close(c);
        return 69;
    }
    snprintf(token, sizeof token, "%lld", (long long)tok);

    char path[PATH_MAX], list[512];
    snprintf(path, sizeof path, "%s/jobs.log", dir);
    log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
    if (log_fd < 0)
        return 70;
    int alive[MAX_ALIVE], nalive;
    char state;
    unsigned long long me;
    if (proc_stat((int)getpid(), &state, &me) != 0)
        return 70;
    scan_live(alive, &nalive);
    recheck(alive, &nalive, list, sizeof list);
    line("start pglock=%d ignore_term=0 step_ms=%ld lease=%s alive=%s",
         (int)getpid(), step_ms, no_lease ? "none" : "set", list);
    char name[32];
    snprintf(name, sizeof name, "live/%d", (int)getpid());
    write_file(name, "%llu\n", me);
    write_file("holder", "%s %d\n", host, (int)getpid());

    const char *end = "ok";
    long hold_timeout = 0;
    for (int i = 0; i < steps; i++) {
        if (terminated) {
            end = "term";
            break;
        }
        if (loop ? loop_step(h, step_ms, &hold_timeout) != 0
                 : (thread_step(step_ms), lost || pglock_hold_loss(h))) {
            end = "lost";
            break;
        }
        recheck(alive, &nalive, list, sizeof list);
        line("beat alive=%s", list);
    }
    /* The work has stopped: say so, and only then let the lock go. */
    line("end %s", end);
    snprintf(path, sizeof path, "%s/live/%d", dir, (int)getpid());
    unlink(path);
    rc = pglock_hold_stop(h);
    pglock_client_close(c); /* unlocks (when still held) and waits for it */
    return !strcmp(end, "lost") || rc != 0 ? 74
           : !strcmp(end, "term")          ? 143
                                           : 0;
}
