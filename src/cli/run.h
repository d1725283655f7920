/*
 * run.h — what `pglock run`'s files share: the lease arithmetic and the
 * watchdog that supervises the job.  Internal to the CLI.
 */
#ifndef PGLOCK_CLI_RUN_H
#define PGLOCK_CLI_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/*
 * The lease, all in ms.  One --lease sets T_s (the server's
 * idle_session_timeout); the rest derive from it:
 *   heartbeat (T_h) = T_s / 6   how often ownership is confirmed
 *   client (T_c)    = 2 T_s / 3 the job is stopped when nothing has been
 *                               confirmed for this long
 *   margin          = T_s / 6   room for scheduling and one round trip
 * and the rule  T_c + kill_after + margin <= T_s  leaves kill_after at most
 * T_s / 6 (30s -> T_c 20s, T_h 5s, kill-after <= 5s; 3s -> 2s, 500ms,
 * <= 500ms).
 */
typedef struct run_lease {
    long server_ms;      /* T_s */
    long client_ms;      /* T_c */
    long heartbeat_ms;   /* T_h */
    long margin_ms;
    long kill_after_ms;  /* grace between SIGTERM and SIGKILL */
} run_lease;

#define RUN_LEASE_MIN_MS 1000L
#define RUN_LEASE_MAX_MS 2147483647L  /* idle_session_timeout is an int */
#define RUN_LEASE_DEFAULT_MS 30000L

/*
 * Derives T_c, T_h and the margin from lease_ms and checks the rule.
 * kill_after_ms < 0 means "the default": the largest the rule allows, at
 * most 10 s.  0, or -1 with one line in err naming the bound that failed.
 */
int run_lease_derive(run_lease *out, long lease_ms, long kill_after_ms,
                     char *err, size_t errlen);

/* Formats ms as a DURATION ("500ms", "20s", "1500ms"). */
void run_format_ms(long ms, char *buf, size_t len);

/* ------------------------------------------------------ the watchdog */

/* pglock -> watchdog: one message per write (atomic on a pipe). */
enum run_ctl_op {
    RUN_CTL_SIGNAL = 1,    /* arg: a signal to forward to the job */
    RUN_CTL_TERMINATE,     /* stop the job: SIGTERM, grace, SIGKILL */
    RUN_CTL_KILL,          /* SIGKILL the job at once */
    RUN_CTL_STOP,          /* SIGSTOP the job (pglock is being suspended) */
    RUN_CTL_CONT,          /* SIGCONT the job (ownership re-verified) */
    RUN_CTL_DEADLINE       /* value: the client deadline (pglock_now_ms) */
};

/* watchdog -> pglock. */
enum run_report_kind {
    RUN_REP_EXEC_FAILED = 1, /* arg: errno of the failed exec */
    RUN_REP_EXITED,          /* arg: the job's wait status */
    RUN_REP_DEADLINE,        /* the deadline passed: the job is being stopped */
    RUN_REP_STOPPED,         /* the job is stopped (answer to RUN_CTL_STOP) */
    RUN_REP_DONE,            /* no process of the job remains */
    RUN_REP_TTY_STOPPED      /* arg: SIGTTIN/SIGTTOU stopped the job */
};

typedef struct run_msg {
    int32_t op;     /* run_ctl_op or run_report_kind */
    int32_t arg;
    int64_t value;
} run_msg;

typedef struct run_job {
    char *const *argv;       /* the command, or NULL with shell_command */
    const char *shell_command; /* -c STRING: /bin/sh -c STRING */
    int foreground;          /* stay in pglock's process group */
    long kill_after_ms;
    sigset_t orig_mask;      /* restored in the job */
    /* Dispositions pglock found at start (SIG_DFL or SIG_IGN, e.g. under
     * nohup), restored in the job for every signal pglock or the watchdog
     * handle. */
    struct sigaction orig_act[65];
} run_job;

/*
 * Forks the watchdog, which becomes a child subreaper, starts the job
 * (its own process group unless foreground) and supervises it: it obeys
 * run_msg commands read from ctl_fd, reports on report_fd, and exits only
 * when no process of the job remains.  When ctl_fd reaches end-of-file
 * (pglock died, even by SIGKILL) it SIGKILLs every process of the job,
 * waits for them and only then exits, closing its inherited copy of the
 * lock connection's socket last.  close_in_child: fds the watchdog must
 * not keep (-1 terminated).  Returns the watchdog's pid or -1 (errno).
 */
pid_t run_watchdog_start(const run_job *job, int ctl_fd, int report_fd,
                         const int *close_in_child);

/* The signals pglock and the watchdog take over (0-terminated). */
extern const int run_handled_signals[];

/* Sends signo to every descendant of the calling process (by /proc).
 * Returns how many processes were signalled. */
int run_signal_descendants(int signo);

#endif
