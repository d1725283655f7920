/*
 * The watchdog of `pglock run`: a small forked process that is the job's
 * parent and a child subreaper, and that holds an inherited copy of the
 * lock connection's socket.  The lock cannot be released (the server sees
 * the connection close only when every copy is closed, or after the lease)
 * before the watchdog has seen every process of the job gone.
 *
 * Why a separate process: pglock itself can be SIGKILLed.  Its copy of the
 * socket then closes at once, but the watchdog's copy keeps the session
 * (and the lock) alive while it SIGKILLs the job and reaps every process;
 * only then does it exit and the session end.
 *
 * "Every process of the job" is every descendant of the watchdog.  As a
 * subreaper it inherits orphans, so a grandchild that double-forks or
 * calls setsid() stays in its tree; waitpid() failing with ECHILD proves
 * the tree is empty.  Descendants are found by reading /proc/PID/stat
 * (parent pids), because a setsid() grandchild has left the job's process
 * group.  Limits: a process that escapes the tree (ptrace tricks, a
 * daemon started through systemd or another service manager) is not the
 * job's; a pid could in theory be reused between the /proc scan and
 * kill(), a window of microseconds within our own subtree.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pglock.h"
#include "run.h"

/* How far the job's stop has gone. */
typedef enum {
    WD_RUNNING,   /* no stop begun */
    WD_TERM_SENT, /* SIGTERM sent: SIGKILL follows at kill_at */
    WD_KILLING    /* SIGKILL sent, and sent again until the tree
                            is empty */
} wd_phase;

typedef struct watchdog {
    const run_job *job;
    int ctl_fd; /* -1 once pglock is gone */
    int report_fd;
    pid_t job_pid;    /* 0 once reaped */
    int stopped;      /* the job is stopped by us (SIGSTOP) */
    int64_t deadline; /* client deadline; 0: none */
    int64_t stop_by;  /* the job gone by then after a loss; 0: none */
    wd_phase phase;
    int64_t kill_at;        /* WD_TERM_SENT: when SIGKILL follows */
    int tty_reported;       /* RUN_REP_TTY_STOPPED sent */
    int said_not_permitted; /* say_not_permitted() has warned */
} watchdog;

static void report(watchdog *w, int kind, int arg)
{
    run_msg m = {kind, arg, 0};
    /* A pipe write this small is atomic; pglock may be gone (EPIPE). */
    if (write(w->report_fd, &m, sizeof m) < 0) {
        /* nothing to do: pglock no longer listens */
    }
}

/* A process of the job that we may not signal: it gained privileges (a
 * setuid program, under --allow-setuid) and can outlive the lock.  Said
 * once per *said (set then), on pglock's stderr, which the watchdog
 * shares. */
static void say_not_permitted(pid_t pid, int *said)
{
    if (*said)
        return;
    *said = 1;
    cli_warning("could not signal process %d of the command: %s; it gained "
                "privileges (--allow-setuid) and can outlive the lock",
                (int)pid, strerror(EPERM));
}

/* Reads every pid's parent from /proc and signals the descendants of
 * root (excluding root), but none in process group skip (0: none), which
 * the caller has signalled already: a process that gets a signal twice
 * may run its handler twice (a TERM trap that runs between the two).
 * *said: whether a process we may not signal has been warned of. */
static int signal_tree(pid_t root, int signo, pid_t skip, int *said)
{
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    size_t cap = 1024, n = 0;
    pid_t *pid = malloc(cap * sizeof *pid), *ppid = malloc(cap * sizeof *ppid);
    pid_t *pgrp = malloc(cap * sizeof *pgrp);
    struct dirent *e;
    while (pid && ppid && pgrp && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9')
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t len = read(fd, buf, sizeof buf - 1);
        close(fd);
        if (len <= 0)
            continue;
        buf[len] = '\0';
        char *close_paren = strrchr(buf, ')');
        int parent, group;
        if (!close_paren ||
            sscanf(close_paren + 1, " %*c %d %d", &parent, &group) != 2)
            continue;
        if (n == cap) {
            cap *= 2;
            pid_t *p1 = realloc(pid, cap * sizeof *pid);
            pid_t *p2 = p1 ? realloc(ppid, cap * sizeof *ppid) : NULL;
            pid_t *p3 = p2 ? realloc(pgrp, cap * sizeof *pgrp) : NULL;
            if (p1)
                pid = p1;
            if (p2)
                ppid = p2;
            if (p3)
                pgrp = p3;
            if (!p1 || !p2 || !p3)
                break;
        }
        pid[n] = (pid_t)atoi(e->d_name);
        pgrp[n] = group;
        ppid[n++] = parent;
    }
    closedir(d);
    int count = 0;
    if (pid && ppid && pgrp) {
        /* Breadth first: mark descendants by repeated passes (the tree is
         * small; n is the whole system's process count). */
        char *mark = calloc(n ? n : 1, 1);
        int changed = 1;
        while (mark && changed) {
            changed = 0;
            for (size_t i = 0; i < n; i++) {
                if (mark[i])
                    continue;
                int is_child = ppid[i] == root;
                for (size_t j = 0; !is_child && j < n; j++)
                    is_child = mark[j] && pid[j] == ppid[i];
                if (is_child) {
                    mark[i] = 1;
                    changed = 1;
                }
            }
        }
        for (size_t i = 0; mark && i < n; i++) {
            if (!mark[i])
                continue;
            /* signalled with its group: only asked whether it may be */
            int sig = skip > 0 && pgrp[i] == skip ? 0 : signo;
            if (kill(pid[i], sig) == 0)
                count++;
            else if (errno == EPERM)
                say_not_permitted(pid[i], said);
        }
        free(mark);
    }
    free(pid);
    free(ppid);
    free(pgrp);
    return count;
}

const int run_handled_signals[] = {SIGCHLD, SIGINT,  SIGTERM, SIGHUP,   SIGQUIT,
                                   SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1,  SIGUSR2,
                                   SIGALRM, SIGCONT, SIGPIPE, SIGWINCH, 0};

int run_signal_descendants(int signo, int *said)
{
    return signal_tree(getpid(), signo, 0, said);
}

/* Signals the whole job, each process once: its process group (while
 * the leader is unreaped, so the group id cannot have been reused) and
 * every descendant outside it. */
static void signal_job(watchdog *w, int signo)
{
    pid_t group = w->job_pid > 0 && !w->job->foreground ? w->job_pid : 0;
    if (group > 0)
        kill(-group, signo);
    signal_tree(getpid(), signo, group, &w->said_not_permitted);
}

/* Stops the job after a loss: one SIGTERM now, then SIGKILL at a fixed
 * time, kill-after from now or the hold's stop-by (the client deadline +
 * kill-after) if that is sooner, however late this runs.  So a wake-up a
 * little past the deadline still gives the SIGTERM and the rest of the
 * grace, and the SIGKILL still comes a margin before the server's lease
 * ends (the rule run_lease_derive() keeps).  Only a wake-up past stop-by
 * (a thaw after a pause: a freeze, a debugger, a suspended host) skips
 * the grace, since someone else may hold the lock already; and a job we
 * stopped is killed, never resumed. */
static void begin_terminate(watchdog *w)
{
    if (w->phase != WD_RUNNING)
        return;
    int64_t now = pglock_now_ms();
    int64_t kill_at = now + w->job->kill_after_ms;
    if (w->stop_by > 0 && w->stop_by < kill_at)
        kill_at = w->stop_by;
    if (w->stopped || now >= kill_at) {
        w->phase = WD_KILLING;
        signal_job(w, SIGKILL);
        return;
    }
    w->phase = WD_TERM_SENT;
    w->kill_at = kill_at;
    signal_job(w, SIGTERM);
    signal_job(w, SIGCONT);
}

static void begin_kill(watchdog *w)
{
    w->phase = WD_KILLING;
    signal_job(w, SIGKILL);
}

static void handle_ctl(watchdog *w, const run_msg *m)
{
    switch (m->op) {
    case RUN_CTL_SIGNAL:
        if (w->phase != WD_RUNNING)
            break;
        if (w->job_pid > 0)
            kill(w->job->foreground ? w->job_pid : -w->job_pid, m->arg);
        else
            signal_tree(getpid(), m->arg, 0, &w->said_not_permitted);
        /* A job the kernel stopped (SIGTTIN) would keep the signal
         * pending forever; one we stopped stays stopped. */
        if (!w->stopped && w->job_pid > 0 &&
            (m->arg == SIGINT || m->arg == SIGTERM || m->arg == SIGHUP ||
             m->arg == SIGQUIT))
            kill(w->job->foreground ? w->job_pid : -w->job_pid, SIGCONT);
        break;
    case RUN_CTL_TERMINATE:
        begin_terminate(w);
        break;
    case RUN_CTL_KILL:
        begin_kill(w);
        break;
    case RUN_CTL_STOP:
        if (w->phase == WD_RUNNING) {
            w->stopped = 1;
            signal_job(w, SIGSTOP);
        }
        report(w, RUN_REP_STOPPED, 0);
        break;
    case RUN_CTL_CONT:
        if (w->phase == WD_RUNNING && w->stopped) {
            w->stopped = 0;
            signal_job(w, SIGCONT);
        }
        break;
    case RUN_CTL_DEADLINE:
        w->deadline = m->value;
        break;
    case RUN_CTL_STOP_BY:
        w->stop_by = m->value;
        break;
    }
}

/* Reaps every exited child; returns 1 when no child remains at all. */
static int reap(watchdog *w)
{
    int job_exited = 0;
    for (;;) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG | WUNTRACED | WCONTINUED);
        if (p < 0 && errno == EINTR)
            continue;
        if (p < 0)
            return 1; /* ECHILD: the tree is empty */
        if (p == 0)
            break;
        if (WIFCONTINUED(status)) {
            /* Someone else continued a job we stopped while pglock is
             * suspended and ownership unverified: stop it again. */
            if (w->stopped && w->phase == WD_RUNNING)
                signal_job(w, SIGSTOP);
            continue;
        }
        if (WIFSTOPPED(status)) {
            /* A background job that touches the terminal is stopped by
             * the kernel; say so once, or it would look like a hang. */
            int sig = WSTOPSIG(status);
            if (p == w->job_pid && !w->stopped && !w->tty_reported &&
                (sig == SIGTTIN || sig == SIGTTOU)) {
                w->tty_reported = 1;
                report(w, RUN_REP_TTY_STOPPED, sig);
            }
            continue;
        }
        if (p == w->job_pid) {
            w->job_pid = 0;
            report(w, RUN_REP_EXITED, status);
            job_exited = 1;
        }
    }
    /* The command is done but left processes behind (children remain, so
     * the tree is not empty): they go too.  A command that left nothing
     * ends with ECHILD above, with no /proc scan. */
    if (job_exited && w->phase == WD_RUNNING)
        begin_terminate(w);
    return 0;
}

/* What the job's process leaves instead of an errno when the deadline
 * passed before its exec. */
#define RUN_EXEC_PAST_DEADLINE (-1)

/* In the job's process, before the exec: leaves why in *why (an errno, or
 * RUN_EXEC_PAST_DEADLINE) and exits. */
static void job_fail(volatile int *why, int e)
{
    *why = e;
    _exit(e == ENOENT ? 127 : e == RUN_EXEC_PAST_DEADLINE ? 70 : 126);
}

/* Starts the command in a child, its pid in *pid; *exec_errno: why it
 * was not started (an errno, or RUN_EXEC_PAST_DEADLINE), 0 once it has
 * exec'd.  Returns 0, or the errno of a vfork() that failed.
 *
 * vfork(): the child borrows the watchdog's memory until it execs or
 * exits, and the watchdog sleeps until then.  So starting the command
 * copies no page tables (the watchdog is a fork of pglock, with libpq and
 * its TLS libraries mapped: a fork is most of the start's cost), and the
 * child can leave its failure in a variable of ours: when vfork()
 * returns, the exec has happened or the child has said why not.  The
 * child only makes system calls and then execs or _exits, as vfork
 * requires; no handler of ours can run in it (the watchdog's signals are
 * blocked and at SIG_DFL, and the job's dispositions come from pglock's
 * own start, where only SIG_DFL and SIG_IGN are inherited). */
static int spawn_job(const run_job *job, pid_t *pid, int *exec_errno)
{
    pid_t job_parent = getpid();
    volatile int why = 0;
    /* vfork() on purpose, and its child only makes system calls (above) */
    /* NOLINTNEXTLINE(clang-analyzer-security.insecureAPI.vfork) */
    pid_t p = vfork();
    if (p < 0)
        return errno;
    /* The analyzer allows a vfork child only exec and _exit; ours makes the
     * system calls this function's comment names, as Linux's vfork lets it. */
    /* NOLINTBEGIN(clang-analyzer-unix.Vfork) */
    if (p == 0) {
        /* Our own group, or (--foreground) pglock's, which the terminal
         * talks to; never the watchdog's (see watchdog_main).  Done here,
         * before the exec, and the watchdog sleeps until then: no signal
         * finds the command in the old group. */
        setpgid(0, job->foreground ? job->foreground_pgrp : 0);
        /* Defence in depth: should the watchdog itself be killed, the
         * command does not outlive it.  (Its own children are still found
         * by pglock, the next subreaper up.) */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != job_parent)
            _exit(70);
        /* No process of the job may become one the watchdog cannot
         * signal: a setuid program (sudo) would give it another real uid,
         * our kill() would fail with EPERM, and it would run on after the
         * lock is gone (PR_SET_PDEATHSIG, too, is cleared by such an
         * exec).  With no_new_privs that exec grants nothing, so the
         * program fails at once, in its own words. */
        if (!job->allow_setuid && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0)
            job_fail(&why, errno);
        for (const int *sig = run_handled_signals; *sig; sig++)
            sigaction(*sig, &job->orig_act[*sig], NULL);
        sigprocmask(SIG_SETMASK, &job->orig_mask, NULL);
        /* Last before the exec: a pause since ownership was confirmed (a
         * freeze, a debugger, a suspended host) may have outlasted the
         * client deadline, and then the lease. */
        if (job->deadline > 0 && pglock_now_ms() >= job->deadline)
            job_fail(&why, RUN_EXEC_PAST_DEADLINE);
        if (job->shell_command)
            execl("/bin/sh", "sh", "-c", job->shell_command, (char *)NULL);
        else
            execvp(job->argv[0], job->argv);
        job_fail(&why, errno);
    }
    /* NOLINTEND(clang-analyzer-unix.Vfork) */
    *exec_errno = why;
    *pid = p;
    return 0;
}

/* The watchdog's signals: blocked, back at SIG_DFL, read from the
 * returned signalfd (SIGCHLD wakes the loop).  SIGPIPE is ignored: pglock
 * may be gone when we report. */
static int take_signals(void)
{
    signal(SIGPIPE, SIG_IGN);
    sigset_t set;
    sigemptyset(&set);
    int sigs[] = {SIGCHLD, SIGINT,  SIGTERM, SIGHUP,  SIGQUIT, SIGTSTP,
                  SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2, SIGALRM};
    signal(SIGCONT, SIG_DFL);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        sigaddset(&set, sigs[i]);
    sigprocmask(SIG_BLOCK, &set, NULL);
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        signal(sigs[i], SIG_DFL);
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* The deadline and the stop, as time goes: the job is stopped at the
 * client deadline, killed at kill_at, and killed again while the tree is
 * not empty.  Returns poll()'s timeout in ms (-1: none). */
static long advance(watchdog *w, int64_t now)
{
    if (w->phase == WD_RUNNING && w->deadline > 0 && now >= w->deadline) {
        /* pglock could not confirm the lock in time (it may be frozen,
         * stuck, or suspended by Ctrl-Z while someone continues a
         * process of the job): stop the job ourselves.  A job we had
         * stopped is killed, never resumed. */
        report(w, RUN_REP_DEADLINE, 0);
        begin_terminate(w);
    }
    if (w->phase == WD_TERM_SENT && now >= w->kill_at)
        begin_kill(w);
    long timeout = -1;
    if (w->phase == WD_RUNNING && w->deadline > 0)
        timeout = (long)(w->deadline - now);
    else if (w->phase == WD_TERM_SENT)
        timeout = (long)(w->kill_at - now);
    else if (w->phase == WD_KILLING)
        timeout = 50; /* keep killing: a fork may have raced the kill */
    if (timeout < 0 && (w->phase != WD_RUNNING || w->deadline > 0))
        timeout = 0;
    if (w->phase == WD_KILLING)
        signal_job(w, SIGKILL);
    return timeout;
}

/* A message from pglock, or its end: at end-of-file (pglock is gone,
 * perhaps SIGKILLed) nobody confirms the lock any more, so the job is
 * killed now; the lock is released only when we exit, after the last
 * process is reaped. */
static void read_ctl(watchdog *w)
{
    run_msg m;
    ssize_t r = read(w->ctl_fd, &m, sizeof m);
    if (r == (ssize_t)sizeof m) {
        handle_ctl(w, &m);
    } else if (r == 0 || (r < 0 && errno != EINTR && errno != EAGAIN)) {
        close(w->ctl_fd);
        w->ctl_fd = -1;
        begin_kill(w);
    }
}

/* Drains the signalfd and the timerfd: their only news is the wake-up.
 * SIGCHLD is reaped at the top of the loop; terminal and kill signals are
 * pglock's to forward, ignored here. */
static void drain(int fd, short revents, void *buf, size_t len)
{
    if (revents)
        while (read(fd, buf, len) == (ssize_t)len) {
        }
}

static void watchdog_main(const run_job *job, int ctl_fd, int report_fd)
{
    watchdog w = {.job = job,
                  .ctl_fd = ctl_fd,
                  .report_fd = report_fd,
                  .deadline = job->deadline,
                  .stop_by = job->stop_by,
                  .phase = WD_RUNNING};
    /* A process group of our own: a signal to pglock's group (timeout(1),
     * kill -9 -PGID, a shell's kill %1, kill -STOP -PGID) must never take
     * pglock and its watchdog together while the command runs on. */
    setpgid(0, 0);
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int sfd = take_signals();
    /* poll()'s timeout counts CLOCK_MONOTONIC, which stops while the host
     * is suspended: a timer on CLOCK_BOOTTIME wakes us at a deadline that
     * passed during the suspend, not that much later. */
    int tfd = timerfd_create(CLOCK_BOOTTIME, TFD_CLOEXEC | TFD_NONBLOCK);
    /* If pglock died before we got here, the pipe is already at EOF. */

    int exec_errno = 0;
    int fork_errno = spawn_job(job, &w.job_pid, &exec_errno);
    if (fork_errno) {
        report(&w, RUN_REP_EXEC_FAILED, fork_errno);
        report(&w, RUN_REP_DONE, 0);
        _exit(0);
    }
    if (exec_errno == RUN_EXEC_PAST_DEADLINE)
        report(&w, RUN_REP_NOT_STARTED, 0);
    else if (exec_errno)
        report(&w, RUN_REP_EXEC_FAILED, exec_errno);

    for (;;) {
        if (reap(&w)) {
            report(&w, RUN_REP_DONE, 0);
            _exit(0);
        }
        int64_t now = pglock_now_ms();
        long timeout = advance(&w, now);
        if (tfd >= 0) {
            int64_t at = timeout >= 0 ? now + timeout : 0;
            struct itimerspec its = {{0, 0},
                                     {at / 1000, (at % 1000) * 1000000}};
            timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its,
                            NULL); /* 0: disarmed */
        }
        struct pollfd pfd[3] = {{sfd, POLLIN, 0},
                                {tfd, POLLIN, 0},
                                {w.ctl_fd, POLLIN, 0}};
        int n = poll(pfd, w.ctl_fd >= 0 ? 3 : 2, (int)timeout);
        if (n < 0 && errno != EINTR)
            _exit(70);
        if (n <= 0)
            continue;
        struct signalfd_siginfo si;
        drain(sfd, pfd[0].revents, &si, sizeof si);
        uint64_t expirations;
        drain(tfd, pfd[1].revents, &expirations, sizeof expirations);
        if (w.ctl_fd >= 0 && pfd[2].revents)
            read_ctl(&w);
    }
}

pid_t run_watchdog_start(const run_job *job, int ctl_fd, int report_fd,
                         const int *close_in_child)
{
    pid_t p = fork();
    if (p > 0)
        setpgid(p, p); /* both sides: see watchdog_main */
    if (p != 0)
        return p;
    for (const int *fd = close_in_child; fd && *fd >= 0; fd++)
        close(*fd);
    watchdog_main(job, ctl_fd, report_fd);
    _exit(70);
}
