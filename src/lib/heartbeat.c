/*
 * Heartbeat: one cheap query confirming that the lock connection is alive
 * and that the locks the client counts are still held, without reading
 * pg_locks (which copies the whole server's lock table under every
 * lock-manager partition lock, so its cost grows with every lock on the
 * server).  Non-blocking, for event loops.
 *
 * An advisory session lock is released only by its own session
 * (pg_advisory_unlock*, which only this library sends on its connection)
 * or by the session's end; a transaction lock only by the end of its
 * transaction, or of the subtransaction it was taken in.  So:
 *
 *  - session lifetime: the same backend answers (pg_backend_pid());
 *  - xact lifetime: the same backend answers, the holding transaction is still
 *    open and not failed (PQtransactionStatus() after the answer: an error
 *    frees a transaction's locks at once, before any ROLLBACK), and no
 *    ROLLBACK TO SAVEPOINT undid a lock: every lock statement sets the
 *    transaction-local setting PGLOCK__LOCKS_SETTING to how many lock
 *    statements the transaction has run, and a rollback to a savepoint
 *    puts back the value it had there.
 *
 * The query takes no transaction id and, in the simple protocol, keeps no
 * snapshot after it answers.
 *
 * The release is the last heartbeat, in the same round trip: its answer
 * is the proof, as a heartbeat's is.  Session lifetime: pg_advisory_unlock_all()
 * runs in the statement that returns pg_backend_pid(), and only when that
 * is the holding backend (so never on a backend a pooler lent); the same
 * backend answering proves the session, and with it the locks, lasted up
 * to the unlock.  Xact lifetime: the heartbeat's check and ROLLBACK travel in
 * one Query message; the check runs inside the holding transaction (an
 * error there skips the ROLLBACK and leaves it failed), and its count is
 * transaction-local, so a check that passes ran in that transaction.
 *
 * Xact lifetime: a cancel costs a heartbeat, never the lock.  An error in
 * a transaction block aborts it and frees its locks at once, and a cancel
 * that reaches a backend after it read a query fires before the query's
 * first statement (exec_simple_query checks for interrupts there), so a
 * savepoint sent in the heartbeat's own message would come too late.
 * Every lock statement of the holding transaction therefore ends, in its
 * own message, with SAVEPOINT PGLOCK__BEAT_SAVEPOINT (lock.c): the
 * heartbeat always runs inside a savepoint taken after the last lock.  A
 * cancel aborts only that savepoint (the transaction, and its locks, live
 * on, PQTRANS_INERROR), and the next heartbeat begins with ROLLBACK TO
 * SAVEPOINT, in the same one round trip, which puts the savepoint back.
 * A heartbeat is bounded by T_c, so that recovery is too.  A ROLLBACK TO
 * that finds no such savepoint (3B001) means the transaction itself was
 * aborted: a loss.  A savepoint takes no transaction id either.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* The checks call a volatile function (clock_timestamp()), which costs
 * nothing here: pgpool-II with load balancing sends a SELECT with none to
 * a standby, whose backend is not the holder (the heartbeat would report
 * the lock lost), and one with a volatile function to the primary. */
#define BEAT_WHERE " WHERE clock_timestamp() IS NOT NULL"
/* The xact check, and what comes before and after it (heartbeat.c's
 * opening comment says why). */
#define BEAT_XACT_COLUMNS \
    "SELECT pg_backend_pid(), current_setting('" PGLOCK__LOCKS_SETTING \
    "', true)"
#define BEAT_XACT_SQL BEAT_XACT_COLUMNS BEAT_WHERE
#define BEAT_RECOVER "ROLLBACK TO SAVEPOINT " PGLOCK__BEAT_SAVEPOINT "; "
static const char beat_sql[] = "SELECT pg_backend_pid()" BEAT_WHERE;
static const char release_sql[] =
    "SELECT pg_backend_pid(), CASE WHEN pg_backend_pid() = $1::int"
    " THEN pg_advisory_unlock_all() END";
/* [recovering][releasing] */
static const char *const xact_sql[2][2] = {
    {BEAT_XACT_SQL, BEAT_XACT_SQL "; ROLLBACK"},
    {BEAT_RECOVER BEAT_XACT_SQL, BEAT_RECOVER BEAT_XACT_SQL "; ROLLBACK"}};

/* A watching hold's heartbeat (stop_request.c): the usual check and the
 * stop column; with the xact lifetime, in the heartbeat's savepoint,
 * which the same message then rolls back to, giving back the tries'
 * locks (and any catalog lock the requester's query took).  No
 * BEAT_WHERE: the stop column calls a volatile function itself
 * (pg_try_advisory_xact_lock(), pg_stat_clear_snapshot()), which sends
 * the heartbeat to pgpool-II's primary, and the clause costs about 1 us
 * of the server's CPU per heartbeat (make bench, section 11). */
static int send_watching(pglock_client *c, const char *column)
{
    if (c->in_xact)
        snprintf(c->stop_sql, c->stop_sql_len,
                 "%s" BEAT_XACT_COLUMNS
                 ", %s; ROLLBACK TO SAVEPOINT " PGLOCK__BEAT_SAVEPOINT,
                 c->beat_aborted ? BEAT_RECOVER : "", column);
    else
        snprintf(c->stop_sql, c->stop_sql_len, "SELECT pg_backend_pid(), %s",
                 column);
    return PQsendQuery(c->conn, c->stop_sql);
}

/* Sends the heartbeat's query (release: the release's). */
static int send_query(pglock_client *c, int release)
{
    const char *column = release ? NULL : pglock__stop_column(c);
    if (release)
        c->beat_stop = PGLOCK__BEAT_STOP_NONE;
    if (column)
        return send_watching(c, column);
    if (c->in_xact)
        return PQsendQuery(c->conn, xact_sql[c->beat_aborted][release]);
    if (!release)
        return PQsendQuery(c->conn, beat_sql);
    char pid[16];
    snprintf(pid, sizeof pid, "%d", c->backend_pid);
    const char *params[1] = {pid};
    return PQsendQueryParams(c->conn, release_sql, 1, NULL, params, NULL, NULL,
                             0);
}

static int send_beat(pglock_client *c, int release)
{
    int ready = pglock__client_ready(c);
    if (ready)
        return ready;
    int64_t now = pglock_now_ms();
    if (!send_query(c, release)) {
        pglock__fail_result(c, NULL,
                            release ? "could not send the release"
                                    : "could not send the heartbeat");
        if (PQstatus(c->conn) == CONNECTION_OK)
            return PGLOCK_ESERVER; /* the session may hold on: see below */
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    c->heartbeat_busy = 1;
    c->heartbeat_error = 0;
    c->beat_confirmed = c->beat_ended = 0;
    c->beat_taken = -1;
    c->releasing = release;
    c->heartbeat_sent_at = now;
    return 0;
}

int pglock__heartbeat_send(pglock_client *c)
{
    return c ? send_beat(c, 0) : PGLOCK_EINVAL;
}

int pglock__release_send(pglock_client *c)
{
    return send_beat(c, 1);
}

/* The heartbeat proved the locks gone (another backend, a failed or
 * ended holding transaction, a closed connection): close the connection,
 * so that whatever it still held is freed too. */
static int lost(pglock_client *c)
{
    pglock__client_drop(c);
    return PGLOCK_ECONNLOST;
}

/* 1 when the server ends the session with this error (FATAL, PANIC:
 * pg_terminate_backend, a shutdown), before libpq has read the close. */
static int ends_session(const PGresult *r)
{
    const char *sev = PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
    return sev && (strcmp(sev, "FATAL") == 0 || strcmp(sev, "PANIC") == 0);
}

/* A statement of the heartbeat failed (r): its error becomes the
 * client's message; the answer is read to its end before anything is
 * decided (statement_failed()). */
static void note_failure(pglock_client *c, const PGresult *r)
{
    pglock__fail_result(c, r, "heartbeat failed");
    c->heartbeat_error = ends_session(r) ? 2 : 1;
}

/* Xact lifetime, a statement of the heartbeat failed: 1 when only the
 * heartbeat's savepoint was aborted (the transaction waits for ROLLBACK
 * TO SAVEPOINT, its locks held), 0 when the holding transaction may have
 * been.  The heartbeat runs inside the savepoint, so its own errors abort
 * no more.  Not so a ROLLBACK TO that finds no savepoint (3B001: the
 * transaction was aborted), nor a check refused because the transaction
 * was aborted before it (25P02): something else did that, perhaps to the
 * whole transaction, and a loss is the safe side. */
static int only_the_savepoint(const pglock_client *c)
{
    return PQtransactionStatus(c->conn) == PQTRANS_INERROR &&
           strcmp(c->sqlstate, "3B001") != 0 &&
           strcmp(c->sqlstate, "25P02") != 0;
}

/* The heartbeat's answer is complete and a statement of it failed.  Xact
 * lifetime: an error in the heartbeat's savepoint costs the heartbeat
 * only; one that aborted the holding transaction freed its locks at once
 * (a server-side loss).  A FATAL error: the session ends.  Otherwise the
 * session goes on (a cancel, pg_cancel_backend): no loss, since only the
 * session's end or its own unlock frees a session lock, and closing the
 * connection here would free the locks while the caller's work may still
 * run.  The lease is just not confirmed: PGLOCK_ESERVER, the connection
 * kept. */
static int statement_failed(pglock_client *c)
{
    int fatal = c->heartbeat_error == 2;
    c->heartbeat_error = 0;
    if (fatal)
        return lost(c);
    if (c->in_xact && only_the_savepoint(c)) {
        c->beat_aborted = 1;
        return PGLOCK_ESERVER;
    }
    if (c->in_xact && PQtransactionStatus(c->conn) != PQTRANS_INTRANS) {
        char why[sizeof c->message];
        snprintf(why, sizeof why, "%s", c->message);
        pglock__fail(c, PGLOCK_ECONNLOST,
                     "the holding transaction failed, "
                     "which frees its locks: %s",
                     why);
        return lost(c);
    }
    return PGLOCK_ESERVER;
}

/* Checks one answer row's backend: 0 when it is the holding one (or
 * none need be), else PGLOCK_ECONNLOST with the message set.  *taken gets
 * the xact lifetime's count of lock statements (-1: none). */
static int check_answer(pglock_client *c, const PGresult *r, long *taken)
{
    int pid = atoi(PQgetvalue(r, 0, 0));
    *taken = c->in_xact && PQnfields(r) >= 2 && !PQgetisnull(r, 0, 1) &&
                     *PQgetvalue(r, 0, 1)
                 ? strtol(PQgetvalue(r, 0, 1), NULL, 10)
                 : -1;
    /* With the xact lifetime and no transaction open, nothing is held and a
     * pooler lends whichever backend it has. */
    int pinned = c->lifetime == PGLOCK_LIFETIME_SESSION || c->in_xact;
    if (pinned && pid != c->backend_pid)
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the lock connection reached backend %d instead "
                            "of %d: the session (and its locks) is gone",
                            pid, c->backend_pid);
    pglock__stop_answer(c, r, c->in_xact ? 2 : 1);
    return 0;
}

/* Xact lifetime, once the answer is complete: still inside the holding
 * transaction, which has not failed (an error frees a transaction's locks
 * at once, before any ROLLBACK) nor ended, and which still counts every
 * lock statement we sent (a ROLLBACK TO SAVEPOINT frees the locks taken
 * after the savepoint and puts the count back).  The release: the check
 * passed inside it (the count is transaction-local), and then its own
 * ROLLBACK (ended: answered) ended it. */
static int check_xact(pglock_client *c, long taken, int ended)
{
    PGTransactionStatusType ts = PQtransactionStatus(c->conn);
    if (c->releasing && (!ended || ts != PQTRANS_IDLE))
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the release did not end the holding "
                            "transaction; the connection was closed");
    if (!c->releasing && ts != PQTRANS_INTRANS)
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the holding transaction %s, which freed its "
                            "locks",
                            ts == PQTRANS_INERROR ? "failed" : "ended");
    if (taken != c->xact_locks)
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the holding transaction no longer has every "
                            "lock it took: it counts %ld of our %ld lock "
                            "statements (a rollback to a savepoint undid "
                            "the others)",
                            taken, c->xact_locks);
    return 0;
}

/* The release answered as a heartbeat does: the locks were held up to
 * it, and it freed them all. */
static void released(pglock_client *c)
{
    c->releasing = 0;
    pglock__locks_clear(c);
    if (c->in_xact) {
        c->in_xact = 0;
        c->backend_pid = 0;
    } else {
        c->released = 1;
    }
}

int pglock__heartbeat_poll(pglock_client *c)
{
    if (!c)
        return PGLOCK_EINVAL;
    if (!c->conn)
        return pglock__client_ready(c);
    if (!c->heartbeat_busy)
        return pglock__fail(c, PGLOCK_ESTATE, "no heartbeat in progress");
    if (!PQconsumeInput(c->conn)) {
        PGresult *r = PQisBusy(c->conn) ? NULL : PQgetResult(c->conn);
        pglock__fail_result(c, r, "heartbeat failed");
        PQclear(r);
        /* A read that failed on a socket libpq still calls good (out of
         * memory) is no proof the session ended: closing it here would
         * free the locks while the work runs.  Only T_c decides. */
        if (PQstatus(c->conn) == CONNECTION_OK)
            return PGLOCK_ESERVER;
        return lost(c);
    }
    while (!PQisBusy(c->conn)) {
        PGresult *r = PQgetResult(c->conn);
        if (!r) {
            c->heartbeat_busy = 0;
            break;
        }
        if (c->in_xact && PQresultStatus(r) == PGRES_COMMAND_OK) {
            if (c->beat_confirmed && c->releasing)
                c->beat_ended = 1; /* the release's ROLLBACK, after the check */
            PQclear(r); /* (else a recovery's ROLLBACK TO SAVEPOINT) */
            continue;
        }
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            note_failure(c, r);
            PQclear(r);
            continue;
        }
        int rc = check_answer(c, r, &c->beat_taken);
        PQclear(r);
        if (rc) {
            c->heartbeat_busy = 0;
            return lost(c);
        }
        c->beat_confirmed = 1; /* keep reading until the end of the answer */
    }
    if (PQstatus(c->conn) != CONNECTION_OK) {
        if (!c->heartbeat_error)
            pglock__fail_result(c, NULL, "heartbeat failed");
        return lost(c);
    }
    if (c->heartbeat_busy)
        return PGLOCK_EAGAIN;
    if (c->heartbeat_error)
        return statement_failed(c);
    if (!c->beat_confirmed)
        return pglock__fail(c, PGLOCK_ESERVER, "heartbeat got no answer");
    if (c->in_xact && check_xact(c, c->beat_taken, c->beat_ended) != 0)
        return lost(c);
    c->message[0] = '\0';
    c->sqlstate[0] = '\0';
    c->beat_aborted = 0;
    c->confirmed_at = c->heartbeat_sent_at;
    if (c->releasing)
        released(c);
    return 0;
}

/* Waits for the answer of the heartbeat in flight until deadline. */
static int await_beat(pglock_client *c, int64_t deadline, long timeout_ms)
{
    for (;;) {
        int rc = pglock__heartbeat_poll(c);
        if (rc != PGLOCK_EAGAIN)
            return rc;
        int64_t left = deadline < 0 ? -1 : deadline - pglock_now_ms();
        if (deadline >= 0 && left <= 0)
            return pglock__fail(c, PGLOCK_ETIMEDOUT,
                                "heartbeat not answered within %ld ms",
                                timeout_ms);
        struct pollfd p = {.fd = PQsocket(c->conn), .events = POLLIN};
        poll(&p, 1, left > 1000 ? 1000 : (int)left);
    }
}

int pglock_heartbeat(pglock_client *c, long timeout_ms)
{
    if (!c)
        return PGLOCK_EINVAL;
    if (pglock__client_held(c))
        return PGLOCK_ESTATE; /* the hold's client: nothing of it touched */
    int64_t deadline = pglock__deadline(timeout_ms, 0);
    /* One left in flight by an earlier timeout is answered first. */
    int rc = c->heartbeat_busy ? await_beat(c, deadline, timeout_ms) : 0;
    if (rc == 0)
        rc = pglock__heartbeat_send(c);
    return rc == 0 ? await_beat(c, deadline, timeout_ms) : rc;
}
