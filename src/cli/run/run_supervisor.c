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
#include "lease_rules.h"
#include "run.h"

void run_supervision_init(run_supervision *sv)
{
    *sv = (run_supervision){.ctl_fd = -1, .report_fd = -1};
}

static void send_ctl(run_state *st, int op, int arg, int64_t value)
{
    run_msg m = {op, arg, value};
    if (st->sv.ctl_fd >= 0 && write(st->sv.ctl_fd, &m, sizeof m) < 0) {
        /* the watchdog is gone; its exit is handled by the loop */
    }
}

int64_t run_deadline(run_state *st)
{
    if (st->sv.hold)
        return pglock_hold_deadline(st->sv.hold);
    return lease_confirmed_until(pglock_client_confirmed_at(st->client),
                                 st->lease.client_ms);
}

int64_t run_stop_by(run_state *st)
{
    if (st->sv.hold)
        return pglock_hold_stop_by(st->sv.hold);
    return lease_stop_by(run_deadline(st), st->lease.kill_after_ms);
}

int64_t run_deadline_from_now(run_state *st)
{
    return lease_confirmed_until(pglock_now_ms(), st->lease.client_ms);
}

/* The watchdog's copy of the hold's clock. */
static void tell_deadline(run_state *st)
{
    send_ctl(st, RUN_CTL_DEADLINE, 0, run_deadline(st));
    send_ctl(st, RUN_CTL_STOP_BY, 0, run_stop_by(st));
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
    run_notify_status(st->notify, "waiting", "leadership lost: %s",
                      st->lost_reason);
    if (st->sv.watchdog)
        send_ctl(st, st->sv.job_stopped ? RUN_CTL_KILL : RUN_CTL_TERMINATE, 0,
                 0);
}

/* Reads the watchdog's reports; returns 1 at end-of-file (the watchdog
 * has closed its end: it is exiting). */
static int read_reports(run_state *st)
{
    run_msg m;
    ssize_t n;
    while ((n = read(st->sv.report_fd, &m, sizeof m)) == (ssize_t)sizeof m) {
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
                        WIFSIGNALED(m.arg) ? WTERMSIG(m.arg)
                                           : WEXITSTATUS(m.arg));
            break;
        case RUN_REP_DEADLINE:
            lose(
                st,
                "ownership not confirmed within the client deadline (watchdog)");
            break;
        case RUN_REP_STOPPED:
            break;
        case RUN_REP_TTY_STOPPED:
            cli_warning("the command is stopped: it tried to %s the terminal, "
                        "which only --foreground lets it use",
                        m.arg == SIGTTIN ? "read from" : "write to");
            break;
        case RUN_REP_DONE:
            st->sv.job_done = 1;
            break;
        case RUN_REP_NOT_STARTED:
            st->sv.not_started = 1;
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
    st->sv.watchdog = 0;
    read_reports(st);
    if (st->sv.job_done)
        return;
    st->fatal = 1;
    int said = 0;
    for (;;) {
        run_signal_descendants(SIGKILL, &said);
        pid_t q = waitpid(-1, NULL, 0);
        if (q < 0 && errno == ECHILD)
            break;
    }
    st->sv.job_done = 1;
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
        if (p == st->sv.watchdog)
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
        lose(st,
             "ownership not confirmed within %s (the client deadline "
             "of a %lds lease)",
             t, st->lease.server_ms / 1000);
        return;
    }
    lose(st, "%s", pglock_hold_error(st->sv.hold));
}

/* Starts the hold on st->client if none runs: the library's lease engine,
 * in loop mode, since a hold thread cannot live beside the watchdog's
 * fork or lead --restart's.  0, or -1 and the lock is lost. */
static int hold_begin(run_state *st)
{
    if (st->sv.hold)
        return 0;
    pglock_hold_options o;
    pglock_hold_options_init(&o, PGLOCK_HOLD_OPTIONS_VERSION);
    o.drive = PGLOCK_HOLD_LOOP;
    /* the kill-after is the stop budget: T_c comes from it */
    o.stop_budget_ms = st->lease.kill_after_ms;
    /* another run's --replace is seen by the heartbeats themselves */
    o.watch_stop_requests = 1;
    if (pglock_hold_start(&st->sv.hold, st->client, &o) != 0) {
        st->sv.hold = NULL;
        lose(st, "%s", pglock_client_error(st->client));
        return -1;
    }
    return 0;
}

int run_hold_end(run_state *st)
{
    if (st->sv.hold) {
        int rc = pglock_hold_stop(st->sv.hold);
        st->sv.hold = NULL;
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
    if (pglock_hold_confirm(st->sv.hold, left > 0 ? (long)left : 0) != 0) {
        hold_lost(st);
        return -1;
    }
    tell_deadline(st);
    run_notify_alive(st->notify);
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
    int rc = pglock_hold_release(st->sv.hold, left > 0 ? (long)left : 0);
    st->sv.hold = NULL;
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
    if (!st->sv.watchdog) {
        cli_verbose("suspended");
        raise(SIGSTOP);
        cli_verbose("resumed: verifying ownership");
        if (run_confirm_now(st, run_deadline_from_now(st)) == 0)
            cli_verbose("ownership confirmed: --min-hold goes on");
        return;
    }
    send_ctl(st, RUN_CTL_STOP, 0, 0);
    st->sv.job_stopped = 1;
    /* Wait (briefly) for the watchdog's answer so the job is stopped
     * before the shell sees us stopped. */
    int64_t until = pglock_now_ms() + 1000;
    for (;;) {
        struct pollfd p = {st->sv.report_fd, POLLIN, 0};
        int64_t now = pglock_now_ms();
        if (now >= until || poll(&p, 1, (int)(until - now)) <= 0)
            break;
        run_msg m;
        ssize_t n = read(st->sv.report_fd, &m, sizeof m);
        if (n != (ssize_t)sizeof m)
            break;
        if (m.op == RUN_REP_STOPPED)
            break;
        if (m.op == RUN_REP_EXITED) {
            st->job_exited = 1;
            st->job_status = m.arg;
            st->job_ended_at = pglock_now_ms();
        } else if (m.op == RUN_REP_DONE) {
            st->sv.job_done = 1;
        } else if (m.op == RUN_REP_EXEC_FAILED) {
            st->exec_errno = m.arg;
        } else if (m.op == RUN_REP_DEADLINE) {
            lose(
                st,
                "ownership not confirmed within the client deadline (watchdog)");
        } else if (m.op == RUN_REP_NOT_STARTED) {
            st->sv.not_started = 1;
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
    if (run_confirm_now(st, run_deadline_from_now(st)) == 0) {
        st->sv.job_stopped = 0;
        tell_deadline(st);
        send_ctl(st, RUN_CTL_CONT, 0, 0);
        cli_verbose("ownership confirmed: the command continues");
    } else {
        send_ctl(st, RUN_CTL_KILL, 0, 0);
    }
}

/* A stop request (another run's --replace) by a role allowed to make
 * it: the job gets one SIGTERM and its whole grace (--kill-after), while
 * the lease goes on being kept (the watchdog's stop-by moves on with
 * it), and the lock goes only once no process of the job is left, as
 * after any end of the job.  During --min-hold the hold just ends. */
static void note_replace(run_state *st)
{
    const char *who = pglock_hold_stop_request(st->sv.hold);
    if (!who || st->replaced || st->lost)
        return;
    st->replaced = 1;
    if (!st->sv.watchdog) {
        cli_notice("lock \"%s\" is asked for by %s (--replace): released "
                   "before --min-hold ends",
                   st->key_label, who);
        return;
    }
    char grace[32];
    run_format_ms(st->lease.kill_after_ms, grace, sizeof grace);
    cli_warning("lock \"%s\" is asked for by %s (--replace): stopping the "
                "command (SIGTERM, then SIGKILL after %s)",
                st->key_label, who, grace);
    run_notify_status(st->notify, "waiting",
                      "stepping down: %s asks for the "
                      "lock",
                      who);
    send_ctl(st, RUN_CTL_TERMINATE, 0, 0);
}

/* The heartbeat loop.  Runs until the watchdog has exited (the job is
 * entirely gone), or with hold_until > 0 (the job already gone) until
 * that time. */
void run_supervise(run_state *st, int64_t hold_until)
{
    int64_t told = run_deadline(st);
    if (!st->lost)
        hold_begin(st);
    run_drive d = run_drive_start(st->sv.hold);
    for (;;) {
        if (!st->sv.watchdog && (st->sv.job_done || hold_until > 0) &&
            (st->lost || hold_until == 0 || pglock_now_ms() >= hold_until))
            return;
        if (!st->sv.watchdog && run_stop_signal() && !st->lost)
            return; /* interrupted during --min-hold */
        if (!st->sv.watchdog && st->replaced && hold_until > 0)
            return; /* replaced during --min-hold */
        int64_t now = pglock_now_ms();
        run_step step = st->lost ? RUN_STEP_NOT_DUE : run_drive_step(&d, now);
        if (step == RUN_STEP_LOST) {
            hold_lost(st);
        } else if (step == RUN_STEP_TAKEN) {
            /* A heartbeat was confirmed: the watchdog's deadline moves. */
            int64_t until = run_deadline(st);
            if (until != told) {
                told = until;
                tell_deadline(st);
                run_notify_alive(st->notify);
            }
            note_replace(st);
        }

        int64_t wake = now + 1000;
        if (!st->lost) {
            wake = min64(wake, run_drive_due(&d));
            if (!st->sv.watchdog && hold_until > 0)
                wake = min64(wake, hold_until);
        }
        struct pollfd p[3];
        int n = 0;
        p[n++] = (struct pollfd){run_event_fd(), POLLIN, 0};
        /* At end-of-file once the watchdog is gone: not polled then. */
        p[n++] = (struct pollfd){st->sv.watchdog ? st->sv.report_fd : -1,
                                 POLLIN, 0};
        int sock = st->lost ? -1 : run_drive_fd(&d);
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
        if (p[1].revents && read_reports(st) && st->sv.watchdog) {
            /* End of file: the watchdog closed its end, which it does
             * only by exiting.  Reap it now rather than poll on until its
             * SIGCHLD comes round through the signal pipe. */
            while (waitpid(st->sv.watchdog, NULL, 0) < 0 && errno == EINTR)
                continue;
            watchdog_gone(st);
        }
        if (n == 3 && p[2].revents)
            run_drive_heard(
                &d); /* the heartbeat's answer, or the server's close */
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
                        /* The next two do nothing, each for its reason. */
                        /* NOLINTNEXTLINE(bugprone-branch-clone) */
                    } else if (s == SIGCONT) {
                        /* resumed: handled in suspend() */
                    } else if (from_terminal && st->args->foreground) {
                        /* The terminal sent it to its whole foreground
                         * process group, the job included: not twice. */
                    } else if (st->sv.watchdog) {
                        cli_verbose("forwarding signal %d to the command", s);
                        send_ctl(st, RUN_CTL_SIGNAL, s, 0);
                    }
                }
            }
        }
    }
}

cli_step run_job_under_lock(run_state *st, run_job *job)
{
    st->sv.job_done = st->job_exited = st->job_status = 0;
    st->exec_errno = st->sv.job_stopped = st->sv.not_started = 0;
    /* From here until run_hold_end() the lease is the hold's.  A long
     * wait, or a pglock stopped while waiting, may have been granted the
     * lock long ago: confirm ownership before starting. */
    if (hold_begin(st) < 0 ||
        (pglock_now_ms() - pglock_client_confirmed_at(st->client) >
             st->lease.heartbeat_ms &&
         run_confirm_now(st, run_deadline_from_now(st)) < 0)) {
        /* Nothing ran without the lock: not 74, which says a command was
         * stopped. */
        return cli_error(CLI_EXIT_UNAVAILABLE,
                         "lock \"%s\" lost before the command "
                         "started: %s; the command was not run",
                         st->key_label, st->lost_reason);
    }
    if (run_stop_signal())
        return 128 + run_stop_signal();
    /* The deadline goes into the job's start: the watchdog knows it from
     * its first instant, and the command's process checks it again just
     * before its exec, since a pause can come between here and there. */
    job->deadline = run_deadline(st);
    job->stop_by = run_stop_by(st);
    if (pglock_now_ms() >= job->deadline) {
        /* A loss, as after the fork (not_started): lead contends again. */
        lose(st, "the client deadline passed before the command started");
        return cli_error(CLI_EXIT_UNAVAILABLE,
                         "lock \"%s\" lost before the command "
                         "started: the client deadline passed; the command was "
                         "not run",
                         st->key_label);
    }

    int ctl[2], rep[2];
    if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not create a pipe: %s",
                         strerror(errno));
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    /* The watchdog's orphans come to us if it dies; and as PID 1 we reap
     * whatever else is reparented here. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    run_signals_catch_job_control(job);
    int close_in_child[] = {ctl[1], rep[0], -1, -1, -1, -1, -1};
    run_signal_pipes(close_in_child + 2);
    st->sv.watchdog = run_watchdog_start(job, ctl[0], rep[1], close_in_child);
    close(ctl[0]);
    close(rep[1]);
    st->sv.ctl_fd = ctl[1];
    st->sv.report_fd = rep[0];
    if (st->sv.watchdog < 0) {
        st->sv.watchdog = 0;
        close(st->sv.ctl_fd);
        close(st->sv.report_fd);
        st->sv.ctl_fd = st->sv.report_fd = -1;
        return cli_error(CLI_EXIT_SOFTWARE, "could not fork: %s",
                         strerror(errno));
    }
    if (run_stop_signal())
        send_ctl(st, RUN_CTL_SIGNAL, run_stop_signal(), 0);
    cli_verbose("command started (watchdog pid %d)", (int)st->sv.watchdog);

    run_supervise(st, 0);
    close(st->sv.ctl_fd);
    close(st->sv.report_fd);
    st->sv.ctl_fd = st->sv.report_fd = -1;
    if (st->sv.not_started)
        /* Nothing ran without the lock: not 74, which says a command was
         * stopped (st->lost is set: lead contends again). */
        return cli_error(CLI_EXIT_UNAVAILABLE,
                         "lock \"%s\" lost before the command "
                         "started: %s; the command was not run",
                         st->key_label, st->lost_reason);
    return CLI_GO_ON;
}

int run_job_status(run_state *st)
{
    const run_args *a = st->args;
    if (st->fatal)
        return cli_error(CLI_EXIT_SOFTWARE,
                         "the watchdog died; the command was killed");
    if (st->exec_errno) {
        int code = st->exec_errno == ENOENT ? CLI_EXIT_NOT_FOUND
                                            : CLI_EXIT_CANNOT_EXEC;
        return cli_error(code, "could not execute \"%s\": %s",
                         a->shell_command ? "/bin/sh" : a->argv[0],
                         strerror(st->exec_errno));
    }
    return st->job_exited ? run_exit_status_of(st->job_status)
                          : CLI_EXIT_SOFTWARE;
}

int run_exit_status_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return CLI_EXIT_SOFTWARE;
}
