/*
 * pglock run — flock(1) across hosts: run a command while holding a lock,
 * with a lease, so that the command never runs without it.
 *
 * The flow: parse and check everything (64), connect (69), take the lock
 * (75 when busy or timed out), fork the watchdog that runs and supervises
 * the job (run_watchdog.c), then heartbeat in a poll() loop until the job
 * is gone, confirm ownership once more, hold until --min-hold, release.
 * A loss (connection closed, backend terminated, server restarted,
 * ownership not confirmed by the client deadline) stops the job and exits
 * 74.  The lock connection is closed only after the watchdog has exited,
 * and the watchdog exits only when no process of the job remains.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
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


/* "run" or "lead": whose messages these are. */
static const char *command_name = "run";

/* ------------------------------------------------------------ signals */

/* The signal that asked pglock to stop (INT, TERM, HUP, QUIT), 0 if none:
 * also the library's interrupt flag while waiting for the lock. */
static volatile sig_atomic_t stop_signal;
/* Every caught signal is written here as one byte (self-pipe): the signal
 * number, plus FROM_TERMINAL when the kernel sent it (a terminal's ^C, ^\\,
 * ^Z) rather than kill(). */
static int event_pipe[2] = {-1, -1};
#define FROM_TERMINAL 0x80
/* Written only by stop signals: wakes a wait in the library at once. */
static int interrupt_pipe[2] = {-1, -1};

static void on_signal(int signo, siginfo_t *info, void *context)
{
    (void)context;
    int saved = errno;
    unsigned char b = (unsigned char)signo;
    if (info && info->si_code == SI_KERNEL)
        b |= FROM_TERMINAL;
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

/* ------------------------------------------------------------ options */

static void print_help(void)
{
    printf(
"pglock run runs a command while holding a PostgreSQL advisory lock.\n\n"
"Usage:\n"
"  pglock run [OPTION]... KEY -- COMMAND [ARG]...\n"
"  pglock run [OPTION]... KEY -c STRING\n\n"
"Locking:\n"
"  -n, --try                  do not wait: if the lock is held, exit 75\n"
"  -w, --wait=DURATION        wait at most DURATION, then exit 75\n"
"                             (default: wait as long as it takes)\n"
"  -s, --shared               take a shared lock instead of an exclusive one\n"
RUN_HELP_LEASE
"      --min-hold=DURATION    keep the lock at least this long from acquisition\n"
"      --conflict-exit-code=N exit status when busy or timed out (default 75)\n"
"      --lost-exit-code=N     exit status when the lock was lost (default 74)\n"
"      --fencing-token        give the command PGLOCK_FENCING_TOKEN, a number\n"
"                             that grows with each acquisition (costs a WAL\n"
"                             flush; behind a pooler, a second connection)\n"
"      --mode=MODE            session, xact (hold the lock in a transaction, for\n"
"                             PgBouncer in transaction mode) or auto (default:\n"
"                             xact behind a pooler, else session)\n"
"Command:\n"
"  -c, --command=STRING       run STRING with /bin/sh -c\n"
"      --foreground           keep the command in pglock's process group, so\n"
"                             that it can read the terminal (see pglock(1))\n"
RUN_HELP_CONNECTION
"Output:\n"
"  -q, --quiet                print errors only\n"
"  -v, --verbose              print each step with a timestamp on stderr\n"
RUN_HELP_VERSION_HELP
"KEY: 123, int:-5, 42:9, nightly-billing, text:123, @NAME (see pglock(1)).\n"
"DURATION: 500ms, 30s, 5m, 2h or plain seconds.\n"
"Exit status: the command's (128+N if killed by signal N), 126/127 if it\n"
"could not be run, 75 busy, 74 lock lost, 69 server unavailable, 64 usage.\n");
}

enum {
    OPT_LEASE = 256,
    OPT_KILL_AFTER,
    OPT_MIN_HOLD,
    OPT_CONFLICT,
    OPT_LOST,
    OPT_KEYS,
    OPT_FOREGROUND,
    OPT_MODE,
    OPT_RESTART,
    OPT_FENCING_TOKEN
};

static int parse_duration_opt(const char *name, const char *text, long *out)
{
    char err[256];
    if (cli_parse_duration(text, out, err, sizeof err) < 0)
        return cli_usage_error(command_name, "invalid value for %s: %s", name, err);
    return 0;
}

static int parse_exit_code(const char *name, const char *text, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > 255 ||
        text[0] == '+' || text[0] == ' ')
        return cli_usage_error(command_name, "invalid value for %s: \"%s\" (expected 0 to 255)",
                               name, text);
    *out = (int)v;
    return 0;
}

int run_parse_args(int argc, char **argv, run_args *a)
{
    command_name = a->command ? a->command : "run";
    static const struct option longopts[] = {
        {"try", no_argument, NULL, 'n'},
        {"wait", required_argument, NULL, 'w'},
        {"shared", no_argument, NULL, 's'},
        {"lease", required_argument, NULL, OPT_LEASE},
        {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
        {"min-hold", required_argument, NULL, OPT_MIN_HOLD},
        {"conflict-exit-code", required_argument, NULL, OPT_CONFLICT},
        {"lost-exit-code", required_argument, NULL, OPT_LOST},
        {"command", required_argument, NULL, 'c'},
        {"foreground", no_argument, NULL, OPT_FOREGROUND},
        {"mode", required_argument, NULL, OPT_MODE},
        {"restart", optional_argument, NULL, OPT_RESTART},
        {"fencing-token", no_argument, NULL, OPT_FENCING_TOKEN},
        CLI_CONN_LONGOPTS,
        {"keys", required_argument, NULL, OPT_KEYS},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, '?'},
        {NULL, 0, NULL, 0}};
    int saw_try = 0, saw_wait = 0;
    int c, rc;
    opterr = 0;
    optind = 1;
    /* "+": stop at the first non-option (KEY), so that the command's own
     * options are never ours; ":" so that a missing argument is ':'. */
    while ((c = getopt_long(argc, argv, "+:nw:sc:h:p:U:d:qvV?", longopts,
                            NULL)) != -1) {
        switch (c) {
        case 'n':
            saw_try = 1;
            a->timeout_ms = PGLOCK_TRY;
            break;
        case 'w':
            if ((rc = parse_duration_opt("--wait", optarg, &a->timeout_ms)))
                return rc;
            /* the library takes waits up to INT_MAX ms: say so here, before
             * connecting, rather than fail the lock call */
            if (a->timeout_ms > INT_MAX)
                return cli_usage_error(command_name, "invalid value for --wait: \"%s\" is "
                                       "out of range (at most 24 days)", optarg);
            saw_wait = 1;
            break;
        case 's':
            a->mode = PGLOCK_SHARED;
            break;
        case OPT_LEASE:
            if ((rc = parse_duration_opt("--lease", optarg, &a->lease_ms)))
                return rc;
            break;
        case OPT_KILL_AFTER:
            if ((rc = parse_duration_opt("--kill-after", optarg, &a->kill_after_ms)))
                return rc;
            break;
        case OPT_MIN_HOLD:
            if ((rc = parse_duration_opt("--min-hold", optarg, &a->min_hold_ms)))
                return rc;
            break;
        case OPT_CONFLICT:
            if ((rc = parse_exit_code("--conflict-exit-code", optarg, &a->conflict_code)))
                return rc;
            break;
        case OPT_LOST:
            if ((rc = parse_exit_code("--lost-exit-code", optarg, &a->lost_code)))
                return rc;
            break;
        case 'c':
            a->shell_command = optarg;
            break;
        case OPT_FOREGROUND:
            a->foreground = 1;
            break;
        case OPT_MODE:
            if (strcmp(optarg, "session") == 0)
                a->hold = PGLOCK_HOLD_SESSION;
            else if (strcmp(optarg, "xact") == 0)
                a->hold = PGLOCK_HOLD_XACT;
            else if (strcmp(optarg, "auto") == 0)
                a->hold = PGLOCK_HOLD_AUTO;
            else
                return cli_usage_error(command_name, "invalid value for --mode: "
                                       "\"%s\" (expected session, xact or auto)",
                                       optarg);
            break;
        case OPT_RESTART:
            if (strcmp(command_name, "lead") != 0)
                return cli_usage_error(command_name, "unrecognized option \"%s\"",
                                       argv[optind - 1]);
            a->restart_ms = 0;
            if (optarg && (rc = parse_duration_opt("--restart", optarg, &a->restart_ms)))
                return rc;
            break;
        case OPT_KEYS:
            a->keys_file = optarg;
            break;
        case OPT_FENCING_TOKEN:
            a->fencing_token = 1;
            break;
        case 'q':
            cli_quiet = 1;
            break;
        case 'v':
            cli_verbosity++;
            break;
        case 'V':
            printf("pglock %s\n", PGLOCK_VERSION);
            return 0;
        case ':':
            return cli_usage_error(command_name, "option \"%s\" needs a value",
                                   argv[optind - 1]);
        case '?':
            if ((optopt == 0 && strcmp(argv[optind - 1], "--help") == 0) ||
                optopt == '?' || strcmp(argv[optind - 1], "-?") == 0) {
                (a->help ? a->help : print_help)();
                return 0;
            }
            if (optopt)
                return cli_usage_error(command_name, "unrecognized option \"-%c\"", optopt);
            return cli_usage_error(command_name, "unrecognized option \"%s\"", argv[optind - 1]);
        default:
            if (cli_conn_option(&a->conn, c, optarg))
                break;
            return cli_usage_error(command_name, "unrecognized option \"%s\"", argv[optind - 1]);
        }
    }
    /* "Do not wait" and "wait up to" contradict each other: say so rather
     * than let the last one silently win. */
    if (saw_try && saw_wait)
        return cli_usage_error(command_name, "--try and --wait cannot be used together");
    if (optind >= argc)
        return cli_usage_error(command_name, "no lock key given");
    a->key_text = argv[optind++];
    if (optind < argc && strcmp(argv[optind], "--") == 0) {
        optind++;
    } else if (optind < argc && (strcmp(argv[optind], "-c") == 0 ||
                                 strcmp(argv[optind], "--command") == 0)) {
        if (optind + 1 >= argc)
            return cli_usage_error(command_name, "option \"%s\" needs a value", argv[optind]);
        if (a->shell_command)
            return cli_usage_error(command_name, "-c given twice");
        a->shell_command = argv[optind + 1];
        optind += 2;
        if (optind < argc)
            return cli_usage_error(command_name, "unexpected argument \"%s\" after -c STRING",
                                   argv[optind]);
    } else if (optind < argc && strncmp(argv[optind], "--command=", 10) == 0) {
        if (a->shell_command)
            return cli_usage_error(command_name, "-c given twice");
        a->shell_command = argv[optind] + 10;
        if (++optind < argc)
            return cli_usage_error(command_name, "unexpected argument \"%s\" after -c STRING",
                                   argv[optind]);
    } else if (optind < argc && argv[optind][0] == '-') {
        return cli_usage_error(command_name, "option \"%s\" after the key: options go before KEY, "
                               "the command after \"--\"", argv[optind]);
    }
    if (optind < argc) {
        if (a->shell_command)
            return cli_usage_error(command_name, "both -c STRING and a command given");
        a->argv = argv + optind;
    } else if (!a->shell_command) {
        return cli_usage_error(command_name, "no command given");
    }
    return -1;
}

/* ------------------------------------------------------ the supervisor */


static void send_ctl(run_state *st, int op, int arg, int64_t value)
{
    run_msg m = {op, arg, value};
    if (st->ctl_fd >= 0 && write(st->ctl_fd, &m, sizeof m) < 0) {
        /* the watchdog is gone; its exit is handled by the loop */
    }
}

static void tell_deadline(run_state *st)
{
    send_ctl(st, RUN_CTL_DEADLINE, 0,
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
    if (st->watchdog)
        send_ctl(st, st->job_stopped ? RUN_CTL_KILL : RUN_CTL_TERMINATE, 0, 0);
}

static void read_reports(run_state *st)
{
    run_msg m;
    ssize_t n;
    while ((n = read(st->report_fd, &m, sizeof m)) == (ssize_t)sizeof m) {
        switch (m.op) {
        case RUN_REP_EXEC_FAILED:
            st->exec_errno = m.arg;
            break;
        case RUN_REP_EXITED:
            st->job_exited = 1;
            st->job_status = m.arg;
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
            fprintf(stderr, "pglock: warning: the command is stopped: it tried to %s the "
                    "terminal, which only --foreground lets it use\n",
                    m.arg == SIGTTIN ? "read from" : "write to");
            break;
        case RUN_REP_DONE:
            st->job_done = 1;
            break;
        }
    }
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
        if (p == st->watchdog) {
            st->watchdog = 0;
            read_reports(st);
            if (!st->job_done) {
                /* The watchdog died (killed by someone): its orphans are
                 * ours now.  Kill them and reap them before going on. */
                st->fatal = 1;
                for (;;) {
                    run_signal_descendants(SIGKILL);
                    pid_t q = waitpid(-1, NULL, 0);
                    if (q < 0 && errno == ECHILD)
                        break;
                }
                st->job_done = 1;
            }
        }
    }
}

static void start_heartbeat(run_state *st, int64_t now)
{
    int rc = pglock_heartbeat_send(st->client);
    if (rc < 0) {
        lose(st, "%s", pglock_client_error(st->client));
        return;
    }
    st->hb_inflight = 1;
    st->hb_sent_at = now;
    st->next_hb = now + st->lease.heartbeat_ms;
}

static void poll_heartbeat(run_state *st)
{
    int rc = pglock_heartbeat_poll(st->client);
    if (rc == PGLOCK_EAGAIN)
        return;
    st->hb_inflight = 0;
    if (rc < 0) {
        lose(st, "%s", pglock_client_error(st->client));
        return;
    }
    int64_t took = pglock_now_ms() - st->hb_sent_at;
    if (took > st->lease.heartbeat_ms)
        cli_verbose("heartbeat late: confirmed after %lldms", (long long)took);
    else if (cli_verbosity > 1)
        cli_verbose("heartbeat confirmed in %lldms", (long long)took);
    tell_deadline(st);
}

/* Waits for the heartbeat in flight until deadline. */
static void wait_heartbeat(run_state *st, int64_t deadline)
{
    while (st->hb_inflight && !st->lost) {
        int64_t now = pglock_now_ms();
        if (now >= deadline) {
            char t[32];
            run_format_ms(st->lease.client_ms, t, sizeof t);
            lose(st, "ownership not confirmed within %s", t);
            return;
        }
        struct pollfd p = {pglock_client_socket(st->client), POLLIN, 0};
        if (p.fd < 0 || poll(&p, 1, (int)(deadline - now)) > 0)
            poll_heartbeat(st);
    }
}

/* Proves ownership now: waits for any heartbeat in flight (it was sent
 * earlier), then sends one more and waits for its answer, both by
 * deadline.  0 when confirmed; else the lock is declared lost. */
int run_confirm_now(run_state *st, int64_t deadline)
{
    wait_heartbeat(st, deadline);
    if (!st->lost) {
        start_heartbeat(st, pglock_now_ms());
        wait_heartbeat(st, deadline);
    }
    return st->lost ? -1 : 0;
}

/* Ctrl-Z: stop the job, then pglock itself.  On resume, re-verify
 * ownership before the job may continue; if it cannot be confirmed the
 * job is killed, never resumed. */
static void suspend(run_state *st)
{
    if (st->lost || !st->watchdog)
        return;
    send_ctl(st, RUN_CTL_STOP, 0, 0);
    st->job_stopped = 1;
    /* Wait (briefly) for the watchdog's answer so the job is stopped
     * before the shell sees us stopped. */
    int64_t until = pglock_now_ms() + 1000;
    for (;;) {
        struct pollfd p = {st->report_fd, POLLIN, 0};
        int64_t now = pglock_now_ms();
        if (now >= until || poll(&p, 1, (int)(until - now)) <= 0)
            break;
        run_msg m;
        ssize_t n = read(st->report_fd, &m, sizeof m);
        if (n != (ssize_t)sizeof m)
            break;
        if (m.op == RUN_REP_STOPPED)
            break;
        if (m.op == RUN_REP_EXITED) {
            st->job_exited = 1;
            st->job_status = m.arg;
        } else if (m.op == RUN_REP_DONE) {
            st->job_done = 1;
        } else if (m.op == RUN_REP_EXEC_FAILED) {
            st->exec_errno = m.arg;
        } else if (m.op == RUN_REP_DEADLINE) {
            lose(st, "ownership not confirmed within the client deadline (watchdog)");
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
        st->job_stopped = 0;
        tell_deadline(st);
        send_ctl(st, RUN_CTL_CONT, 0, 0);
        cli_verbose("ownership confirmed: the command continues");
    } else {
        send_ctl(st, RUN_CTL_KILL, 0, 0);
    }
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* The heartbeat loop.  Runs until the watchdog has exited (the job is
 * entirely gone), or with hold_until > 0 (the job already gone) until
 * that time. */
void run_supervise(run_state *st, int64_t hold_until)
{
    for (;;) {
        if (!st->watchdog && st->job_done &&
            (st->lost || hold_until == 0 || pglock_now_ms() >= hold_until))
            return;
        if (!st->watchdog && stop_signal && !st->lost)
            return; /* interrupted during --min-hold */
        int64_t now = pglock_now_ms();
        int64_t deadline = pglock_client_confirmed_at(st->client) + st->lease.client_ms;
        if (!st->lost && !st->job_stopped && now >= deadline) {
            char t[32];
            run_format_ms(st->lease.client_ms, t, sizeof t);
            lose(st, "ownership not confirmed within %s (the client deadline of a %lds lease)",
                 t, st->lease.server_ms / 1000);
        }
        if (!st->lost && !st->hb_inflight && now >= st->next_hb)
            start_heartbeat(st, now);

        int64_t wake = now + 1000;
        if (!st->lost) {
            wake = min64(wake, deadline);
            if (!st->hb_inflight)
                wake = min64(wake, st->next_hb);
            if (!st->watchdog && hold_until > 0)
                wake = min64(wake, hold_until);
        }
        struct pollfd p[3];
        int n = 0;
        p[n++] = (struct pollfd){event_pipe[0], POLLIN, 0};
        /* At end-of-file once the watchdog is gone: not polled then. */
        p[n++] = (struct pollfd){st->watchdog ? st->report_fd : -1, POLLIN, 0};
        int sock = st->lost ? -1 : pglock_client_socket(st->client);
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
        if (p[1].revents)
            read_reports(st);
        if (n == 3 && p[2].revents && !st->lost) {
            if (st->hb_inflight)
                poll_heartbeat(st);
            else
                /* Something arrived unasked: most likely the server's
                 * FATAL before it closes (pg_terminate_backend, shutdown).
                 * A heartbeat now finds out at once. */
                start_heartbeat(st, pglock_now_ms());
        }
        if (p[0].revents) {
            unsigned char sig[64];
            ssize_t k;
            while ((k = read(event_pipe[0], sig, sizeof sig)) > 0) {
                for (ssize_t i = 0; i < k; i++) {
                    int s = sig[i] & ~FROM_TERMINAL;
                    int from_terminal = (sig[i] & FROM_TERMINAL) != 0;
                    if (s == SIGCHLD) {
                        reap_children(st);
                    } else if (s == SIGTSTP) {
                        suspend(st);
                    } else if (s == SIGCONT) {
                        /* resumed: handled in suspend() */
                    } else if (from_terminal && st->args->foreground) {
                        /* The terminal sent it to its whole foreground
                         * process group, the job included: not twice. */
                    } else if (st->watchdog) {
                        cli_verbose("forwarding signal %d to the command", s);
                        send_ctl(st, RUN_CTL_SIGNAL, s, 0);
                    }
                }
            }
        }
    }
}

/* ------------------------------------------------------------- helpers */

/* "pglock run KEY", cut at 63 bytes (NAMEDATALEN - 1) on a UTF-8
 * character boundary, so that the server keeps it whole. */
void run_application_name(char buf[64], const char *key)
{
    char full[64 + 8];
    snprintf(full, sizeof full, "pglock %s %s", command_name, key);
    size_t n = strlen(full);
    if (n > 63) {
        /* Back up to the first byte of the character that straddles. */
        n = 63;
        while (n > 0 && ((unsigned char)full[n] & 0xC0) == 0x80)
            n--;
    }
    memcpy(buf, full, n);
    buf[n] = '\0';
}

static int exit_code_for_open(int rc)
{
    switch (rc) {
    case PGLOCK_ENOMEM:
        return CLI_EXIT_SOFTWARE;
    case PGLOCK_EINVAL:
        return CLI_EXIT_USAGE;
    default:
        return CLI_EXIT_UNAVAILABLE;
    }
}

int run_exit_status_of(int status)
{
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status))
        return 128 + WTERMSIG(status);
    return CLI_EXIT_SOFTWARE;
}

static int is_legacy(const pglock_key *key)
{
    return key->kind == PGLOCK_KEY_HASHTEXT ||
           key->kind == PGLOCK_KEY_HASHTEXTEXTENDED;
}

/* ------------------------------------------- shared with pglock lead */

void run_args_init(run_args *a, const char *command, void (*help)(void))
{
    memset(a, 0, sizeof *a);
    a->command = command;
    a->help = help;
    a->mode = PGLOCK_EXCLUSIVE;
    a->timeout_ms = PGLOCK_WAIT_FOREVER;
    a->lease_ms = RUN_LEASE_DEFAULT_MS;
    a->kill_after_ms = -1;
    a->conflict_code = CLI_EXIT_CONFLICT;
    a->lost_code = CLI_EXIT_LOST;
    a->hold = PGLOCK_HOLD_AUTO;
    a->restart_ms = -1;
}

static int prepare(int argc, char **argv, run_args *a, run_state *st,
                   run_job *job, pglock_key *key)
{
    memset(st, 0, sizeof *st);
    int rc = run_parse_args(argc, argv, a);
    if (rc >= 0)
        return rc;

    st->args = a;
    st->key_label = a->key_text;
    st->ctl_fd = st->report_fd = -1;
    char err[512];
    if (run_lease_derive(&st->lease, a->lease_ms, a->kill_after_ms, err, sizeof err) < 0) {
        cli_error(CLI_EXIT_USAGE, "%s", err);
        if (a->lease_ms >= RUN_LEASE_MIN_MS) {
            char t[32];
            run_format_ms(a->lease_ms / 6, t, sizeof t);
            char l[32];
            run_format_ms(a->lease_ms, l, sizeof l);
            cli_hint("With --lease=%s, --kill-after can be at most %s; raise --lease for a longer grace.",
                     l, t);
        }
        fprintf(stderr, "Try \"pglock %s --help\" for more information.\n",
                command_name);
        return CLI_EXIT_USAGE;
    }

    if (a->keys_file || a->key_text[0] == '@') {
        if (cli_registry_load(&st->registry, a->keys_file, err, sizeof err) < 0)
            return cli_usage_error(command_name, "%s", err);
    }
    if (cli_parse_key(a->key_text, st->registry, key, err, sizeof err) < 0)
        return cli_usage_error(command_name, "%s", err);

    /* Signals: stop signals interrupt the wait and later go to the job. */
    memset(job, 0, sizeof *job);
    job->argv = a->argv;
    job->shell_command = a->shell_command;
    job->foreground = a->foreground;
    job->foreground_pgrp = getpgrp();
    job->kill_after_ms = st->lease.kill_after_ms;
    sigprocmask(SIG_SETMASK, NULL, &job->orig_mask);
    for (const int *s = run_handled_signals; *s; s++)
        sigaction(*s, NULL, &job->orig_act[*s]);
    if (make_pipe(event_pipe) < 0 || make_pipe(interrupt_pipe) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not create a pipe: %s", strerror(errno));
    /* A write to the watchdog after it exited must be an error, not our
     * death; the job gets the original disposition back. */
    signal(SIGPIPE, SIG_IGN);
    int stop_sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGCHLD};
    for (size_t i = 0; i < sizeof stop_sigs / sizeof stop_sigs[0]; i++)
        catch_signal(stop_sigs[i], &job->orig_act[stop_sigs[i]]);
    return -1;
}

int run_prepare(int argc, char **argv, run_args *a, run_state *st,
                run_job *job, pglock_key *key)
{
    int rc = prepare(argc, argv, a, st, job, key);
    if (rc >= 0) { /* done before anything ran: the caller frees nothing */
        cli_registry_free(st->registry);
        st->registry = NULL;
    }
    return rc;
}

int run_stop_signal(void)
{
    return stop_signal;
}

int run_event_fd(void)
{
    return event_pipe[0];
}

int run_connect(run_state *st, pglock_key *key, const char *connect_timeout)
{
    const run_args *a = st->args;
    char appname[64];
    run_application_name(appname, a->key_text);
    const char *kw[12], *val[12];
    int nkw = 0;
    if (connect_timeout) {
        /* first, so that the user's own connect_timeout wins */
        kw[nkw] = "connect_timeout";
        val[nkw++] = connect_timeout;
    }
    cli_conn_params(&a->conn, NULL, kw + nkw, val + nkw);
    while (kw[nkw])
        nkw++;
    kw[nkw] = "application_name";
    val[nkw++] = appname;
    kw[nkw] = NULL;
    val[nkw] = NULL;
    pglock_options opts;
    pglock_options_init(&opts);
    opts.lease_ms = st->lease.server_ms;
    opts.application_name = appname;
    opts.interrupt = &stop_signal;
    opts.interrupt_fd = interrupt_pipe[0];
    opts.hold = a->hold;
    cli_verbose("connecting");
    int rc = pglock_client_open_params(&st->client, kw, val, &opts);
    if (rc < 0) {
        snprintf(st->error, sizeof st->error, "%s",
                 st->client ? pglock_client_error(st->client) : pglock_strerror(rc));
        pglock_client_close(st->client);
        st->client = NULL;
        return rc;
    }
    const char *db = pglock_client_database(st->client);
    PGconn *pc = pglock_client_conn(st->client);
    cli_verbose("connected: database \"%s\" on %s port %s, %s",
                db, pc && PQhost(pc) ? PQhost(pc) : "?",
                pc && PQport(pc) ? PQport(pc) : "?",
                pglock_client_hold_mode(st->client) == PGLOCK_HOLD_XACT
                    ? "through a pooler: the lock is held in a transaction"
                    : "session lock on a direct connection");

    if (is_legacy(key) && !key->resolved) {
        pglock_error perr;
        memset(&perr, 0, sizeof perr);
        rc = pglock_key_resolve(key, pc, &perr);
        if (rc < 0) {
            snprintf(st->error, sizeof st->error, "%s", perr.message);
            pglock_client_close(st->client);
            st->client = NULL;
            return rc;
        }
    }
    if (pglock_key_format(key, st->key_id, sizeof st->key_id) < 0)
        snprintf(st->key_id, sizeof st->key_id, "?");
    return 0;
}

int run_job_env(run_state *st)
{
    const run_args *a = st->args;
    char pidbuf[16], tokbuf[24];
    st->token = 0;
    if (a->fencing_token) {
        /* A step taken while the lock is held: bounded by the client
         * deadline, like every other (a commit waiting for synchronous
         * replication, a pooler with no free server connection). */
        int64_t left = pglock_client_confirmed_at(st->client) +
                       st->lease.client_ms - pglock_now_ms();
        int rc = pglock_client_fencing_token(st->client, &st->token,
                                             left > 0 ? (long)left : 0);
        if (rc < 0) {
            snprintf(st->error, sizeof st->error, "%s",
                     pglock_client_error(st->client));
            return rc;
        }
        snprintf(tokbuf, sizeof tokbuf, "%lld", (long long)st->token);
        setenv("PGLOCK_FENCING_TOKEN", tokbuf, 1);
        cli_verbose("fencing token %lld", (long long)st->token);
    } else {
        /* never one inherited from an outer pglock */
        unsetenv("PGLOCK_FENCING_TOKEN");
    }
    snprintf(pidbuf, sizeof pidbuf, "%d", pglock_client_backend_pid(st->client));
    const char *db = pglock_client_database(st->client);
    setenv("PGLOCK_KEY", a->key_text, 1);
    setenv("PGLOCK_KEY_ID", st->key_id, 1);
    setenv("PGLOCK_DATABASE", db ? db : "", 1);
    setenv("PGLOCK_BACKEND_PID", pidbuf, 1);
    return 0;
}

int run_job_env_failed(run_state *st, int rc, int warn_only)
{
    if (rc == PGLOCK_EINTR && stop_signal) {
        cli_verbose("interrupted while taking the fencing token");
        return 128 + stop_signal;
    }
    if (warn_only)
        cli_warning("lock \"%s\" acquired, but %s; released, contending again",
                    st->key_label, st->error);
    else
        cli_error(CLI_EXIT_UNAVAILABLE, "lock \"%s\" acquired, but %s; the command "
                  "was not run", st->key_label, st->error);
    if (rc == PGLOCK_ETIMEDOUT && !warn_only)
        cli_hint("The fencing token must be committed within the client deadline "
                 "(2/3 of --lease).  Is synchronous_standby_names waiting for a "
                 "standby that is not there, or is a pooler out of server "
                 "connections (the token needs a second one)?");
    return CLI_EXIT_UNAVAILABLE;
}

/* ----------------------------------------------------------- cmd_run */

static int run_locked(run_state *st, run_job *job);

int cmd_run(int argc, char **argv)
{
    run_args a;
    run_state st;
    run_job job;
    pglock_key key;
    run_args_init(&a, "run", NULL);
    int rc = run_prepare(argc, argv, &a, &st, &job, &key);
    if (rc >= 0)
        return rc;

    rc = run_connect(&st, &key, NULL);
    if (rc < 0) {
        int code = exit_code_for_open(rc);
        if (stop_signal)
            code = 128 + stop_signal;
        cli_error(code, "%s", st.error);
        if (rc == PGLOCK_EPOOLER)
            cli_hint("Use --mode=auto or --mode=xact to hold the lock in a "
                     "transaction through a transaction-mode pooler.");
        cli_registry_free(st.registry);
        return code;
    }
    const char *db = pglock_client_database(st.client);

    /* Take the lock. */
    cli_verbose("acquiring %s lock \"%s\" (%s) in database \"%s\"",
                a.mode == PGLOCK_SHARED ? "shared" : "exclusive",
                a.key_text, st.key_id, db);
    rc = pglock_lock(st.client, &key, a.mode, a.timeout_ms);
    if (rc < 0) {
        int code;
        if (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT) {
            code = a.conflict_code;
            if (!cli_quiet)
                fprintf(stderr, "pglock: lock \"%s\" in database \"%s\" is %s; "
                        "the command was not run\n", a.key_text, db,
                        rc == PGLOCK_EBUSY ? "held by another session"
                                           : "still held after the wait");
        } else if (rc == PGLOCK_EINTR && stop_signal) {
            code = 128 + stop_signal;
            cli_verbose("interrupted while waiting: the wait was cancelled");
        } else if (rc == PGLOCK_EINTR) {
            /* Not our signal: someone cancelled the wait on the server
             * (pg_cancel_backend).  Say so; 130 would claim a Ctrl-C. */
            code = cli_error(CLI_EXIT_UNAVAILABLE, "the wait for lock \"%s\" was "
                             "cancelled on the server: %s", a.key_text,
                             pglock_client_error(st.client));
        } else if (rc == PGLOCK_ECONNLOST) {
            /* e.g. the server restarted, or pglock was stopped (Ctrl-Z)
             * past the lease while waiting: the command never ran */
            code = cli_error(CLI_EXIT_UNAVAILABLE, "connection lost while waiting for lock "
                             "\"%s\"; the command was not run: %s", a.key_text,
                             pglock_client_error(st.client));
        } else {
            code = rc == PGLOCK_ENOMEM || rc == PGLOCK_ESTATE ? CLI_EXIT_SOFTWARE
                   : rc == PGLOCK_EINVAL ? CLI_EXIT_USAGE : CLI_EXIT_UNAVAILABLE;
            cli_error(code, "%s", pglock_client_error(st.client));
        }
        pglock_client_close(st.client);
        cli_registry_free(st.registry);
        return code;
    }
    st.acquired_at = pglock_now_ms();
    cli_verbose("acquired \"%s\" (%s), backend pid %d", a.key_text, st.key_id,
                pglock_client_backend_pid(st.client));

    if ((rc = run_job_env(&st)) < 0) {
        int code = run_job_env_failed(&st, rc, 0);
        pglock_client_close(st.client);
        cli_registry_free(st.registry);
        return code;
    }

    rc = run_locked(&st, &job);
    cli_registry_free(st.registry);
    return rc;
}

int run_job_term(run_state *st, run_job *job)
{
    st->job_done = st->job_exited = st->job_status = 0;
    st->exec_errno = st->job_stopped = 0;
    /* A long wait, or a pglock stopped while waiting, may have been
     * granted the lock long ago: confirm ownership before starting. */
    st->next_hb = pglock_now_ms() + st->lease.heartbeat_ms;
    if (pglock_now_ms() - pglock_client_confirmed_at(st->client) >
            st->lease.heartbeat_ms &&
        run_confirm_now(st, pglock_now_ms() + st->lease.client_ms) < 0) {
        /* Nothing ran without the lock: not 74, which says a command was
         * stopped. */
        return cli_error(CLI_EXIT_UNAVAILABLE, "lock \"%s\" lost before the command "
                         "started: %s; the command was not run",
                         st->key_label, st->lost_reason);
    }
    if (stop_signal)
        return 128 + stop_signal;

    int ctl[2], rep[2];
    if (pipe2(ctl, O_CLOEXEC) < 0 || pipe2(rep, O_CLOEXEC) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not create a pipe: %s", strerror(errno));
    fcntl(rep[0], F_SETFL, O_NONBLOCK);
    /* The watchdog's orphans come to us if it dies; and as PID 1 we reap
     * whatever else is reparented here. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    int sigs[] = {SIGTSTP, SIGCONT, SIGUSR1, SIGUSR2, SIGWINCH};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++)
        catch_signal(sigs[i], &job->orig_act[sigs[i]]);
    int close_in_child[] = {ctl[1], rep[0], event_pipe[0], event_pipe[1],
                            interrupt_pipe[0], interrupt_pipe[1], -1};
    st->watchdog = run_watchdog_start(job, ctl[0], rep[1], close_in_child);
    close(ctl[0]);
    close(rep[1]);
    st->ctl_fd = ctl[1];
    st->report_fd = rep[0];
    if (st->watchdog < 0) {
        st->watchdog = 0;
        close(st->ctl_fd);
        close(st->report_fd);
        st->ctl_fd = st->report_fd = -1;
        return cli_error(CLI_EXIT_SOFTWARE, "could not fork: %s", strerror(errno));
    }
    tell_deadline(st);
    if (stop_signal)
        send_ctl(st, RUN_CTL_SIGNAL, stop_signal, 0);
    cli_verbose("command started (watchdog pid %d)", (int)st->watchdog);

    run_supervise(st, 0);
    close(st->ctl_fd);
    close(st->report_fd);
    st->ctl_fd = st->report_fd = -1;
    return -1;
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

/* Runs the job under the held lock and releases it; returns the exit
 * status. */
static int run_locked(run_state *st, run_job *job)
{
    const run_args *a = st->args;
    int code = run_job_term(st, job);
    if (code >= 0) {
        pglock_client_close(st->client);
        return code;
    }
    if (st->lost) {
        code = cli_error(a->lost_code, "lock \"%s\" lost: %s; the command was stopped",
                         st->key_label, st->lost_reason);
    } else {
        code = run_term_status(st);
        /* The command ran to its end: prove the lock was still ours. */
        if (st->fatal || st->exec_errno) {
            /* it did not run, or the watchdog died: already reported */
        } else if (run_confirm_now(st, pglock_client_confirmed_at(st->client) +
                                st->lease.client_ms) < 0) {
            code = cli_error(a->lost_code, "lock \"%s\" lost while the command ran: %s",
                             st->key_label, st->lost_reason);
        } else if (a->min_hold_ms > 0 &&
                   pglock_now_ms() < st->acquired_at + a->min_hold_ms) {
            cli_verbose("holding until --min-hold ends");
            run_supervise(st, st->acquired_at + a->min_hold_ms);
            if (st->lost && !cli_quiet)
                fprintf(stderr, "pglock: warning: lock \"%s\" lost during --min-hold: %s\n",
                        st->key_label, st->lost_reason);
            else if (stop_signal)
                code = 128 + stop_signal;
        }
    }
    pglock_client_close(st->client);
    cli_verbose("released");
    return code;
}
