/*
 * The managed hold: a client's lease kept alive by heartbeats, on a thread
 * of its own or from the caller's event loop, and a loss told at once
 * (a readable fd, then a callback).  The lease arithmetic is
 * lease_rules.h's: heartbeat every T_s/6, client deadline T_c = 2*T_s/3
 * after the last confirmed heartbeat was sent.
 *
 * The lock's connection is closed only once the caller says the work has
 * stopped (pglock_hold_stop(), or closing the client), or by the server
 * at the lease's end: a loss the client declares (no confirmation by T_c)
 * is told while the lock may still be held, and the caller has until the
 * server's lease ends to stop.  A heartbeat statement that fails on a
 * session that goes on (a cancel) is no loss: it is sent again at once,
 * and only T_c decides.
 */
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "lease_rules.h"

struct pglock_hold {
    pglock_client *c; /* the hold's while it runs */
    pglock_hold_options opts;
    long lease_ms;     /* T_s: the client's lease, else dead_peer_ms */
    long heartbeat_ms; /* T_s / 6 */
    long deadline_ms;  /* T_c = 2 T_s / 3 */
    long budget_ms;    /* the caller's stop budget after a notice */
    int64_t next_beat; /* when the next heartbeat is due */
    int failures;      /* heartbeats in a row failed on a live session */
    int proved;        /* pglock_hold_confirm() proved it, no step since */
    int64_t proved_at; /* when */
    int loss_pipe[2];  /* [0] the caller's loss fd; [1] written once */
    int wake_pipe[2];  /* thread mode: stop wakes the thread */
    pthread_t thread;
    int has_thread;
    int pid;            /* the process whose hold it is (not a fork's) */
    pthread_mutex_t mu; /* guards stopping, code and message */
    int stopping;
    int64_t until; /* confirmed until: the last confirmed
                               heartbeat's send + T_c */
    int code;      /* 0 while held, else the loss code */
    char message[512];
    /* who asked the work to stop (stop requests), once an allowed role
     * did: written once, under the mutex, then fixed */
    char request[256];
};

/* ------------------------------------------------------------ options */

/* The bytes of the options a version has: a program built against an
 * older header passes a smaller struct. */
static size_t hold_options_size(unsigned int version)
{
    switch (version) {
    case 1:
        return offsetof(pglock_hold_options, stop_budget_ms);
    case 2:
        return offsetof(pglock_hold_options, watch_stop_requests);
    case 3:
        return sizeof(pglock_hold_options);
    default:
        return 0;
    }
}

int pglock_hold_options_init(pglock_hold_options *opts, unsigned int version)
{
    size_t size = hold_options_size(version);
    if (!opts || size == 0)
        return PGLOCK_EINVAL;
    memset(opts, 0, size);
    opts->version = version;
    opts->drive = PGLOCK_HOLD_THREAD;
    return PGLOCK_OK;
}

/* ------------------------------------------------------------ the loss */

/* Records the loss (first one wins), makes the loss fd readable, then
 * calls on_lost, outside the lock, so that it may ask pglock_hold_loss().
 * The connection is left as it is: a client-side loss keeps it open (the
 * lock may still be held, and the work may still run), and only
 * pglock_hold_stop() closes it.  notify: 0 when stop itself found the
 * loss (it returns the code instead). */
static int declare_lost(pglock_hold *h, const char *why, int notify)
{
    pthread_mutex_lock(&h->mu);
    int first = h->code == 0;
    if (first) {
        h->code = PGLOCK_ECONNLOST;
        snprintf(h->message, sizeof h->message, "%s",
                 *why ? why : "the lock connection was lost");
        ssize_t n = write(h->loss_pipe[1], "x", 1);
        (void)n; /* a non-blocking pipe of one byte cannot be full */
    }
    pthread_mutex_unlock(&h->mu);
    if (first && notify && h->opts.on_lost)
        h->opts.on_lost(h->opts.arg, PGLOCK_ECONNLOST, h->message);
    return PGLOCK_ECONNLOST;
}

/* The client's last confirmation moved (or the hold starts): "confirmed
 * until" follows, under the mutex, since any thread may ask. */
static void note_confirmed(pglock_hold *h)
{
    int64_t until = lease_confirmed_until(h->c->confirmed_at, h->deadline_ms);
    pthread_mutex_lock(&h->mu);
    h->until = until;
    pthread_mutex_unlock(&h->mu);
}

/* A stop request by an allowed role, seen by the last heartbeat, is
 * told from here on (the first one). */
static void note_request(pglock_hold *h)
{
    if (!h->c->stop_request[0] || h->request[0])
        return;
    pthread_mutex_lock(&h->mu);
    snprintf(h->request, sizeof h->request, "%s", h->c->stop_request);
    pthread_mutex_unlock(&h->mu);
}

const char *pglock_hold_stop_request(const pglock_hold *hold)
{
    if (!hold)
        return NULL;
    pglock_hold *h = (pglock_hold *)hold; /* the mutex, not the state */
    pthread_mutex_lock(&h->mu);
    int seen = h->request[0] != '\0';
    pthread_mutex_unlock(&h->mu);
    return seen ? hold->request : NULL;
}

int64_t pglock_hold_deadline(const pglock_hold *hold)
{
    if (!hold)
        return 0;
    pglock_hold *h = (pglock_hold *)hold; /* the mutex, not the state */
    pthread_mutex_lock(&h->mu);
    int64_t until = h->until;
    pthread_mutex_unlock(&h->mu);
    return until;
}

int64_t pglock_hold_stop_by(const pglock_hold *hold)
{
    return hold ? lease_stop_by(pglock_hold_deadline(hold), hold->budget_ms)
                : 0;
}

static int loss_code(pglock_hold *h)
{
    pthread_mutex_lock(&h->mu);
    int code = h->code;
    pthread_mutex_unlock(&h->mu);
    return code;
}

/* A forked child's copy of the hold: its thread, its client's session and
 * its loss pipe are the parent's, so it must not step, write or join. */
static int forked(const pglock_hold *h)
{
    return h->pid != (int)getpid();
}

/* --------------------------------------------------------- one step */

/* Reads what the server sent while no heartbeat was in flight: nothing
 * normally, but a terminated backend's last words and the socket's close
 * (pg_terminate_backend, a restart) show up here at once.  0 or -1. */
static int read_idle(pglock_client *c)
{
    if (!PQconsumeInput(c->conn) || PQstatus(c->conn) != CONNECTION_OK) {
        char line[400];
        pglock__first_line(line, sizeof line, PQerrorMessage(c->conn));
        pglock__fail(c, PGLOCK_ECONNLOST, "the lock connection was closed: %s",
                     *line ? line : "by the server");
        return -1;
    }
    return 0;
}

/* Does what is due and says when to come back (*timeout_ms).  0 while
 * the lease holds, else the loss code (after the notice). */
static int advance(pglock_hold *h, long *timeout_ms)
{
    pglock_client *c = h->c;
    *timeout_ms = -1;
    int code = loss_code(h);
    if (code)
        return code;
    if (!c->conn)
        return declare_lost(h, c->message, 1);
    if (c->heartbeat_busy) {
        int rc = pglock__heartbeat_poll(c);
        if (rc == 0) {
            /* a stop request seen: who asks is the next heartbeat's, now */
            h->next_beat = c->stop_seen
                               ? pglock_now_ms()
                               : c->heartbeat_sent_at + h->heartbeat_ms;
            h->failures = 0;
            note_confirmed(h);
            note_request(h);
        } else if (rc == PGLOCK_ESERVER) {
            /* not confirmed: again at once, paced if it persists */
            h->failures++;
            h->next_beat = pglock_now_ms() +
                           lease_retry_ms(h->lease_ms, h->failures);
        } else if (rc != PGLOCK_EAGAIN)
            return declare_lost(h, c->message, 1);
    } else if (read_idle(c) != 0)
        return declare_lost(h, c->message, 1);

    int64_t now = pglock_now_ms();
    int64_t deadline = pglock_hold_deadline(h);
    if (now >= deadline) {
        pglock__fail(c, PGLOCK_ECONNLOST,
                     "the lease could not be confirmed within %ld ms (the "
                     "client deadline of a %ld ms lease): the lock may be "
                     "lost, stop the work within %ld ms",
                     h->deadline_ms, h->lease_ms, h->budget_ms);
        return declare_lost(h, c->message, 1);
    }
    if (!c->heartbeat_busy && now >= h->next_beat) {
        int rc = pglock__heartbeat_send(c);
        if (rc == PGLOCK_ESERVER) /* the session goes on: retry later */
            h->next_beat = now + lease_retry_ms(h->lease_ms, 2);
        else if (rc != 0)
            return declare_lost(h, c->message, 1);
    }
    int64_t next = deadline;
    if (!c->heartbeat_busy && h->next_beat < next)
        next = h->next_beat;
    *timeout_ms = (long)(next - now);
    return 0;
}

/* ------------------------------------------------------ thread mode */

static int stopping(pglock_hold *h)
{
    pthread_mutex_lock(&h->mu);
    int s = h->stopping;
    pthread_mutex_unlock(&h->mu);
    return s;
}

static void *hold_main(void *arg)
{
    pglock_hold *h = arg;
    long t;
    while (!stopping(h) && advance(h, &t) == 0) {
        struct pollfd fds[2] = {{.fd = PQsocket(h->c->conn), .events = POLLIN},
                                {.fd = h->wake_pipe[0], .events = POLLIN}};
        poll(fds, 2, t > INT_MAX ? INT_MAX : (int)t);
    }
    return NULL;
}

/* ------------------------------------------------------------ start */

static int pipe_nonblocking(int p[2])
{
    if (pipe(p) != 0)
        return -1;
    for (int i = 0; i < 2; i++) {
        fcntl(p[i], F_SETFD, FD_CLOEXEC);
        fcntl(p[i], F_SETFL, fcntl(p[i], F_GETFL) | O_NONBLOCK);
    }
    return 0;
}

static void close_pipe(int p[2])
{
    for (int i = 0; i < 2; i++)
        if (p[i] >= 0)
            close(p[i]);
    p[0] = p[1] = -1;
}

static void hold_free(pglock_hold *h)
{
    close_pipe(h->loss_pipe);
    close_pipe(h->wake_pipe);
    pthread_mutex_destroy(&h->mu);
    free(h);
}

/* The thread blocks every signal: the caller's handlers stay on the
 * caller's threads. */
static int thread_start(pglock_hold *h)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&h->thread, NULL, hold_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    h->has_thread = rc == 0;
    return rc;
}

static int check_start(pglock_client *c, const pglock_hold_options *opts)
{
    if (opts && hold_options_size(opts->version) == 0)
        return pglock__fail(
            c, PGLOCK_EINVAL,
            "invalid hold options: version %u is not one this library knows"
            " (1 to %u); call pglock_hold_options_init(&opts, "
            "PGLOCK_HOLD_OPTIONS_VERSION) first",
            opts->version, (unsigned)PGLOCK_HOLD_OPTIONS_VERSION);
    if (opts && opts->drive != PGLOCK_HOLD_THREAD &&
        opts->drive != PGLOCK_HOLD_LOOP)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid hold drive %d",
                            (int)opts->drive);
    long ts = lease_of(c->opts.lease_ms, c->opts.dead_peer_ms);
    if (opts && opts->version >= 2 &&
        (opts->stop_budget_ms < 0 ||
         opts->stop_budget_ms > lease_stop_budget_max_ms(ts)))
        return pglock__fail(c, PGLOCK_EINVAL,
                            "invalid hold stop budget %ld ms: more than half "
                            "the lease (%ld ms)",
                            opts->stop_budget_ms, ts);
    int rc = pglock__client_ready(c);
    if (rc)
        return rc == PGLOCK_ECONNLOST ? PGLOCK_ESTATE : rc;
    if (c->nlocks == 0)
        return pglock__fail(c, PGLOCK_ESTATE,
                            "the client holds no lock: take the locks, then "
                            "start the hold");
    return 0;
}

int pglock_hold_start(pglock_hold **out, pglock_client *c,
                      const pglock_hold_options *opts)
{
    if (!out || !c)
        return PGLOCK_EINVAL;
    *out = NULL;
    /* A hold runs on it already: the client (its message too) is that
     * hold's, so nothing of it is touched; a second hold would share its
     * connection with the first one's thread. */
    if (c->hold_running)
        return PGLOCK_ESTATE;
    int rc = check_start(c, opts);
    if (rc)
        return rc;
    pglock_hold *h = calloc(1, sizeof *h);
    if (!h)
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    h->loss_pipe[0] = h->loss_pipe[1] = h->wake_pipe[0] = h->wake_pipe[1] = -1;
    pthread_mutex_init(&h->mu, NULL);
    h->c = c;
    /* The fields of the caller's version, the later ones at their
     * defaults. */
    pglock_hold_options_init(&h->opts, PGLOCK_HOLD_OPTIONS_VERSION);
    if (opts)
        memcpy(&h->opts, opts, hold_options_size(opts->version));
    h->opts.version = PGLOCK_HOLD_OPTIONS_VERSION;
    long lease = lease_of(c->opts.lease_ms, c->opts.dead_peer_ms);
    long stop = h->opts.stop_budget_ms;
    h->lease_ms = lease;
    h->heartbeat_ms = lease_heartbeat_for(lease, stop);
    h->deadline_ms = lease_client_deadline_for(lease, stop);
    h->budget_ms = lease_stop_budget_for(lease, stop);
    h->next_beat = c->confirmed_at + h->heartbeat_ms;
    note_confirmed(h);
    c->stop_request[0] = '\0';
    if (h->opts.watch_stop_requests && pglock__stop_watch_begin(c) != 0) {
        hold_free(h);
        return PGLOCK_ENOMEM;
    }
    int thread = h->opts.drive == PGLOCK_HOLD_THREAD;
    if (pipe_nonblocking(h->loss_pipe) != 0 ||
        (thread && pipe_nonblocking(h->wake_pipe) != 0)) {
        pglock__stop_watch_end(c);
        hold_free(h);
        return pglock__fail(c, PGLOCK_ENOMEM, "could not create a pipe");
    }
    if (thread && thread_start(h) != 0) {
        pglock__stop_watch_end(c);
        hold_free(h);
        return pglock__fail(c, PGLOCK_ENOMEM, "could not start a thread");
    }
    h->pid = (int)getpid();
    c->hold_running = 1;
    c->hold = h;
    *out = h;
    return 0;
}

/* ------------------------------------------------------ the caller's */

int pglock_hold_loss_fd(const pglock_hold *h)
{
    return h ? h->loss_pipe[0] : -1;
}

int pglock_hold_loss(const pglock_hold *hold)
{
    if (!hold)
        return PGLOCK_EINVAL;
    return loss_code((pglock_hold *)hold); /* the mutex, not the state */
}

const char *pglock_hold_error(const pglock_hold *hold)
{
    /* The message is written once, with the code, under the mutex, and
     * never again: once the code is seen, it can be read unlocked. */
    if (!hold || pglock_hold_loss(hold) == 0)
        return "";
    return hold->message;
}

int pglock_hold_fd(const pglock_hold *h)
{
    /* Once lost, the socket stays open until stop, but there is nothing
     * more to read: a caller's poll must not spin on it. */
    if (!h || h->opts.drive != PGLOCK_HOLD_LOOP || !h->c->conn ||
        pglock_hold_loss(h) != 0)
        return -1;
    return PQsocket(h->c->conn);
}

int pglock_hold_step(pglock_hold *h, long *timeout_ms)
{
    long t;
    if (!h)
        return PGLOCK_EINVAL;
    if (h->opts.drive != PGLOCK_HOLD_LOOP || forked(h))
        return PGLOCK_ESTATE;
    h->proved = 0;
    int rc = advance(h, &t);
    if (timeout_ms)
        *timeout_ms = t;
    return rc;
}

/* ------------------------------------------------------ confirmation */

/* Proves the lease within bound_ms: a heartbeat sent after this call
 * (after the one in flight, whose answer is read first) is answered by
 * the same session.  One that fails on a session that goes on (a cancel)
 * is sent again, at once, then paced while the error persists; T_c plays
 * no part (a late answer on the same session still proves the locks were
 * held throughout).  release: that heartbeat is the release of every
 * lock (pglock__release_send()).  0, or PGLOCK_ECONNLOST with the
 * client's message set; the loss is not declared here. */
static int prove(pglock_hold *h, long bound_ms, const char *when, int release)
{
    pglock_client *c = h->c;
    int64_t deadline = pglock_now_ms() + (bound_ms > 0 ? bound_ms : 0);
    int sent = 0; /* this call's heartbeat is the one in flight */
    int failures = 0;
    int64_t next_send = 0;
    for (;;) {
        if (!c->conn)
            return PGLOCK_ECONNLOST;
        int64_t now = pglock_now_ms();
        if (!c->heartbeat_busy && now >= next_send) {
            int rc = release ? pglock__release_send(c)
                             : pglock__heartbeat_send(c);
            if (rc == PGLOCK_ESERVER)
                next_send = now + lease_retry_ms(h->lease_ms, ++failures + 1);
            else if (rc != 0)
                return PGLOCK_ECONNLOST;
            else
                sent = 1;
        }
        if (now >= deadline)
            return pglock__fail(c, PGLOCK_ECONNLOST,
                                "the lease could not be confirmed %s: no "
                                "answer within %ld ms",
                                when, bound_ms);
        int64_t until = c->heartbeat_busy || next_send > deadline ? deadline
                                                                  : next_send;
        struct pollfd p = {.fd = c->heartbeat_busy ? PQsocket(c->conn) : -1,
                           .events = POLLIN};
        long wait = (long)(until - now);
        poll(&p, 1, wait > INT_MAX ? INT_MAX : (int)wait);
        if (!c->heartbeat_busy)
            continue;
        int rc = pglock__heartbeat_poll(c);
        if (rc == 0 && sent)
            return 0;
        if (rc == PGLOCK_ESERVER) {
            /* not confirmed: again at once, paced if it persists */
            next_send = pglock_now_ms() +
                        lease_retry_ms(h->lease_ms, ++failures);
            sent = 0;
        } else if (rc != 0 && rc != PGLOCK_EAGAIN)
            return PGLOCK_ECONNLOST;
    }
}

int pglock_hold_confirm(pglock_hold *h, long timeout_ms)
{
    if (!h || timeout_ms < 0)
        return PGLOCK_EINVAL;
    if (timeout_ms > INT_MAX)
        timeout_ms = INT_MAX; /* 24 days: no overflow in the deadline */
    if (h->opts.drive != PGLOCK_HOLD_LOOP || forked(h))
        return PGLOCK_ESTATE;
    int code = loss_code(h);
    if (code)
        return code;
    if (prove(h, timeout_ms, "when asked", 0) != 0)
        return declare_lost(h, h->c->message, 1);
    h->failures = 0;
    h->next_beat = h->c->confirmed_at + h->heartbeat_ms;
    note_confirmed(h);
    h->proved = 1;
    h->proved_at = pglock_now_ms();
    return 0;
}

/* Whether a confirmation just made is still the last word at stop: no
 * step since, less than a heartbeat interval ago, and nothing from the
 * server since (a terminated backend's FATAL, a closed socket), which a
 * read that does not wait finds. */
static int proved_just_now(pglock_hold *h)
{
    pglock_client *c = h->c;
    if (!h->proved || pglock_now_ms() - h->proved_at >= h->heartbeat_ms ||
        !c->conn || c->heartbeat_busy || read_idle(c) != 0 || PQisBusy(c->conn))
        return 0;
    PGresult *stray = PQgetResult(c->conn); /* an error sent since */
    int quiet = stray == NULL;
    PQclear(stray);
    return quiet;
}

/* ------------------------------------------------------------- stop */

/* Thread mode: the thread has exited when this returns. */
static void thread_stop(pglock_hold *h)
{
    if (!h->has_thread)
        return;
    pthread_mutex_lock(&h->mu);
    h->stopping = 1;
    pthread_mutex_unlock(&h->mu);
    ssize_t n = write(h->wake_pipe[1], "x", 1);
    (void)n;
    pthread_join(h->thread, NULL);
    h->has_thread = 0;
}

void pglock__hold_client_closing(pglock_hold *h)
{
    thread_stop(h);
    declare_lost(h,
                 "the client was closed while the hold ran, which "
                 "released its locks",
                 1);
}

/* The caller has stopped the work: a lease that holds gives the client
 * back, with its locks or (release) with every lock released by the
 * last word itself; a lost one (or one that cannot be confirmed now)
 * closes the connection, which frees whatever it still held. */
static int hold_end(pglock_hold *h, int release, long bound_ms)
{
    if (forked(h)) {
        /* A child's copy: the thread, the client and the session are the
         * parent's; only this process's copies of the pipes go. */
        close_pipe(h->loss_pipe);
        close_pipe(h->wake_pipe);
        free(h);
        return PGLOCK_ESTATE;
    }
    thread_stop(h);
    pglock_client *c = h->c;
    c->hold_running = 0;
    c->hold = NULL;
    int rc = loss_code(h);
    /* The last word: a heartbeat sent now, answered within bound_ms,
     * proves the same session held the locks all along; no answer in
     * time gives the connection up.  A confirmation the caller asked for
     * just now, with no step since, is that word already, unless the
     * release must travel (it is the last word then). */
    if (rc == 0) {
        int proved = release ? prove(h, bound_ms,
                                     "when the locks were "
                                     "released",
                                     1)
                     : proved_just_now(h)
                         ? 0
                         : prove(h, bound_ms, "when the hold stopped", 0);
        if (proved != 0)
            rc = declare_lost(h, h->c->message, 0);
    }
    if (rc != 0) {
        pglock__client_drop(h->c);
        pglock__fail(h->c, rc, "%s", h->message);
    }
    pglock__stop_watch_end(c);
    hold_free(h);
    if (c->closed)
        pglock__client_free(c); /* closed while the hold ran */
    return rc;
}

int pglock_hold_stop(pglock_hold *h)
{
    if (!h)
        return 0;
    /* A forked child's copy may outlive its client's copy: no bound read */
    return hold_end(h, 0, forked(h) ? 0 : h->c->opts.cancel_timeout_ms);
}

/* The release's own answer is the last word: one round trip where stop
 * and close take two. */
int pglock_hold_release(pglock_hold *h, long timeout_ms)
{
    if (!h || timeout_ms < 0)
        return PGLOCK_EINVAL;
    return hold_end(h, 1, timeout_ms > INT_MAX ? INT_MAX : timeout_ms);
}
