/*
 * Waiting for a query's answer with a deadline and an interrupt, and
 * cancelling it on the server without ever hanging the caller.
 *
 * libpq 15's PQcancel() is blocking (it connects to the server, sends the
 * request and waits for the server to close the cancel connection, with
 * no timeout), so it runs in a thread of its own; the thread never
 * outlives the wait that started it.  A cancel not finished by its
 * deadline is ended (pthread_cancel(): connect(), send() and recv() are
 * cancellation points) and joined before the wait returns, so the library
 * keeps no thread and no state behind a call.  The thread works on a
 * private copy of the descriptor table, so that the cancel's socket,
 * which PQcancel() closes only when it returns, is closed with the
 * thread when it is ended midway.  The price, documented in pglock(3):
 * a descriptor another thread closes while a cancel runs (at most the
 * cancel timeout) is released only when the cancel ends.
 */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h> /* unshare(): _GNU_SOURCE, as the build defines */
#include <signal.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include "bounded_conn.h"
#include "error_text.h"

typedef struct cancel_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    PGcancel *cancel;
    pthread_t thread;
    int done;
} cancel_job;

static void *cancel_main(void *arg)
{
    cancel_job *j = arg;
    char errbuf[256];
    /* If the table cannot be made private, a cancel ended midway leaves
     * its socket open: one descriptor, and the cancel is still sent. */
    (void)unshare(CLONE_FILES);
    /* Its outcome does not matter here: the waiter watches the query's
     * answer, and gives up on the connection if none comes in time. */
    (void)PQcancel(j->cancel, errbuf, (int)sizeof errbuf);
    pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
    pthread_mutex_lock(&j->mu);
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
    return NULL;
}

static void job_free(cancel_job *j)
{
    PQfreeCancel(j->cancel);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

/* Starts a cancel of conn's running query; NULL if that is impossible. */
static cancel_job *cancel_start(PGconn *conn)
{
    cancel_job *j = calloc(1, sizeof *j);
    if (!j)
        return NULL;
    j->cancel = PQgetCancel(conn);
    if (!j->cancel) {
        free(j);
        return NULL;
    }
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&j->cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_mutex_init(&j->mu, NULL);

    /* The thread blocks every signal, so that the caller's handlers (the
     * ones that write opts.interrupt_fd) keep running on the caller's
     * thread. */
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    int rc = pthread_create(&j->thread, NULL, cancel_main, j);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (rc != 0) {
        job_free(j);
        return NULL;
    }
    return j;
}

/* Waits until the cancel thread has finished or the deadline passes (-1:
 * at once), ends it if it has not, joins it and frees the job; returns
 * whether PQcancel() had returned. */
static int cancel_end(cancel_job *j, int64_t deadline)
{
    int64_t left = deadline - pglock_now_ms();
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    if (left < 0)
        left = 0;
    ts.tv_sec += left / 1000;
    ts.tv_nsec += (left % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&j->mu);
    while (!j->done)
        if (pthread_cond_timedwait(&j->cv, &j->mu, &ts) == ETIMEDOUT)
            break;
    int done = j->done;
    pthread_mutex_unlock(&j->mu);
    if (!done)
        pthread_cancel(j->thread);
    pthread_join(j->thread, NULL);
    job_free(j);
    return done;
}

int64_t pglock__deadline(long timeout_ms, long grace_ms)
{
    if (timeout_ms < 0)
        return -1;
    return pglock_now_ms() + timeout_ms + grace_ms;
}

void pglock__clear_results(PGresult **res, int nres)
{
    for (int i = 0; i < nres; i++)
        PQclear(res[i]);
}

static void keep(PGresult **res, int *nres, PGresult *r)
{
    if (*nres < PGLOCK__MAX_RESULTS)
        res[(*nres)++] = r;
    else
        PQclear(r);
}

/* Takes every result already readable; returns 1 when the last is in. */
static int drain(PGconn *conn, PGresult **res, int *nres)
{
    while (!PQisBusy(conn)) {
        PGresult *r = PQgetResult(conn);
        if (!r)
            return 1;
        keep(res, nres, r);
    }
    return 0;
}

static int poll_ms(int64_t now, int64_t deadline)
{
    if (deadline < 0)
        return -1;
    int64_t left = deadline - now;
    return left < 0 ? 0 : left > INT_MAX ? INT_MAX : (int)left;
}

pglock__wait_end pglock__await(PGconn *conn, const pglock__wait *w,
                               PGresult **res, int *nres, int *cancelled)
{
    cancel_job *job = NULL;
    int64_t cancel_deadline = -1;
    int fd_fired = 0;

    *nres = 0;
    *cancelled = 0;
    /* The query was just sent: its answer cannot be in before a poll()
     * says so, unless libpq holds it already.  Reading the socket first
     * would cost a recvfrom() that finds nothing, one per query (the
     * common case). */
    for (int fresh = 1;; fresh = 0) {
        if (fresh) {
            if (drain(conn, res, nres))
                break;
        } else if (!PQconsumeInput(conn)) {
            drain(conn, res, nres); /* keeps the server's last words */
            if (job)
                cancel_end(job, -1);
            return PGLOCK__WAIT_CONNLOST;
        } else if (drain(conn, res, nres)) {
            break;
        }

        int64_t now = pglock_now_ms();
        if (!job) {
            int why = 0;
            if (fd_fired)
                why = PGLOCK_EINTR;
            else if (w->deadline >= 0 && now >= w->deadline)
                why = PGLOCK_ETIMEDOUT;
            if (why) {
                *cancelled = why;
                if (w->cancel_timeout_ms < 0)
                    return PGLOCK__WAIT_ABANDONED;
                job = cancel_start(conn);
                if (!job)
                    return PGLOCK__WAIT_ABANDONED;
                cancel_deadline = now + w->cancel_timeout_ms;
            }
        } else if (now >= cancel_deadline) {
            cancel_end(job, -1);
            return PGLOCK__WAIT_ABANDONED;
        }

        if (PQsocket(conn) < 0) {
            /* nothing left to poll: poll() would sleep out the deadline,
             * or forever without one */
            if (job)
                cancel_end(job, -1);
            return PGLOCK__WAIT_CONNLOST;
        }
        struct pollfd fds[2] = {{.fd = PQsocket(conn), .events = POLLIN},
                                {.fd = -1, .events = POLLIN}};
        if (!job && w->interrupt_fd >= 0)
            fds[1].fd = w->interrupt_fd;
        int ms = poll_ms(now, job ? cancel_deadline : w->deadline);
        int n = poll(fds, 2, ms);
        if (n < 0 && errno != EINTR) {
            if (job)
                cancel_end(job, -1);
            return PGLOCK__WAIT_ABANDONED;
        }
        if (n > 0 && fds[1].fd >= 0 && fds[1].revents)
            fd_fired = 1;
    }

    /* Every answer is in.  A cancel still on its way could hit the next
     * statement: wait until PQcancel has returned (the server has then
     * signalled the backend, which drops a cancel that finds it idle). */
    if (job && !cancel_end(job, cancel_deadline))
        return PGLOCK__WAIT_ABANDONED;
    return PGLOCK__WAIT_DONE;
}

PGresult *pglock__answer_until(PGconn *conn, int64_t deadline,
                               pglock__wait_end *end)
{
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait w = {.deadline = deadline,
                      .interrupt_fd = -1,
                      .cancel_timeout_ms = -1};
    *end = pglock__await(conn, &w, res, &nres, &cancelled);
    if (nres == 0) {
        if (*end == PGLOCK__WAIT_DONE)
            *end = PGLOCK__WAIT_CONNLOST;
        return NULL;
    }
    /* The last result; after a failure, the server's last words (e.g.
     * FATAL: terminating connection), worth keeping. */
    PGresult *last = res[nres - 1];
    pglock__clear_results(res, nres - 1);
    return last;
}

PGresult *pglock__exec_bounded(PGconn *conn, const char *sql, int nparams,
                               const char *const *params, long timeout_ms,
                               pglock__wait_end *end)
{
    return pglock__exec_bounded_typed(conn, sql, nparams, NULL, params,
                                      timeout_ms, end);
}

PGresult *pglock__exec_bounded_typed(PGconn *conn, const char *sql, int nparams,
                                     const Oid *types,
                                     const char *const *params, long timeout_ms,
                                     pglock__wait_end *end)
{
    return pglock__exec_until(conn, sql, nparams, types, params,
                              pglock__deadline(timeout_ms, 0), end);
}

PGresult *pglock__exec_until(PGconn *conn, const char *sql, int nparams,
                             const Oid *types, const char *const *params,
                             int64_t deadline, pglock__wait_end *end)
{
    if (!PQsendQueryParams(conn, sql, nparams, types, params, NULL, NULL, 0)) {
        *end = PGLOCK__WAIT_CONNLOST;
        return NULL;
    }
    return pglock__answer_until(conn, deadline, end);
}

PGresult *pglock__exec_params(PGconn *conn, const char *sql, int nparams,
                              const char *const *params, long timeout_ms,
                              pglock_error *err)
{
    pglock_error mine;
    if (!err)
        err = &mine;
    pglock__error_begin(err);
    if (!conn || !sql || nparams < 0 || timeout_ms < PGLOCK_WAIT_FOREVER) {
        pglock__error_set(err, PGLOCK_EINVAL, NULL, "invalid argument");
        return NULL;
    }
    if (!PQsendQueryParams(conn, sql, nparams, NULL, params, NULL, NULL, 0)) {
        pglock__error_result(err, NULL, conn, "could not send the query");
        return NULL;
    }
    pglock__wait w = {.deadline = pglock__deadline(timeout_ms, 0),
                      .interrupt_fd = -1,
                      .cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS};
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(conn, &w, res, &nres, &cancelled);
    PGresult *last = nres > 0 ? res[nres - 1] : NULL;
    pglock__clear_results(res, nres > 0 ? nres - 1 : 0);
    if (cancelled || end == PGLOCK__WAIT_ABANDONED) {
        /* Our cancel: the answer, if any, is the cancel's error. */
        PQclear(last);
        if (end == PGLOCK__WAIT_ABANDONED)
            shutdown(PQsocket(conn), SHUT_RDWR);
        if (end == PGLOCK__WAIT_ABANDONED)
            pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                              "no answer from the server within %ld ms, and "
                              "the cancel was not answered, so the "
                              "connection was shut down: PQfinish() it",
                              timeout_ms);
        else
            pglock__error_set(err, PGLOCK_ETIMEDOUT, "57014",
                              "no answer from the server within %ld ms",
                              timeout_ms);
        return NULL;
    }
    if (!last || end == PGLOCK__WAIT_CONNLOST) {
        pglock__error_result(err, last, conn, "connection lost");
        if (err->code == 0 || err->code == PGLOCK_ESERVER)
            err->code = PGLOCK_ECONNLOST;
        PQclear(last);
        return NULL;
    }
    err->code = 0;
    err->sqlstate[0] = '\0';
    err->message[0] = '\0';
    return last;
}
