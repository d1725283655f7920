/*
 * Waiting for a slot (`pglock run --slots=N NAME` without --try), with no
 * polling: the server wakes every waiter.
 *
 * No single SQL wait covers N keys, so the waiters queue on the gate key
 * (a plain pg_advisory_lock, which the server grants in turn).  The head
 * of the queue, holding the gate, tries every slot once more (one
 * statement), and if none is free waits on all N slots at once: N
 * watcher threads, each with a connection of its own waiting in
 * pg_advisory_lock() on one slot.  The first one granted wins: its client
 * becomes the run's lock client, the other watchers are interrupted
 * (cancelled on the server; one granted in the same instant closes its
 * connection, which frees its slot), and the gate is released with the
 * gate's connection, letting the next waiter become the head.
 *
 * The cost in connections: a queued waiter 1; the head 1 + N while it
 * waits; a holder 1.  Behind a transaction-mode pooler (--mode=xact) each
 * of them pins a server connection, since each waits or holds inside an
 * open transaction, so the pool must have room for them all.
 *
 * Bounds: the --wait budget (the gate wait has what is left of it, the
 * watchers too, and past it they are stopped); a stop signal interrupts
 * every wait at once (run_interrupt_fd() is in every watcher's interrupt
 * fd).
 * While the head waits, its gate connection is idle: the library's
 * managed hold keeps its lease, so that the server does not end it (that
 * would let a second head in, which costs connections, not safety: the
 * slots alone bound the holders).
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>
#include "cli.h"
#include "run.h"

/* Makes slot i's stop fd (once) and drains its pipe.  0, or -1 (errno). */
static int stop_ready(run_slots *slots, int i)
{
    run_slot_stop *s = &slots->stops[i];
    if (!s->made) {
        struct epoll_event ev = {.events = EPOLLIN};
        s->made = -1;
        if (pipe2(s->pipe, O_CLOEXEC | O_NONBLOCK) < 0)
            return -1;
        s->fd = epoll_create1(EPOLL_CLOEXEC);
        if (s->fd < 0 || epoll_ctl(s->fd, EPOLL_CTL_ADD, s->pipe[0], &ev) < 0 ||
            (run_interrupt_fd() >= 0 &&
             epoll_ctl(s->fd, EPOLL_CTL_ADD, run_interrupt_fd(), &ev) < 0))
            return -1;
        s->made = 1;
    }
    if (s->made < 0)
        return -1;
    char buf[64];
    while (read(s->pipe[0], buf, sizeof buf) > 0)
        ;
    return 0;
}

static void stop_one(const run_slots *slots, int i)
{
    ssize_t wr = write(slots->stops[i].pipe[1], "x", 1);
    (void)wr; /* full: readable already */
}

/* Whether watcher i was stopped (or a stop signal came). */
static int stopped_now(const run_slots *slots, int i)
{
    struct pollfd p = {slots->stops[i].fd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

typedef struct run_slot_wait slot_wait;

typedef struct watcher {
    slot_wait *sw;
    int index;
    pthread_t thread;
    pglock_client *client; /* the winner's, kept; else NULL */
    int rc;
    char error[256];
} watcher;

struct run_slot_wait {
    int started; /* threads to join (run_slots_wait_end()) */
    const run_state *st;
    run_slots *s;
    int64_t deadline; /* 0: none */
    int done_pipe[2]; /* one byte per watcher that ended */
    pthread_mutex_t mu;
    int winner; /* -1 until one is granted */
    int failed; /* the first watcher that failed on its own, -1 */
    watcher w[RUN_MAX_SLOTS];
};

/* Stops every watcher but `except` (-1: all). */
static void stop_watchers(slot_wait *sw, int except)
{
    for (int i = 0; i < sw->s->n; i++)
        if (i != except)
            stop_one(sw->s, i);
}

static long budget_left(int64_t deadline)
{
    if (!deadline)
        return PGLOCK_WAIT_FOREVER;
    int64_t left = deadline - pglock_now_ms();
    return left > 0 ? (long)left : PGLOCK_TRY;
}

/* Whether rc ends a watcher for a reason of its own (it could not connect,
 * lost its connection, ...), not because it was stopped or ran out. */
static int failed_on_its_own(int rc)
{
    return rc != 0 && rc != PGLOCK_EINTR && rc != PGLOCK_ETIMEDOUT &&
           rc != PGLOCK_EBUSY;
}

/* One watcher: a connection of its own waiting on slot `index`. */
static void *watch(void *arg)
{
    watcher *me = arg;
    slot_wait *sw = me->sw;
    pglock_client *c = NULL;
    /* Setup has the wait's budget (forever without one), not the default
     * connect_timeout: through a full pooler its first query waits for a
     * server connection, which a holder's end frees; its stop fd ends it
     * sooner. */
    long left = budget_left(sw->deadline);
    int rc = run_open_client(sw->st, left == PGLOCK_TRY ? 1 : left,
                             sw->s->stops[me->index].fd, &c);
    if (rc == 0)
        rc = stopped_now(sw->s, me->index)
                 ? PGLOCK_EINTR
                 : pglock_lock(c, &sw->s->keys[me->index], PGLOCK_EXCLUSIVE,
                               budget_left(sw->deadline));
    int won = 0;
    if (c && rc != 0)
        snprintf(me->error, sizeof me->error, "%s", pglock_client_error(c));
    pthread_mutex_lock(&sw->mu);
    me->rc = rc;
    if (rc == 0 && sw->winner < 0) {
        /* all settled before the main thread can see the winner */
        me->client = c;
        stop_watchers(sw, me->index);
        sw->winner = me->index;
        won = 1;
    } else if (failed_on_its_own(rc) && sw->failed < 0) {
        sw->failed = me->index;
    }
    pthread_mutex_unlock(&sw->mu);
    /* a loser granted in the same instant gives its slot back here */
    if (!won)
        pglock_client_close(c);
    ssize_t wr = write(sw->done_pipe[1], "x", 1);
    (void)wr;
    return NULL;
}

static int winner_of(slot_wait *sw)
{
    pthread_mutex_lock(&sw->mu);
    int w = sw->winner;
    pthread_mutex_unlock(&sw->mu);
    return w;
}

static int failed_of(slot_wait *sw)
{
    pthread_mutex_lock(&sw->mu);
    int f = sw->failed;
    pthread_mutex_unlock(&sw->mu);
    return f;
}

/*
 * The gate's lease while the head waits, kept by the library's managed
 * hold in loop mode, the lease engine of the job's lock too: its steps
 * never block, so a winner is seen at once, and a heartbeat cancelled on
 * the server is sent again.  The gate only orders the waiters, so a lost
 * gate is no loss: it is said (-v) and left to the server's lease, which
 * lets a second head in (it costs connections, not safety).  NULL when
 * the hold could not start: the gate is then left to the lease too.
 */
static pglock_hold *gate_hold_start(run_state *st)
{
    pglock_hold_options o;
    pglock_hold_options_init(&o, PGLOCK_HOLD_OPTIONS_VERSION);
    o.drive = PGLOCK_HOLD_LOOP;
    pglock_hold *h = NULL;
    if (pglock_hold_start(&h, st->client, &o) != 0) {
        cli_verbose("the gate's connection: %s",
                    pglock_client_error(st->client));
        return NULL;
    }
    return h;
}

/* Ends the gate's hold before the gate is given back (with its
 * connection, or unlocked): a hold that lost its lease drops the
 * connection, and the gate with it. */
static void gate_hold_stop(run_state *st, pglock_hold *h)
{
    if (h && pglock_hold_stop(h) != 0)
        cli_verbose("the gate's connection: %s",
                    pglock_client_error(st->client));
}

/* poll()'s timeout from now until `until` (INT64_MAX: none). */
static int poll_timeout(int64_t now, int64_t until)
{
    if (until == INT64_MAX)
        return -1;
    if (until <= now)
        return 0;
    return until - now < INT_MAX ? (int)(until - now) : INT_MAX;
}

/* Waits until a watcher wins or every started one has ended, keeping
 * the gate's lease, and stopping the watchers at the deadline or as soon
 * as one fails on its own: its slot is no longer watched, so waiting on
 * would hold the gate, and the queue, for slots that may never free while
 * that one is free. */
static void await_watchers(run_state *st, slot_wait *sw, int started)
{
    int ended = 0, stopped = 0;
    pglock_hold *gate = gate_hold_start(st);
    run_drive d = run_drive_start(gate);
    while (ended < started && winner_of(sw) < 0) {
        int64_t now = pglock_now_ms();
        if (run_drive_step(&d, now) == RUN_STEP_LOST)
            cli_verbose("the gate's connection: %s", pglock_hold_error(gate));
        int64_t until = run_drive_due(&d);
        if (sw->deadline && !stopped && sw->deadline < until)
            until = sw->deadline;
        struct pollfd p[2] = {{sw->done_pipe[0], POLLIN, 0},
                              {run_drive_fd(&d), POLLIN, 0}};
        int n = poll(p, 2, poll_timeout(now, until));
        if (n > 0 && (p[1].revents & (POLLIN | POLLERR | POLLHUP)))
            run_drive_heard(&d); /* the server spoke: step now */
        if (n > 0 && (p[0].revents & POLLIN)) {
            char buf[RUN_MAX_SLOTS];
            ssize_t r = read(sw->done_pipe[0], buf, sizeof buf);
            if (r > 0)
                ended += (int)r;
            if (!stopped && failed_of(sw) >= 0) {
                stop_watchers(sw, -1);
                stopped = 1;
            }
        }
        if (sw->deadline && !stopped && pglock_now_ms() >= sw->deadline) {
            stop_watchers(sw, -1); /* the budget is spent */
            stopped = 1;
        }
    }
    gate_hold_stop(st, gate);
}

static void join_watchers(slot_wait *sw)
{
    for (int i = 0; i < sw->started; i++)
        pthread_join(sw->w[i].thread, NULL);
    sw->started = 0;
}

void run_slots_wait_end(run_slots *s)
{
    slot_wait *sw = s->wait;
    if (!sw)
        return;
    join_watchers(sw);
    pthread_mutex_destroy(&sw->mu);
    close(sw->done_pipe[0]);
    close(sw->done_pipe[1]);
    free(sw);
    s->wait = NULL;
}

/* The failure of a wait no watcher won, once all are joined, with err
 * set; *own = 1 when it is a watcher's own (not a stop, not the budget's
 * end). */
static int why_none(slot_wait *sw, run_error *err, int *own)
{
    if (run_stop_signal())
        return run_error_set(err, PGLOCK_EINTR, "interrupted");
    /* a watcher failed on its own (could not connect, ...): say why, even
     * when the budget ran out while the others stopped */
    int i = sw->failed;
    if (i >= 0) {
        *own = 1;
        return run_error_set(err, sw->w[i].rc, "could not wait for slot %d: %s",
                             i, sw->w[i].error);
    }
    return run_error_set(err, PGLOCK_ETIMEDOUT,
                         "every slot still held after the wait");
}

/* Starts the watchers and waits for the first grant.  0 with the winner
 * in sw->winner (its client in sw->w[winner].client; the others may still
 * be finishing), else a code with err set (every watcher joined), *own =
 * 1 when the failure is the wait's own (a watcher's, a thread's). */
static int watch_slots(run_state *st, slot_wait *sw, run_error *err, int *own)
{
    int rc = 0;
    for (int i = 0; i < sw->s->n; i++)
        if (stop_ready(sw->s, i) < 0) {
            *own = 1;
            return run_error_set(err, PGLOCK_ENOMEM,
                                 "could not make the stop fd of slot %d's "
                                 "watcher: %s",
                                 i, strerror(errno));
        }
    /* The watchers start with every signal blocked, so that the handlers
     * run on this thread; they hear of a stop signal through
     * run_interrupt_fd(), which is in their stop fds. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    for (int i = 0; i < sw->s->n; i++) {
        sw->w[i] = (watcher){.sw = sw, .index = i, .rc = PGLOCK_EINTR};
        if (pthread_create(&sw->w[i].thread, NULL, watch, &sw->w[i]) != 0) {
            stop_watchers(sw, -1);
            *own = 1;
            rc = run_error_set(err, PGLOCK_ENOMEM,
                               "could not start a thread to watch slot %d", i);
            break;
        }
        sw->started++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    await_watchers(st, sw, sw->started);
    if (winner_of(sw) >= 0)
        return 0;
    join_watchers(sw);
    rc = rc ? rc : why_none(sw, err, own);
    run_slots_wait_end(sw->s);
    return rc;
}

/* The head of the queue, holding the gate: a slot, or wait on all.  0,
 * else a code with err set, *own = 1 when the failure is the wait's own
 * (not the gate connection's answer). */
static int as_head(run_state *st, run_slots *s, int64_t deadline,
                   run_error *err, int *own)
{
    /* With --mode=xact a slot taken here would stay in the gate's transaction,
     * and the gate with it, for the whole job (a transaction lock goes
     * only with its transaction): the watchers try instead, and one
     * granted at once wins. */
    int xact = pglock_client_lifetime(st->client) == PGLOCK_LIFETIME_XACT;
    int rc = xact ? PGLOCK_EBUSY
                  : pglock_lock_any(st->client, s->keys, s->n, PGLOCK_EXCLUSIVE,
                                    &st->slot);
    if (rc != PGLOCK_EBUSY)
        return rc < 0 ? run_error_of(err, rc, st->client) : rc;
    cli_verbose("every slot is held: waiting on all %d", s->n);
    /* s owns the wait until run_slots_wait_end(): the losers may still be
     * finishing (cancel, close) while the gate is given back */
    slot_wait *sw = calloc(1, sizeof *sw);
    if (!sw || pipe(sw->done_pipe) < 0) {
        run_error_set(err, PGLOCK_ENOMEM, "could not create a pipe: %s",
                      sw ? strerror(errno) : "out of memory");
        free(sw);
        *own = 1;
        return PGLOCK_ENOMEM;
    }
    sw->st = st;
    sw->deadline = deadline;
    sw->winner = -1;
    sw->failed = -1;
    pthread_mutex_init(&sw->mu, NULL);
    sw->s = s;
    s->wait = sw;
    rc = watch_slots(st, sw, err, own);
    if (rc == 0) {
        /* The winner declares N before the gate's connection, which
         * declares it now, goes: no instant without a declaration, when
         * a user of another N would see none. */
        pglock_client *won = sw->w[sw->winner].client;
        /* its interrupt fd from now on means only a stop signal (a stop
         * at the deadline may have written its pipe: the slot is won all
         * the same) */
        stop_ready(s, sw->winner);
        rc = pglock_lock(won, &s->decls[s->n - 1], PGLOCK_SHARED, PGLOCK_TRY);
        if (rc < 0) {
            run_error_set(err, rc,
                          "could not declare --slots=%d on slot %d's "
                          "connection: %s",
                          s->n, sw->winner, pglock_client_error(won));
            *own = 1;
            pglock_client_close(won);
            sw->w[sw->winner].client = NULL;
            run_slots_wait_end(s);
            return rc;
        }
        /* the winner's connection holds the slot; the gate's goes, and
         * the gate with it */
        pglock_client_close(st->client);
        st->client = won;
        st->slot = sw->winner;
    }
    return rc;
}

int run_slots_wait(run_state *st, run_slots *s, int64_t deadline,
                   run_error *err)
{
    cli_verbose("queueing on the gate of \"%s\"", st->key_label);
    int rc = pglock_lock(st->client, &s->gate, PGLOCK_EXCLUSIVE,
                         budget_left(deadline));
    if (rc == PGLOCK_EBUSY)
        rc = PGLOCK_ETIMEDOUT; /* the budget ran out: a wait's end */
    if (rc < 0)
        return run_error_of(err, rc, st->client);
    int own = 0;
    rc = as_head(st, s, deadline, err, &own);
    if (rc < 0 && own) {
        /* the wait's own failure (err says why): the gate goes with its
         * connection */
        run_client_drop(st);
    } else if (pglock_lock_count(st->client, &s->gate, PGLOCK_EXCLUSIVE)) {
        /* a slot taken by the head's own try, or none: let the next in.
         * With --mode=xact the client holds only the gate here (as_head), so
         * the unlock ends its transaction. */
        int urc = pglock_unlock(st->client, &s->gate, PGLOCK_EXCLUSIVE);
        if (urc != 0 && rc == 0) {
            /* the job would hold the gate, and the whole queue, while it
             * runs: give the slot back with the connection; no job ran */
            rc = run_error_set(err, urc < 0 ? urc : PGLOCK_ESERVER,
                               "could not give the gate back: %s",
                               pglock_client_error(st->client));
            run_client_drop(st);
        }
    }
    return rc;
}
