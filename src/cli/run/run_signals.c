/*
 * The signal plumbing of `pglock run` and `pglock lead`: a self-pipe that
 * turns every caught signal into a byte the supervisor's poll() loop reads
 * (run_supervisor.c), and the stop pipe that interrupts a wait in the
 * library.  Dispositions found at start are kept for the job.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"
#include "run.h"

/* The signal that asked pglock to stop (INT, TERM, HUP, QUIT), 0 if none. */
static volatile sig_atomic_t stop_signal;
/* Every caught signal is written here as one byte (self-pipe): the signal
 * number, plus RUN_FROM_TERMINAL when the kernel sent it (a terminal's ^C, ^\\,
 * ^Z) rather than kill(). */
static int event_pipe[2] = {-1, -1};
/* Written only by stop signals, never drained: the library's interrupt
 * fd, readable from the first stop signal on. */
static int interrupt_pipe[2] = {-1, -1};

static void on_signal(int signo, siginfo_t *info, void *context)
{
    (void)context;
    int saved = errno;
    unsigned char b = (unsigned char)signo;
    if (info && info->si_code == SI_KERNEL)
        b |= RUN_FROM_TERMINAL;
    if (signo == SIGINT || signo == SIGTERM || signo == SIGHUP ||
        signo == SIGQUIT) {
        if (!stop_signal)
            stop_signal = signo;
        if (write(interrupt_pipe[1], &b, 1) < 0) {
            /* full: already readable */
        }
    }
    if (write(event_pipe[1], &b, 1) < 0) {
        /* full: already readable */
    }
    errno = saved;
}

/* Catches signo unless it was ignored when pglock started (nohup, a
 * background job of a non-interactive shell): that choice is kept, for
 * pglock and for the job. */
static void catch_signal(int signo, const struct sigaction *orig)
{
    if (orig->sa_handler == SIG_IGN && signo != SIGCHLD)
        return;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = on_signal;
    sa.sa_flags = SA_RESTART | SA_SIGINFO;
    sigemptyset(&sa.sa_mask);
    sigaction(signo, &sa, NULL);
    /* A signal blocked by whoever started us (a shell in the middle of a
     * fork, a supervisor) would never reach the handler; the job gets the
     * original mask back. */
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, signo);
    sigprocmask(SIG_UNBLOCK, &one, NULL);
}

static int make_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC | O_NONBLOCK) < 0)
        return -1;
    return 0;
}

int run_signals_init(run_job *job)
{
    sigprocmask(SIG_SETMASK, NULL, &job->orig_mask);
    for (const int *s = run_handled_signals; *s; s++)
        sigaction(*s, NULL, &job->orig_act[*s]);
    if (make_pipe(event_pipe) < 0 || make_pipe(interrupt_pipe) < 0)
        return -1;
    /* A write to the watchdog after it exited must be an error, not our
     * death; the job gets the original disposition back. */
    signal(SIGPIPE, SIG_IGN);
    int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};
    for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++)
        catch_signal(stop_sigs[i], &job->orig_act[stop_sigs[i]]);
    return 0;
}

void run_signals_catch_job_control(const run_job *job)
{
    int sigs[] = {SIGTSTP, SIGCONT, SIGUSR1, SIGUSR2, SIGWINCH};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        catch_signal(sigs[i], &job->orig_act[sigs[i]]);
}

int run_stop_signal(void)
{
    return stop_signal;
}

int run_event_fd(void)
{
    return event_pipe[0];
}

int run_interrupt_fd(void)
{
    return interrupt_pipe[0];
}

void run_signal_pipes(int out[4])
{
    out[0] = event_pipe[0];
    out[1] = event_pipe[1];
    out[2] = interrupt_pipe[0];
    out[3] = interrupt_pipe[1];
}
