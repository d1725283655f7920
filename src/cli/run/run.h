/*
 * run.h — what the files of `pglock run` and `pglock lead` share.  Internal
 * to the CLI.  One file per concern:
 *   run_options.c     the options, their defaults and --help
 *   run_command.c     whether the command can be executed, before the lock
 *   run_prepare.c     checks, key, signals; the job's environment
 *   run_connect.c     the lock connection: opened, judged, reopened (one
 *                     loop for both commands)
 *   run_error.c       why a step failed, returned to its caller
 *   run_acquire.c     taking the keys within --wait
 *   run_busy.c        who holds a busy key, for run's notice and lead's
 *                     STATUS
 *   run_retry.c       backoff and pauses between reconnects
 *   run_keys.c        several keys: parsed, put in canonical order, taken
 *                     all or none
 *   run_slots.c       --slots=N: the slot keys, the options, a try
 *   run_slots_wait.c  --slots=N: the wait (a gate, then N watchers)
 *   run_lease.c       the lease arithmetic (T_s, T_c, T_h, kill-after)
 *   run_signals.c     the signal self-pipe and the stop flag
 *   run_supervisor.c  the lease (the library's hold), signal forwarding,
 *                     Ctrl-Z, loss
 *   run_drive.c       driving a hold from a poll() loop (the job's lease,
 *                     the slot gate's)
 *   run_watchdog.c    the forked process that runs and outlives the job
 *   run_notify.c      lead's reports: systemd's notify socket, --state-file
 *   cmd_run.c, cmd_lead.c   the two commands' stories
 */
#ifndef PGLOCK_CLI_RUN_H
#define PGLOCK_CLI_RUN_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include "cli.h"
#include "pglock.h"

/*
 * The lease, all in ms.  One --lease sets T_s; the rest derive from it by
 * lease_rules.h (30s -> T_c 20s, T_h 5s, kill-after <= 5s; 3s -> 2s,
 * 500ms, <= 500ms).
 */
typedef struct run_lease {
    long server_ms;    /* T_s */
    long client_ms;    /* T_c */
    long heartbeat_ms; /* T_h */
    long margin_ms;
    long kill_after_ms; /* grace between SIGTERM and SIGKILL */
} run_lease;

#define RUN_LEASE_MIN_MS 1000L
#define RUN_LEASE_MAX_MS 2147483647L /* idle_session_timeout is an int */
#define RUN_LEASE_DEFAULT_MS 20000L  /* Patroni's ttl - loop_wait */

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
    RUN_CTL_SIGNAL = 1, /* arg: a signal to forward to the job */
    RUN_CTL_TERMINATE,  /* stop the job: SIGTERM, grace, SIGKILL */
    RUN_CTL_KILL,       /* SIGKILL the job at once */
    RUN_CTL_STOP,       /* SIGSTOP the job (pglock is being suspended) */
    RUN_CTL_CONT,       /* SIGCONT the job (ownership re-verified) */
    RUN_CTL_DEADLINE,   /* value: the client deadline (pglock_now_ms) */
    RUN_CTL_STOP_BY     /* value: when the job must be gone after a
                              client-side loss (pglock_now_ms) */
};

/* watchdog -> pglock. */
enum run_report_kind {
    RUN_REP_EXEC_FAILED = 1, /* arg: errno of the failed exec */
    RUN_REP_EXITED,          /* arg: the job's wait status */
    RUN_REP_DEADLINE,        /* the deadline passed: the job is being stopped */
    RUN_REP_STOPPED,         /* the job is stopped (answer to RUN_CTL_STOP) */
    RUN_REP_DONE,            /* no process of the job remains */
    RUN_REP_TTY_STOPPED,     /* arg: SIGTTIN/SIGTTOU stopped the job */
    RUN_REP_NOT_STARTED      /* the deadline passed before the exec: the
                                command was not run */
};

typedef struct run_msg {
    int32_t op; /* run_ctl_op or run_report_kind */
    int32_t arg;
    int64_t value;
} run_msg;

typedef struct run_job {
    char *const *argv;         /* the command, or NULL with shell_command */
    const char *shell_command; /* -c STRING: /bin/sh -c STRING */
    int foreground;            /* join pglock's process group */
    pid_t foreground_pgrp;     /* pglock's process group */
    /* After a loss at time L, one SIGTERM, then SIGKILL at L +
     * kill_after_ms, or at stop_by if that is sooner. */
    long kill_after_ms;
    /* The client deadline when the watchdog is forked (pglock_now_ms();
     * RUN_CTL_DEADLINE moves it on), checked again just before the exec:
     * a command is never started past it. */
    int64_t deadline;
    /* When the job must be gone after a client-side loss: the client
     * deadline + kill-after (RUN_CTL_STOP_BY moves it on).  Both are the
     * hold's (pglock_hold_deadline(), pglock_hold_stop_by()). */
    int64_t stop_by;
    int allow_setuid;   /* --allow-setuid: no PR_SET_NO_NEW_PRIVS */
    sigset_t orig_mask; /* restored in the job */
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
 * lock connection's socket last.  The job runs with no_new_privs unless
 * job->allow_setuid, so that it can never become a process the watchdog
 * may not signal; it is not started past job->deadline, and once the
 * deadline has passed the watchdog stops it itself.  close_in_child: fds
 * the watchdog must not keep (-1 terminated).  Returns the watchdog's pid
 * or -1 (errno).
 */
pid_t run_watchdog_start(const run_job *job, int ctl_fd, int report_fd,
                         const int *close_in_child);

/* The signals pglock and the watchdog take over (0-terminated). */
extern const int run_handled_signals[];

/* Sends signo to every descendant of the calling process (by /proc).
 * Returns how many processes were signalled.  A process it may not
 * signal (it gained privileges) is warned of once per *said (0 until
 * then), so that a caller that signals again is not heard twice. */
int run_signal_descendants(int signo, int *said);

/* ---------------------------------------- driving a hold (run_drive.c) */

/* A managed hold in loop mode (NULL: none), stepped from a poll() loop. */
typedef struct run_drive {
    pglock_hold *hold;
    int64_t step_at; /* the next step (INT64_MAX: none, or lost) */
} run_drive;
/* What run_drive_step() did. */
typedef enum {
    RUN_STEP_NOT_DUE, /* nothing: the hold asked for no step yet */
    RUN_STEP_TAKEN,   /* stepped; the hold's deadline may have moved */
    RUN_STEP_LOST     /* the hold declared the lease lost: no more
                                 steps (pglock_hold_error() says why) */
} run_step;
/* A driver of hold, whose first step is due at once. */
run_drive run_drive_start(pglock_hold *hold);
/* Steps the hold if its step is due by now. */
run_step run_drive_step(run_drive *d, int64_t now);
/* When the next step is due (INT64_MAX: never), for poll()'s timeout. */
int64_t run_drive_due(const run_drive *d);
/* The fd to poll for POLLIN (-1: none); when it is readable, call
 * run_drive_heard(): the next step is due at once. */
int run_drive_fd(const run_drive *d);
void run_drive_heard(run_drive *d);

/* ------------------------------------------------------- the signals */

/* Set in a stop-signal byte read from run_event_fd() when the kernel sent
 * the signal (a terminal's ^C, ^\\, ^Z) rather than kill(). */
#define RUN_FROM_TERMINAL 0x80

/* Records the dispositions and mask pglock started with (the job gets them
 * back), opens the pipes and catches the stop signals and SIGCHLD.  0, or
 * -1 with errno. */
int run_signals_init(run_job *job);
/* Also catches SIGTSTP, SIGCONT, SIGUSR1, SIGUSR2 and SIGWINCH (to forward
 * them), once the job is about to start. */
void run_signals_catch_job_control(const run_job *job);
/* The stop signal received (INT, TERM, HUP, QUIT), or 0. */
int run_stop_signal(void);
/* Readable when any handled signal arrived: one byte per signal, the
 * signal number | RUN_FROM_TERMINAL (drain it). */
int run_event_fd(void);
/* Readable when a stop signal arrived: pglock_options.interrupt_fd. */
int run_interrupt_fd(void);
/* The four ends of both pipes, which the watchdog must not keep. */
void run_signal_pipes(int out[4]);

/* ----------------------------------- run's flow, shared with lead */

typedef struct run_args run_args;

/* What makes `pglock run` or `pglock lead` itself: its own options (a
 * table whose first entry is the group heading, its fields in run_args)
 * and its help text around the tables. */
typedef struct run_command {
    const char *name;     /* "run" or "lead" */
    const char *summary;  /* --help's first line */
    const char *epilogue; /* --help's last lines (exit status) */
    const cli_opt *opts;
    int several_keys; /* takes KEY... (run), not one KEY (lead) */
} run_command;

/* The most keys one `pglock run` takes (documented in pglock-run(1)). */
#define RUN_MAX_KEYS 32
/* The most bytes of PGLOCK_KEY, the keys as given joined by newlines
 * (documented in pglock-run(1)). */
#define RUN_MAX_KEY_ENV 4095

struct run_args {
    cli_common common; /* first: the shared options' fields */
    const run_command *cmd;
    const char *command;            /* cmd->name: for messages */
    const char *key_text;           /* the first key as given (lead: the key) */
    const char *keys[RUN_MAX_KEYS]; /* every key, as given */
    int nkeys;
    pglock_mode mode;
    long timeout_ms; /* PGLOCK_TRY, PGLOCK_WAIT_FOREVER or ms */
    long lease_ms;
    long kill_after_ms; /* -1: the default */
    long min_hold_ms;
    int conflict_code;
    int lost_code;
    const char *shell_command;
    char **argv;
    int foreground;
    int allow_setuid;         /* --allow-setuid */
    pglock_lifetime lifetime; /* --mode (default auto) */
    long restart_ms;          /* lead --restart[=DELAY]; -1: not given */
    long lock_delay_ms;       /* lead --lock-delay; 0: none */
    const char *state_file;   /* lead --state-file, or NULL */
    int fencing_token;        /* take one for the job (lead: always) */
    char timeout_option;      /* 'n' (--try) or 'w' (--wait) once given */
    int record;               /* --record or PGLOCK_RECORD (run_record.c) */
    const char *host_label;   /* --host-label, or NULL: the host name */
    int slots;                /* run --slots=N; 0: not a semaphore */
    int replace;              /* --replace: ask the holders to stop */
    int queue;                /* --queue=N: at most N waiters; 0: any */
};

/* The job's supervision, one at a time (`run` runs one job, `lead` one
 * after another): the hold, the watchdog and its pipes, and what the
 * watchdog said.  run_supervisor.c's alone. */
typedef struct run_supervision {
    pglock_hold *hold; /* the lease, in loop mode, from the job's start
                           until run_hold_end() (lead: across restarts) */
    pid_t watchdog;    /* 0 once reaped */
    int ctl_fd;        /* write end to the watchdog, or -1 */
    int report_fd;     /* read end from the watchdog, or -1 */
    int job_done;      /* RUN_REP_DONE seen: no process of the job is left */
    int not_started;   /* RUN_REP_NOT_STARTED: the deadline passed before
                           the exec */
    int job_stopped;   /* we stopped it (SIGTSTP) */
} run_supervision;

/* --record's history of the run under way, one at a time (lead: one term
 * after another): its connection, the start rows (one per key) and
 * whether their run locks are held in a transaction.  run_record.c's
 * alone. */
typedef struct run_record {
    struct pg_conn *conn;        /* the history's connection, or NULL */
    long long ids[RUN_MAX_KEYS]; /* the start rows' ids */
    int n;                       /* how many; 0 if none */
    int xact;                    /* the run locks are held in a transaction */
    int64_t sent_at;             /* pglock_now_ms() when the INSERT was sent:
                                     its rows' started_at on our clock */
    int64_t begun_at;            /* when the run locks' BEGIN was sent: that
                                     transaction's now() on our clock */
    int revision;                /* the table's (history.h): what to write */
    int64_t contend_from;        /* when pglock began to contend: before the
                                     options are read (run), the last term's
                                     end (lead); a row's wait counts from it */
} run_record;

typedef struct run_state {
    const run_args *args;
    const char *key_label;          /* the key as the user wrote it (several:
                                 joined with ", ", in canonical order) */
    char key_id[RUN_MAX_KEYS * 24]; /* pglock_key_format() of each key,
                                       space separated */
    int nkeys;
    const char *key_texts[RUN_MAX_KEYS]; /* as given, in canonical order */
    char label_buf[512];
    cli_registry *registry; /* for @NAME keys, or NULL; owns their names */
    run_lease lease;
    pglock_client *client;
    int64_t acquired_at;
    int64_t token; /* this acquisition's fencing token */

    /* What the job did (run_supervisor.c, which keeps the rest of the
     * supervision to itself) */
    int job_status; /* wait status, valid if job_exited */
    int job_exited;
    int64_t job_ended_at; /* pglock_now_ms() when its exit was told,
                                 valid if job_exited: --record's end */
    int exec_errno;

    int lost; /* the lock is lost: the job is being stopped */
    char lost_reason[512];
    /* Another run asked for the lock (--replace) with a role allowed to:
     * the job is being stopped, and the lock goes once it is gone. */
    int replaced;
    int replace_done; /* lead: --replace has won leadership once */
    /* --queue: the place held in each key's queue while waiting; 1 + the
     * index of the key whose queue was full, or 0 */
    pglock_key queue_place[RUN_MAX_KEYS];
    int queue_full;
    int fatal; /* internal error: exit 70 */

    run_supervision sv; /* run_supervisor.c's */
    run_record rec;     /* run_record.c's */

    int slot;         /* --slots: the slot held (PGLOCK_SLOT) */
    int slots_in_use; /* --slots: another N found in use, or 0 */

    struct run_notify *notify; /* lead's reports (run_notify.c), or NULL */
} run_state;

/* Defaults for cmd. */
void run_args_init(run_args *a, const run_command *cmd);
/* Parses the options (cmd's and the shared ones), KEY and COMMAND.
 * CLI_GO_ON, else the exit status (0 after --help). */
cli_step run_parse_args(int argc, char **argv, run_args *a);
/* Whether a->argv[0] can be executed, looked up as execvp() will:
 * CLI_GO_ON if so (or with -c STRING), else 127 or 126 with the error
 * printed. */
cli_step run_command_check(const run_args *a);
/* run_parse_args(), then the lease arithmetic, the keys (and registry) and
 * the signal handling; fills st, job and key[0..a->nkeys) (RUN_MAX_KEYS
 * for a command with several_keys, else one).  CLI_GO_ON (the caller
 * frees st->registry), else the exit status (the message printed, nothing
 * left to free). */
cli_step run_prepare(int argc, char **argv, run_args *a, run_state *st,
                     run_job *job, pglock_key *key);
/* -------------------------------------------- errors (run_error.c) */

/* Why a step failed, besides the PGLOCK_E* code it returns: a caller's
 * own, filled by the step that knows why (a function that takes one
 * says when it is set), never kept on run_state. */
typedef struct run_error {
    char sqlstate[6];  /* the server's (a refused connect's), or "" */
    char message[512]; /* one line */
} run_error;
/* err's message from fmt, no SQLSTATE; returns rc, so that
 * `return run_error_set(err, PGLOCK_ENOMEM, ...)` reads naturally. */
int run_error_set(run_error *err, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* err from client's last error and SQLSTATE (NULL: rc's words); returns
 * rc. */
int run_error_of(run_error *err, int rc, const pglock_client *client);

/* ------------------------------ the lock connection (run_connect.c) */

/* Opens st->client (connect_timeout_ms: pglock_options' own), resolves
 * legacy keys and puts the keys in canonical order (run_keys_order()); 0,
 * or a PGLOCK_E* code with err set and st->client NULL. */
int run_connect(run_state *st, pglock_key *key, long connect_timeout_ms,
                run_error *err);
/* Closes st->client (NULL is fine) and forgets it. */
void run_client_drop(run_state *st);
/* What a failed run_connect() (rc) says about trying again, from the
 * mildest to the hardest: each command gives up from one of them on
 * (run_retry.gives_up_at). */
typedef enum {
    /* no server there yet, one starting up or shutting down, too many
     * clients, a pooler that cannot reach its server: waiting may fix it */
    RUN_REFUSAL_PASSING,
    /* no refusal: a step after the connect failed (the connection lost or
     * timed out in its setup, a legacy key's value not read): a reconnect
     * tries again, run's first connect does not */
    RUN_REFUSAL_OTHER,
    /* a refused password, a pg_hba.conf or privilege refusal, bad
     * options: run --wait gives up at once, lead retries (a password
     * being rotated) and says so every minute */
    RUN_REFUSAL_REFUSED,
    /* the path itself says no, every time: a database or role that does
     * not exist (said by the server or a pooler in between), a pooler
     * with --mode=session, a server older than 14, invalid options or no
     * memory: the command ends at once, lead too */
    RUN_REFUSAL_FOR_GOOD
} run_refusal;
run_refusal run_connect_verdict(int rc, const run_error *err);
/* Whether a caller that gives up at gives_up_at tries again after rc (err:
 * run_connect()'s): the one place that decides it. */
int run_connect_again(int rc, const run_error *err, run_refusal gives_up_at);
/* A lock client with run's connection parameters, options and lease (in
 * the session lifetime with --slots), interrupted by a readable interrupt_fd.
 * pglock_client_open_params()'s contract: *out is set even on failure.
 * Prints nothing, so that a thread may call it. */
int run_open_client(const run_state *st, long connect_timeout_ms,
                    int interrupt_fd, pglock_client **out);

/* What the reconnect loop tells its caller's voice. */
typedef enum {
    RUN_RETRY_PAUSE,    /* a pause of pause_ms begins */
    RUN_RETRY_FAILED,   /* an attempt failed (why) and is tried again */
    RUN_RETRY_CONNECTED /* st->client is open */
} run_retry_event;
/* How one command reconnects. */
typedef struct run_retry {
    int64_t deadline;        /* the budget's end (run --wait); 0: none */
    run_refusal gives_up_at; /* the first verdict that ends the loop */
    long *backoff;           /* the caller's backoff base (lead keeps one
                                 across losses), or NULL: a fresh one */
    int pause_first;         /* back off before the first attempt too */
    /* the caller's voice, with its own state in voice */
    void (*tell)(run_state *st, void *voice, run_retry_event ev, long pause_ms,
                 const run_error *why);
    void *voice;
} run_retry;
/* run --wait's way: within deadline, giving up at a refusal, pausing
 * first, said in verbose lines. */
run_retry run_retry_within(int64_t deadline);
/* Reopens st->client (closed, NULL) as r says, with backoff, until it
 * connects, the budget cannot fit another attempt, a stop signal, or a
 * verdict at or past r->gives_up_at.  0, or a PGLOCK_E* code with err
 * set (PGLOCK_ECONNECT: the budget ran out; PGLOCK_EINTR: a stop
 * signal). */
int run_reconnect(run_state *st, pglock_key *keys, const run_retry *r,
                  run_error *err);
/* After a wait that failed with rc: a connection lost with a budget
 * (deadline, 0: none) is said (a warning the first time, *said counting,
 * naming what was waited for), closed and reopened within the budget:
 * 0, and the wait begins again.  Else the code to give up with: rc (err
 * as the wait left it), or the reconnect's (err set by it). */
int run_ride_out_loss(run_state *st, pglock_key *keys, int64_t deadline, int rc,
                      int *said, const char *what, run_error *err);

/* --replace (run_replace.c): holds each of the nkeys keys' stop-request
 * keys in shared mode on st->client, so that their holders stop and let
 * them go; within timeout_ms as pglock_lock() takes it.  0, or the code
 * with err set. */
int run_replace_ask(run_state *st, const pglock_key *keys, int nkeys,
                    long timeout_ms, run_error *err);

/* The most places --queue=N gives a key. */
#define RUN_MAX_QUEUE 64
/* --queue=N (run_waiters_limit.c): takes a free place in each key's
 * queue before waiting (a try), kept in st->queue_place.  0; else the
 * code with err set: PGLOCK_EBUSY with st->queue_full set when N
 * runs wait already; PGLOCK_EPOOLER with the xact lifetime. */
int run_queue_enter(run_state *st, const pglock_key *keys, run_error *err);
/* Once every key is granted: gives the places back (one round trip per
 * key).  0, or the code with err set. */
int run_queue_leave(run_state *st, run_error *err);

/* Parses st->nkeys keys from st->key_texts into keys, loading the
 * registry for @NAME; refuses a key given twice.  0, or -1 with err set
 * (a usage error). */
int run_keys_parse(run_state *st, pglock_key *keys, char *err, size_t errlen);
/* Once every key is resolved: sorts keys (and st->key_texts) into the
 * canonical order, refuses duplicates (-1, err set), fills st->key_id and
 * st->key_label.  0 or -1. */
int run_keys_order(run_state *st, pglock_key *keys, char *err, size_t errlen);
/* Takes st->nkeys keys in order, all or none, within timeout_ms for all of
 * them together (PGLOCK_TRY: each a try).  0 when all are held; else
 * pglock_lock()'s code for keys[*failed], its message in err, and none
 * is held. */
int run_lock_all(run_state *st, const pglock_key *keys, pglock_mode mode,
                 long timeout_ms, int *failed, run_error *err);
/* Reconnect backoff: from RUN_BACKOFF_MIN_MS doubling up to
 * RUN_BACKOFF_MAX_MS, each wait drawn from [b/2, b] so that a crowd of
 * waiters spreads out. */
#define RUN_BACKOFF_MIN_MS 100L
#define RUN_BACKOFF_MAX_MS 5000L
/* libpq's smallest connect_timeout: a reconnect needs this much budget. */
#define RUN_MIN_ATTEMPT_MS 2000L
/* Seeds the draws, once per process (run_prepare()): the hosts of a
 * fleet that lose the same server at once do not retry in step. */
void run_backoff_seed(void);
/* The next wait, and the next base (doubled, capped). */
long run_next_backoff(long *base);
/* Waits ms, or less if a stop signal arrives: the stop signal or 0.
 * Other signals' bytes are drained. */
int run_pause_ms(long ms);
/* run's acquisition: run_lock_all() within a->timeout_ms; a connection
 * lost while waiting with --wait=DURATION is reopened with backoff and the
 * wait begun again, within the same budget, said once on stderr.  0 when
 * held; else a PGLOCK_E* code for keys[*failed], err set, with st->client
 * still open, or NULL when the connection could not be regained
 * (PGLOCK_ECONNECT, or a refusal for good). */
int run_acquire(run_state *st, pglock_key *keys, int *failed, run_error *err);
/* Who holds key, for the busy message: "cron-3 (backend pid 812, user
 * app, client 10.0.0.5:41234, \"pglock run K on cron-3\", held 41s)"
 * (cli_holder_describe()) and how many others, read
 * from pg_locks within RUN_BUSY_HOLDER_MS; "another session" when that
 * cannot be read in time, or under -q, where nothing is printed. */
#define RUN_BUSY_HOLDER_MS 500
void run_busy_holder(const run_state *st, const pglock_key *key, char *buf,
                     size_t len);
/* The keys joined with sep into buf (cut at len). */
void run_join_keys(char *buf, size_t len, const char *const *texts, int n,
                   const char *sep);

/* After the grant: takes the fencing token if asked (bounded by the
 * client deadline) and sets the job's environment (PGLOCK_KEY, _KEY_ID,
 * _DATABASE, _BACKEND_PID, _FENCING_TOKEN).  0, or a PGLOCK_E* code with
 * err set: the command must not run, and the lock is released. */
int run_job_env(run_state *st, run_error *err);
/* Reports a run_job_env() failure (rc, err): the exit status for "the
 * command was not run" (69, or 128+N after a stop signal), the line
 * printed unless warn_only (lead: a warning, then it contends again). */
int run_job_env_failed(const run_state *st, int rc, const run_error *err,
                       int warn_only);
/* Runs the job once under the held lock and supervises it (the hold,
 * signals, job control) until no process of it remains; the hold goes on
 * (run_hold_end()).  CLI_GO_ON when it ran
 * (see st->lost, st->exec_errno, st->job_exited/job_status, st->fatal);
 * else an exit status (printed) and the job was not started.  Leaves
 * st->client open. */
cli_step run_job_under_lock(run_state *st, run_job *job);
/* After run_job_under_lock() ran the job, not lost: the exit status (the
 * command's, or 70 if the watchdog died, 126/127 if the command could not
 * be executed, the last two printed). */
int run_job_status(run_state *st);
/* No supervision yet: no hold, no watchdog. */
void run_supervision_init(run_supervision *sv);
/* Drives the hold until the job is gone, or, with hold_until > 0 and no
 * job, until then (or a loss or stop signal). */
void run_supervise(run_state *st, int64_t hold_until);
/* The lease's clock, the hold's while it runs (before it starts, the
 * same rule on the client's last confirmation): "confirmed until", when
 * the job must be gone after a client-side loss, and a deadline counted
 * from now (a bound for a step after a pause, when the client deadline
 * starts afresh). */
int64_t run_deadline(run_state *st);
int64_t run_stop_by(run_state *st);
int64_t run_deadline_from_now(run_state *st);
/* Proves ownership now (by deadline); 0, or -1 and the lock is lost. */
int run_confirm_now(run_state *st, int64_t deadline);
/* Once no process of the job remains and the lock is needed no more:
 * ends the hold and releases, the release's answer proving ownership up
 * to it (one round trip, by deadline).  0, or -1 and the lock is lost
 * (the connection closed).  st->client is left to close. */
int run_release_now(run_state *st, int64_t deadline);
/* Once no process of the job remains: stops the hold, whose last
 * confirmation (none right after run_confirm_now()) may still find the
 * lock lost; a lost hold closes the connection.  0, or -1 when the lock
 * is lost (st->lost).  Before st->client is closed. */
int run_hold_end(run_state *st);
/* The exit status for a wait status (128+N for signal N). */
int run_exit_status_of(int status);

/* ------------------------------- lead's reports (run_notify.c) */

/* Where lead says what it is doing: systemd's notify socket
 * ($NOTIFY_SOCKET, sd_notify(3)'s protocol) and --state-file.  Every
 * call takes NULL (neither in use) and does nothing then. */
typedef struct run_notify run_notify;
/* Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID, removes them from
 * the environment (the command must not answer for pglock), and writes
 * the state file's first state, "waiting".  0 with *out set (NULL when
 * neither is in use), or -1 with err set: the state file cannot be
 * written. */
int run_notify_open(run_notify **out, const char *state_file, char *err,
                    size_t errlen);
/* Removes the state file and closes. */
void run_notify_close(run_notify *n);
/* The watchdog interval systemd asked for, in ms, or 0: no pings. */
long run_notify_watchdog_ms(const run_notify *n);
/* READY=1, once: lead contends (waits, leads, or retries a connect). */
void run_notify_ready(run_notify *n);
/* WATCHDOG=1, when asked for: the server has just answered. */
void run_notify_alive(run_notify *n);
/* STATUS=<fmt...>; the state file says state ("waiting" or "leader"),
 * rewritten only when the state changes. */
void run_notify_status(run_notify *n, const char *state, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The command starts: "leader since TIME, token N", the state file
 * "leader" with the token. */
void run_notify_leader(run_notify *n, int64_t token);

/* ----------------------------------------- semaphores (run_slots*.c) */

/* The most slots one name may have (documented in pglock-run(1)). */
#define RUN_MAX_SLOTS 64

/* A slot watcher's stop (run_slots_wait.c): its client's
 * pglock_options.interrupt_fd, an epoll set readable while its own stop
 * pipe or run_interrupt_fd() is (the library watches one fd, and a
 * watcher must be stoppable alone).  Made at the first wait and never
 * closed: the winner's client keeps its fd after the wait, with its
 * stop pipe drained, so that it then means a stop signal. */
typedef struct run_slot_stop {
    int made; /* 1: pipe and fd made, -1: could not be, 0: not yet */
    int pipe[2];
    int fd;
} run_slot_stop;

/* The slots of a name: slot i is the text key "<KEY_ID>#<i>", the gate
 * "<KEY_ID>#gate", KEY_ID being pglock_key_format() of the name's key.
 * The keys borrow the names here: keep the struct alive while they are
 * used. */
typedef struct run_slots {
    int n;
    char names[RUN_MAX_SLOTS][48];
    pglock_key keys[RUN_MAX_SLOTS];
    char gate_name[48];
    pglock_key gate;
    /* The declarations: decls[m - 1] is the text key "<KEY_ID>#n=<m>",
     * held shared by every user of the name with --slots=m for as long as
     * it uses the name (run_slots_declare()). */
    char decl_names[RUN_MAX_SLOTS][48];
    pglock_key decls[RUN_MAX_SLOTS];
    run_slot_stop stops[RUN_MAX_SLOTS];
    /* a wait's watchers, from the wait until run_slots_wait_end(), or NULL */
    struct run_slot_wait *wait;
} run_slots;

/* N in 1..RUN_MAX_SLOTS from canonical digits, else 0. */
int run_slots_parse(const char *value);
/* A --slots=N option's reader (CLI_OPT_CALL, an int field; run, status
 * and terminate): CLI_GO_ON when valid, else the usage error's exit
 * status (printed). */
cli_step run_slots_option(const char *command, const cli_opt *o,
                          cli_common *target, const char *value);
/* What --slots cannot go with (--shared, several keys): CLI_GO_ON, else
 * 64 (printed). */
cli_step run_slots_check(const run_args *a);
/* The slot keys and the gate of key (a resolved key).  0, or -1 (a key
 * with no format: legacy and unresolved). */
int run_slots_make(run_slots *s, const pglock_key *key, int n);
/* The first M other than except whose declaration list (holders of
 * s->decls) shows granted, or 0. */
int run_slots_in_use(const run_slots *s, const pglock_holders *list,
                     int except);
/* Declares N on client (a shared lock on decls[N - 1], taken unless
 * held), then reads pg_locks for a declaration of another M: the check is
 * race-free because each user's declaration is granted before its own
 * read, so of two first users with different N at least one sees the
 * other.  0 with *in_use = M (0: N is the only one in use), or a PGLOCK_E*
 * code with the message in err. */
int run_slots_declare(pglock_client *client, const run_slots *s, int *in_use,
                      char *err, size_t errlen);
/* Takes a free slot on st->client, waiting as a->timeout_ms says: a try
 * is one statement; a wait queues on the gate, and the head of the queue
 * waits on every slot at once (run_slots_wait.c).  0 with st->slot set
 * and st->client holding that slot (a wait may have replaced st->client);
 * else a PGLOCK_E* code (PGLOCK_EBUSY / PGLOCK_ETIMEDOUT: every slot
 * held), err set, nothing held, st->client open unless the connection
 * was lost.  With --wait=DURATION a lost connection is reopened (key:
 * NAME's, for run_reconnect()) and the slots tried again within the
 * budget, said once on stderr, as run_acquire() does. */
int run_slots_acquire(run_state *st, run_slots *s, pglock_key *key,
                      run_error *err);
/* The wait, once a try found no free slot: deadline (pglock_now_ms(); 0:
 * none).  Same contract. */
int run_slots_wait(run_state *st, run_slots *s, int64_t deadline,
                   run_error *err);
/* After a wait that won a slot: joins the other watchers as they give
 * their connections back (nothing when there are none).  Before any
 * fork. */
void run_slots_wait_end(run_slots *s);

/* ------------------------------------ the run history (run_record.c) */

/* --record and --host-label (fields of run_args), after the shared
 * options in --help. */
extern const cli_opt run_record_opts[];
/* PGLOCK_RECORD: 1, yes, true or on (any case) set a->record; 0, no,
 * false, off or empty do not; anything else is a usage error.  CLI_GO_ON,
 * else the exit status. */
cli_step run_record_env(run_args *a);
/* The host this run names, in its rows and its application_name: the
 * --host-label, else gethostname(); into buf, or NULL when there is none. */
const char *run_host_label(const run_args *a, char *buf, size_t len);
/* Without --record, nothing.  Else before the lock is taken: opens the
 * history's connection and checks that pglock.runs can be written.
 * CLI_GO_ON (a connection not made in time only warns: the job runs
 * unrecorded), or 69 after one line naming `pglock init`. */
cli_step run_record_prepare(run_state *st);
/* After the grant (and the token): the start row, bounded by the client
 * deadline; one warning if it cannot be written in time. */
void run_record_start(run_state *st);
/* When the lock was not taken (rc from pglock_lock()) or the job not
 * started: a "skipped" row for a busy lock (PGLOCK_EBUSY, PGLOCK_ETIMEDOUT;
 * on a history of revision 2 with its reason, busy or timed_out, and its
 * wait), then the history's connection is closed. */
void run_record_not_run(run_state *st, int rc);
/* After the job: its end, exit status `code` and outcome; one warning if
 * it cannot be written.  Then the history's connection is closed. */
void run_record_end(run_state *st, int code);

#endif
