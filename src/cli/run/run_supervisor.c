/*
 * The supervisor of `pglock run` and `pglock lead`, on pglock's side: it
 * starts the watchdog (run_watchdog.c) that runs the job, drives the
 * library's managed hold (hold.c, the one lease engine) in loop mode from
 * its poll() loop, forwards signals (run_signals.c), handles Ctrl-Z
 * (suspend(): the job is stopped first, ownership is re-verified before it
 * continues) and declares the lock lost — the job is then stopped — when
 * the hold says so.  The hold's rules are the library's (pglock(3)): a
 * heartbeat that fails on a session that goes on (a query cancel) is no
 * loss, only the client deadline decides, and the connection stays open
 * until the job is gone (run_hold_end()).
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

/* The job's supervision, one at a time in a process (`run` runs one job,
 * `lead` one after another): the hold, the watchdog and its pipes, and
 * what the watchdog said.  This file's alone. */
static struct supervision {
    pglock_hold *hold;  /* the lease, in loop mode, from the job's start
                           until run_hold_end() (lead: across restarts) */
    pid_t watchdog;     /* 0 once reaped */
    int ctl_fd;         /* write end to the watchdog */
    int report_fd;      /* read end from the watchdog */
    int job_done;       /* RUN_REP_DONE seen: no process of the job is left */
    int not_started;    /* RUN_REP_NOT_STARTED: the deadline passed before
                           the exec */
    int job_stopped;    /* we stopped it (SIGTSTP) */
} sv = {.ctl_fd = -1, .report_fd = -1};

static void send_ctl(int op, int arg, int64_t value)
{
    run_msg m = {op, arg, value};
    if (sv.ctl_fd >= 0 && write(sv.ctl_fd, &m, sizeof m) < 0) {
        /* the watchdog is gone; its exit is handled by the loop */
    }
}

static void tell_deadline(run_state *st)
{
    send_ctl(RUN_CTL_DEADLINE, 0,
             pglock_client_confirmed_at(st->client) + st->lease.client_ms);
}

/* Declares the lock lost (once) and has the watchdog stop the job. */
static void lose(run_state *st, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void lose(run_state *st, const char *fmt, ...)
{
    if (st->lost)
        return;
    st->lost = 1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(st->lost_reason, sizeof st->lost_reason, fmt, ap);
    va_end(ap);
    cli_verbose("lost: %s", st->lost_reason);
    if (sv.watchdog)
        send_ctl(sv.job_stopped ? RUN_CTL_KILL : RUN_CTL_TERMINATE, 0, 0);
}

/* Reads the watchdog's reports; returns 1 at end-of-file (the watchdog
 * has closed its end: it is exiting). */
static int read_reports(run_state *st)
{
    run_msg m;
    ssize_t n;
    while ((n = read(sv.report_fd, &m, sizeof m)) == (ssize_t)sizeof m) {
        switch (m.op) {
        case RUN_REP_EXEC_FAILED:
            st->exec_errno = m.arg;
            break;
        case RUN_REP_EXITED:
            st->job_exited = 1;
            st->job_status = m.arg;
            st->job_ended_at = pglock_now_ms();
            cli_verbose("command exited (%s %d)",
                        WIFSIGNALED(m.arg) ? "signal" : "status",
                        WIFSIGNALED(m.arg) ? WTERMSIG(m.arg) : WEXITSTATUS(m.arg));
            break;
        case RUN_REP_DEADLINE:
            lose(st, "ownership not confirmed within the client deadline (watchdog)");
            break;
        case RUN_REP_STOPPED:
            break;
        case RUN_REP_TTY_STOPPED:
            cli_warning("the command is stopped: it tried to %s the terminal, "
                        "which only --foreground lets it use",
                        m.arg == SIGTTIN ? "read from" : "write to");
            break;
        case RUN_REP_DONE:
            sv.job_done = 1;
            break;
        case RUN_REP_NOT_STARTED:
            sv.not_started = 1;
            lose(st, "the client deadline passed before the command started");
            break;
        }
    }
    return n == 0;
}

/* The watchdog has exited (reaped): read its last reports; if it died
 * before the job was done, its orphans are ours now: kill them and reap
 * them before going on. */
static void watchdog_gone(run_state *st)
{
    sv.watchdog = 0;
    read_reports(st);
    if (sv.job_done)
        return;
    st->fatal = 1;
    for (;;) {
        run_signal_descendants(SIGKILL);
        pid_t q = waitpid(-1, NULL, 0);
        if (q < 0 && errno == ECHILD)
            break;
    }
    sv.job_done = 1;
}

/* Reaps children: the watchdog, and orphans when pglock is PID 1 or the
 * watchdog died and its orphans came to us (pglock is a subreaper too). */
static void reap_children(run_state *st)
{
    for (;;) {
        int status;
        pid_t p = waitpid(-1, &status, WNOHANG);
        if (p <= 0)
            return;
        if (p == sv.watchdog)
            watchdog_gone(st);
    }
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The hold has declared the lease lost: the lock is lost.  A loss the
 * client declares (the connection stays open: no answer in time) is said
 * in run's terms; a server-side one (the connection is closed) in the
 * server's. */
static void hold_lost(run_state *st)
{
    if (pglock_client_socket(st->client) >= 0) {
        char t[32];
        run_format_ms(st->lease.client_ms, t, sizeof t);
        lose(st, "ownership not confirmed within %s (the client deadline "
             "of a %lds lease)", t, st->lease.server_ms / 1000);
        return;
    }
    lose(st, "%s", pglock_hold_error(sv.hold));
}

/* Starts the hold on st->client if none runs: the library's lease engine,
 * in loop mode, since a hold thread cannot live beside the watchdog's
 * fork or lead --restart's.  0, or -1 and the lock is lost. */
static int hold_begin(run_state *st)
{
    if (sv.hold)
        return 0;
    pglock_hold_options o;
    pglock_hold_options_init(&o, PGLOCK_HOLD_OPTIONS_VERSION);
    o.drive = PGLOCK_HOLD_LOOP;
    if (pglock_hold_start(&sv.hold, st->client, &o) != 0) {
        sv.hold = NULL;
        lose(st, "%s", pglock_client_error(st->client));
        return -1;
    }
    return 0;
}

int run_hold_end(run_state *st)
{
    if (sv.hold) {
        int rc = pglock_hold_stop(sv.hold);
        sv.hold = NULL;
        if (rc != 0)
            lose(st, "%s", pglock_client_error(st->client));
    }
    return st->lost ? -1 : 0;
}

/* Proves ownership now: the hold waits for any heartbeat in flight (it
 * was sent earlier), then sends one more and waits for its answer, both
 * by deadline, whatever T_c says meanwhile (an answer from the same
 * session proves the lock was held throughout).  0 when confirmed; else
 * the lock is declared lost. */
int run_confirm_now(run_state *st, int64_t deadline)
{
    if (st->lost || hold_begin(st) < 0)
        return -1;
    int64_t left = deadline - pglock_now_ms();
    if (pglock_hold_confirm(sv.hold, left > 0 ? (long)left : 0) != 0) {
        hold_lost(st);
        return -1;
    }
    tell_deadline(st);
    return 0;
}

/* The job is gone: proves ownership up to the release and releases, in
 * one round trip (the release's answer is the proof), by deadline.  The
 * hold ends either way.  0 when confirmed (nothing is held any more);
 * else the lock is declared lost, the connection closed. */
int run_release_now(run_state *st, int64_t deadline)
{
    if (st->lost || hold_begin(st) < 0)
        return -1;
    int64_t left = deadline - pglock_now_ms();
    int rc = pglock_hold_release(sv.hold, left > 0 ? (long)left : 0);
    sv.hold = NULL;
    if (rc != 0) {
        lose(st, "%s", pglock_client_error(st->client));
        return -1;
    }
    return 0;
}

/* Ctrl-Z: stop the job, then pglock itself.  On resume, re-verify
 * ownership before the job may continue; if it cannot be confirmed the
 * job is killed, never resumed.  During --min-hold (the job is gone)
 * pglock alone stops, and on resume confirms or declares the loss. */
static void suspend(run_state *st)
{
    if (st->lost)
        return;
    if (!sv.watchdog) {
        cli_verbose("suspended");
        raise(SIGSTOP);
        cli_verbose("resumed: verifying ownership");
        if (run_confirm_now(st, pglock_now_ms() + st->lease.client_ms) == 0)
            cli_verbose("ownership confirmed: --min-hold goes on");
        return;
    }
    send_ctl(RUN_CTL_STOP, 0, 0);
    sv.job_stopped = 1;
    /* Wait (briefly) for the watchdog's answer so the job is stopped
     * before the shell sees us stopped. */
    int64_t until = pglock_now_ms() + 1000;
    for (;;) {
        struct pollfd p = {sv.report_fd, POLLIN, 0};
        int64_t now = pglock_now_ms();
        if (now >= until || poll(&p, 1, (int)(until - now)) <= 0)
            break;
        run_msg m;
        ssize_t n = read(sv.report_fd, &m, sizeof m);
        if (n != (ssize_t)sizeof m)
            break;
        if (m.op == RUN_REP_STOPPED)
            break;
        if (m.op == RUN_REP_EXITED) {
            st->job_exited = 1;
            st->job_status = m.arg;
            st->job_ended_at = pglock_now_ms();
        } else if (m.op == RUN_REP_DONE) {
            sv.job_done = 1;
        } else if (m.op == RUN_REP_EXEC_FAILED) {
            st->exec_errno = m.arg;
        } else if (m.op == RUN_REP_DEADLINE) {
            lose(st, "ownership not confirmed within the client deadline (watchdog)");
        } else if (m.op == RUN_REP_NOT_STARTED) {
            sv.not_started = 1;
            lose(st, "the client deadline passed before the command started");
        }
    }
    if (st->lost)
        return; /* the job is being stopped for good: nothing to resume */
    cli_verbose("suspended");
    raise(SIGSTOP);
    cli_verbose("resumed: verifying ownership");
    /* Any heartbeat in flight was sent before the stop; confirm afresh,
     * with the deadline counted from now (the job was not running). */
    if (run_confirm_now(st, pglock_now_ms() + st->lease.client_ms) == 0) {
        sv.job_stopped = 0;
        tell_deadline(st);
        send_ctl(RUN_CTL_CONT, 0, 0);
        cli_verbose("ownership confirmed: the command continues");
    } else {
        send_ctl(RUN_CTL_KILL, 0, 0);
    }
}

/* The heartbeat loop.  Runs until the watchdog has exited (the job is
 * entirely gone), or with hold_until > 0 (the job already gone) until
 * that time. */
void run_supervise(run_state *st, int64_t hold_until)
{
    int64_t told = pglock_client_confirmed_at(st->client);
    int64_t step_at = 0;  /* the hold's next step: at once */
    if (!st->lost)
        hold_begin(st);
    for (;;) {
        if (!sv.watchdog && sv.job_done &&
            (st->lost || hold_until == 0 || pglock_now_ms() >= hold_until))
            return;
        if (!sv.watchdog && run_stop_signal() && !st->lost)
            return; /* interrupted during --min-hold */
        int64_t now = pglock_now_ms();
        if (!st->lost && now >= step_at) {
            long t;
            if (pglock_hold_step(sv.hold, &t) != 0) {
                hold_lost(st);
            } else {
                step_at = now + (t > 0 ? t : 1);
                /* A heartbeat was confirmed: the watchdog's deadline moves. */
                int64_t confirmed = pglock_client_confirmed_at(st->client);
                if (confirmed != told) {
                    told = confirmed;
                    tell_deadline(st);
                }
            }
        }

        int64_t wake = now + 1000;
        if (!st->lost) {
            wake = min64(wake, step_at);
            if (!sv.watchdog && hold_until > 0)
                wake = min64(wake, hold_until);
        }
        struct pollfd p[3];
        int n = 0;
        p[n++] = (struct pollfd){run_event_fd(), POLLIN, 0};
        /* At end-of-file once the watchdog is gone: not polled then. */
        p[n++] = (struct pollfd){sv.watchdog ? sv.report_fd : -1, POLLIN, 0};
        int sock = st->lost ? -1 : pglock_hold_fd(sv.hold);
        if (sock >= 0)
            p[n++] = (struct pollfd){sock, POLLIN, 0};
        int timeout = wake > now ? (int)(wake - now) : 0;
        int r = poll(p, (nfds_t)n, timeout);
        if (r < 0 && errno != EINTR) {
            st->fatal = 1;
            lose(st, "poll failed: %s", strerror(errno));
            continue;
        }
        if (r <= 0)
            continue;
        if (p[1].revents && read_reports(st) && sv.watchdog) {
            /* End of file: the watchdog closed its end, which it does
             * only by exiting.  Reap it now rather than poll on until its
             * SIGCHLD comes round through the signal pipe. */
            while (waitpid(sv.watchdog, NULL, 0) < 0 && errno == EINTR)
                continue;
            watchdog_gone(st);
        }
        if (n == 3 && p[2].revents)
            step_at = 0; /* the heartbeat's answer, or the server's close */
        if (p[0].revents) {
            unsigned char sig[64];
            ssize_t k;
            while ((k = read(run_event_fd(), sig, sizeof sig)) > 0) {
                for (ssize_t i = 0; i < k; i++) {
                    int s = sig[i] & ~RUN_FROM_TERMINAL;
                    int from_terminal = (sig[i] & RUN_FROM_TERMINAL) != 0;
                    if (s == SIGCHLD) {
                        reap_children(st);
                    } else if (s == SIGTSTP) {
                        suspend(st);
                    } else if (s == SIGCONT) {
                        /* resumed: handled in suspend() */
                    } else if (from_terminal && st->args->foreground) {
                        /* The terminal sent it to its whole foreground
                         * process group, the job included: not twice. */
                    } else if (sv.watchdog) {
                        cli_verbose("forwarding signal %d to the command", s);
                        send_ctl(RUN_CTL_SIGNAL, s, 0);
                    }
                }
            }
        }
    }
}

int run_job_term(run_state *st, run_job *job)
{
    sv.job_done = st->job_exited = st->job_status = 0;
    st->exec_errno = sv.job_stopped = sv.not_started = 0;
    /* From here until run_hold_end() the lease is the hold's.  A long
     * wait, or a pglock stopped while waiting, may have been granted the
     * lock long ago: confirm ownership before starting. */
    if (hold_begin(st) < 0 ||
        (pglock_now_ms() - pglock_client_confirmed_at(st->client) >
             st->lease.heartbeat_ms &&
         run_confirm_now(st, pglock_now_ms() + st->lease.client_ms) < 0)) {
        /* Nothing ran without the lock: not 74, which says a command was
         * stopped. */
        return cli_error(CLI_EXIT_UNAVAILABLE, "lock \"%s\" lost before the command "
                         "started: %s; the command was not run",
                         st->key_label, st->lost_reason);
    }
    if (run_stop_signal())
        return 128 + run_stop_signal();
    /* The deadline goes into the job's start: the watchdog knows it from
     * its first instant, and the command's process checks it again just
     * before its exec, since a pause can come between here and there. */
    job->deadline = pglock_client_confirmed_at(st->client) + st->lease.client_ms;
    if (pglock_now_ms() >= job->deadline) {
        /* A loss, as after the fork (not_started): lead contends again. */
        lose(st, "the client deadline passed before the command started");
        return cli_error(CLI_EXIT_UNAVAILABLE, "lock \"%s\" lost before the command "
                         "started: the client deadline passed; the command was "
                         "not run", st->key_label);
    }

    int ctl[2], rep[2];
    if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not create a pipe: %s", strerror(errno));
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    /* The watchdog's orphans come to us if it dies; and as PID 1 we reap
     * whatever else is reparented here. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    run_signals_catch_job_control(job);
    int close_in_child[] = {ctl[1], rep[0], -1, -1, -1, -1, -1};
    run_signal_pipes(close_in_child + 2);
    sv.watchdog = run_watchdog_start(job, ctl[0], rep[1], close_in_child);
    close(ctl[0]);
    close(rep[1]);
    sv.ctl_fd = ctl[1];
    sv.report_fd = rep[0];
    if (sv.watchdog < 0) {
        sv.watchdog = 0;
        close(sv.ctl_fd);
        close(sv.report_fd);
        sv.ctl_fd = sv.report_fd = -1;
        return cli_error(CLI_EXIT_SOFTWARE, "could not fork: %s", strerror(errno));
    }
    if (run_stop_signal())
        send_ctl(RUN_CTL_SIGNAL, run_stop_signal(), 0);
    cli_verbose("command started (watchdog pid %d)", (int)sv.watchdog);

    run_supervise(st, 0);
    close(sv.ctl_fd);
    close(sv.report_fd);
    sv.ctl_fd = sv.report_fd = -1;
    if (sv.not_started)
        /* Nothing ran without the lock: not 74, which says a command was
         * stopped (st->lost is set: lead contends again). */
        return cli_error(CLI_EXIT_UNAVAILABLE, "lock \"%s\" lost before the command "
                         "started: %s; the command was not run",
                         st->key_label, st->lost_reason);
    return CLI_GO_ON;
}

int run_term_status(run_state *st)
{
    const run_args *a = st->args;
    if (st->fatal)
        return cli_error(CLI_EXIT_SOFTWARE, "the watchdog died; the command was killed");
    if (st->exec_errno) {
        int code = st->exec_errno == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC;
        return cli_error(code, "could not execute \"%s\": %s",
                         a->shell_command ? "/bin/sh" : a->argv[0], strerror(st->exec_errno));
    }
    return st->job_exited ? run_exit_status_of(st->job_status) : CLI_EXIT_SOFTWARE;
}

int run_exit_status_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return CLI_EXIT_SOFTWARE;
}

