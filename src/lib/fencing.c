/*
 * Fencing tokens: numbers that only grow, across processes, hosts,
 * server crash-restarts, promotions and point-in-time restores, without
 * any table.
 *
 * The token is the server's current timeline times 2^48 plus the 64-bit
 * (epoch-extended) transaction id of a transaction of its own.  The xid
 * alone repeats after a promotion: an asynchronous standby lacks the old
 * primary's last commits and hands their xids out again (seen on
 * PostgreSQL 15: 728..732 on the old primary, then 728 on the promoted
 * standby).  Every promotion and every archive recovery starts a new,
 * higher timeline, as ZooKeeper's zxid starts a new epoch with each
 * leader, so the timeline in the high bits orders the eras and the xid
 * orders the tokens inside one.
 *
 * The timeline is read from the name of the WAL file being written,
 * pg_walfile_name(pg_current_wal_lsn()): any role may call both, on 13 to
 * 18, and it names the new timeline the moment a promotion ends.
 * pg_control_checkpoint()'s timeline_id does not: it names the timeline of
 * the last checkpoint, the old one until the checkpoint that follows a
 * promotion ends (seen on 13 to 18 right after pg_ctl promote).
 *
 * The bit budget (int64_t, positive): 15 bits of timeline (1..32767
 * promotions and restores) and 48 of xid8 (an epoch below 65536: 2^48
 * transactions, 89 years at 100,000 a second).  Past it the token is
 * refused, never wrapped.  Tokens of pglock before the timeline were the
 * xid8 alone, below 2^48 within the same budget, so every token now is
 * above every one of those.
 *
 * A transaction that only asks for its xid writes no WAL of
 * its own, so its commit record is not flushed and after a crash the same
 * xid can be handed out again (seen on PostgreSQL 15: xids 730..734 were
 * handed out, an immediate-mode stop, and the next one was 729).
 * pg_logical_emit_message(true, ...) writes a transactional WAL record, so
 * the commit is flushed before COMMIT returns and the xid is durable —
 * provided synchronous_commit is on, which the token's transaction forces
 * for itself: with the server's synchronous_commit = off the same xid was
 * handed out again after an immediate-mode stop (seen on PostgreSQL 15:
 * 749, a crash, then 746), emitted message or not.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "internal.h"

static const char token_sql[] =
    "BEGIN; "
    "SELECT txid_current(), pg_walfile_name(pg_current_wal_lsn()), "
    "pg_logical_emit_message(true, 'pglock', 'fencing token'), "
    "set_config('synchronous_commit', 'on', true); "
    "COMMIT";

#define TOKEN_TIMELINE_SHIFT 48
#define TOKEN_MAX_TIMELINE 32767

int pglock__token_make(const char *xid8, const char *walfile, int64_t *out)
{
    /* A WAL file's name: timeline, log and segment, 8 hex digits each. */
    if (strlen(walfile) != 24 || strspn(walfile, "0123456789ABCDEF") != 24)
        return -1;
    char tli_hex[9];
    memcpy(tli_hex, walfile, 8);
    tli_hex[8] = '\0';
    unsigned long tli = strtoul(tli_hex, NULL, 16);
    char *end;
    errno = 0;
    long long xid = strtoll(xid8, &end, 10);
    if (errno || end == xid8 || *end || xid < 0 ||
        xid >= (1LL << TOKEN_TIMELINE_SHIFT) || tli < 1 ||
        tli > TOKEN_MAX_TIMELINE)
        return -1;
    *out = (int64_t)tli << TOKEN_TIMELINE_SHIFT | (int64_t)xid;
    return 0;
}

/*
 * Collects the token's answer, already sent on conn, by w's deadline and
 * interrupt.  A commit that waits for synchronous replication cannot be
 * cancelled into a failure: the server reports success with a WARNING
 * ("already committed locally").  So a token that comes back after a
 * cancel, or after the deadline, is thrown away, never returned.
 * *abandoned: the cancel was not confirmed in time and conn must not be
 * used again.
 */
static int collect(PGconn *conn, const pglock__wait *w, int64_t *out,
                   int *abandoned, pglock_error *err)
{
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(conn, w, res, &nres, &cancelled);
    *abandoned = end == PGLOCK__WAIT_ABANDONED;

    int rc = PGLOCK_OK, have_token = 0;
    int64_t token = 0;
    char xid8[24] = "", walfile[32] = "";
    for (int i = 0; i < nres; i++) {
        ExecStatusType st = PQresultStatus(res[i]);
        if (st == PGRES_TUPLES_OK && PQntuples(res[i]) == 1 &&
            PQnfields(res[i]) >= 2) {
            snprintf(xid8, sizeof xid8, "%s", PQgetvalue(res[i], 0, 0));
            snprintf(walfile, sizeof walfile, "%s", PQgetvalue(res[i], 0, 1));
            have_token = 1;
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK &&
                   rc == PGLOCK_OK) {
            rc = pglock__error_result(err, res[i], conn,
                                      "the token's transaction failed");
        }
    }
    pglock__clear_results(res, nres);

    if (cancelled || (w->deadline >= 0 && pglock_now_ms() > w->deadline))
        return pglock__error_set(
            err, cancelled == PGLOCK_EINTR ? PGLOCK_EINTR : PGLOCK_ETIMEDOUT,
            NULL,
            cancelled == PGLOCK_EINTR ? "interrupted (a token that came back "
                                        "anyway is discarded)"
                                      : "no answer in time (a token that came "
                                        "back late is discarded)");
    if (end != PGLOCK__WAIT_DONE || PQstatus(conn) != CONNECTION_OK) {
        char line[400];
        pglock__first_line(line, sizeof line, PQerrorMessage(conn));
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL, "%s", line);
    }
    if (rc != PGLOCK_OK)
        return rc;
    if (PQtransactionStatus(conn) != PQTRANS_IDLE || !have_token)
        return pglock__error_set(err, PGLOCK_ESERVER, NULL,
                                 "could not commit the fencing token's "
                                 "transaction");
    /* Past the budget a token would wrap below earlier ones: none. */
    if (pglock__token_make(xid8, walfile, &token) < 0)
        return pglock__error_set(err, PGLOCK_ESERVER, NULL,
                                 "the fencing token is out of range "
                                 "(transaction id %s, WAL file %s): tokens "
                                 "hold timelines 1 to 32767 and transaction "
                                 "ids below 2^48",
                                 xid8, walfile);
    *out = token;
    return PGLOCK_OK;
}

/* After a failed token on a connection that stays open: leave no open or
 * aborted transaction behind (an error inside the string keeps its BEGIN's
 * transaction open).  0, or -1 when conn must be given up. */
static int end_transaction(PGconn *conn, long timeout_ms)
{
    if (PQtransactionStatus(conn) == PQTRANS_IDLE)
        return 0;
    pglock__wait_end end;
    PGresult *r = pglock__exec_bounded(conn, "ROLLBACK", 0, NULL, timeout_ms,
                                       &end);
    int ok = r && PQresultStatus(r) == PGRES_COMMAND_OK &&
             PQtransactionStatus(conn) == PQTRANS_IDLE;
    PQclear(r);
    return ok ? 0 : -1;
}

/* The token on conn (idle), by w.  *abandoned as for collect(), or when
 * the connection was left unusable. */
static int token_on(PGconn *conn, const pglock__wait *w, int64_t *out,
                    int *abandoned, pglock_error *err)
{
    *abandoned = 0;
    if (PQstatus(conn) != CONNECTION_OK)
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "the connection is not open");
    if (PQtransactionStatus(conn) != PQTRANS_IDLE)
        return pglock__error_set(err, PGLOCK_ESTATE, NULL,
                                 "cannot take a fencing token inside an open "
                                 "transaction");
    /* One round trip: the statements go in one Query message. */
    if (!PQsendQuery(conn, token_sql)) {
        char line[400];
        pglock__first_line(line, sizeof line, PQerrorMessage(conn));
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL, "%s", line);
    }
    int rc = collect(conn, w, out, abandoned, err);
    if (rc != PGLOCK_OK && !*abandoned && PQstatus(conn) == CONNECTION_OK &&
        end_transaction(conn, w->cancel_timeout_ms) < 0)
        *abandoned = 1;
    return rc;
}

int pglock_fencing_token(PGconn *conn, int64_t *out, long timeout_ms,
                         int interrupt_fd, pglock_error *err)
{
    pglock__error_begin(err);
    if (!conn || !out || timeout_ms < PGLOCK_WAIT_FOREVER)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "invalid argument");
    pglock__wait w = {.deadline = pglock__deadline(timeout_ms, 0),
                      .interrupt_fd = interrupt_fd,
                      .cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS};
    int abandoned;
    int rc = token_on(conn, &w, out, &abandoned, err);
    if (abandoned) {
        /* As pglock_xact_lock(): the caller must PQfinish() it. */
        shutdown(PQsocket(conn), SHUT_RDWR);
        if (rc == PGLOCK_OK)
            rc = PGLOCK_ECONNLOST;
    }
    return rc;
}

/* A second connection with the client's parameters, opened without
 * blocking past w's deadline or interrupt.  NULL with err set. */
static PGconn *connect_bounded(const pglock_client *c, const pglock__wait *w,
                               pglock_error *err)
{
    /* the conninfo parsed for the lock connection: no password in
     * libpq's message */
    return pglock__connect((const char *const *)c->conn_keywords,
                           (const char *const *)c->conn_values, 1, w, err);
}

int pglock_client_fencing_token(pglock_client *c, int64_t *out, long timeout_ms)
{
    if (c && pglock__client_held(c))
        return PGLOCK_ESTATE; /* the hold's client: nothing of it touched */
    if (!c || !out || timeout_ms < PGLOCK_WAIT_FOREVER)
        return c ? pglock__fail(c, PGLOCK_EINVAL, "invalid argument")
                 : PGLOCK_EINVAL;
    int ready = pglock__client_ready(c);
    if (ready)
        return ready;
    pglock_error err = {0};
    pglock__wait w = {.deadline = pglock__deadline(timeout_ms, 0),
                      .interrupt_fd = c->opts.interrupt_fd,
                      .cancel_timeout_ms = c->opts.cancel_timeout_ms};
    int rc, abandoned = 0;
    if (c->lifetime == PGLOCK_LIFETIME_SESSION) {
        rc = token_on(c->conn, &w, out, &abandoned, &err);
        if (abandoned || rc == PGLOCK_ECONNLOST) {
            /* The lock connection cannot be trusted any more: its locks
             * go with it. */
            pglock__client_drop(c);
            if (rc == PGLOCK_OK)
                rc = PGLOCK_ECONNLOST;
        }
    } else {
        /* Never inside the holding transaction, which must keep no xid;
         * and never waiting past the deadline for a pooled server
         * connection that may not come. */
        PGconn *t = connect_bounded(c, &w, &err);
        rc = t ? token_on(t, &w, out, &abandoned, &err) : err.code;
        if (t) {
            if (abandoned)
                shutdown(PQsocket(t), SHUT_RDWR);
            PQfinish(t);
        }
        if (rc == PGLOCK_ECONNLOST)
            rc = PGLOCK_ESERVER; /* the lock connection is fine */
    }
    if (rc) {
        pglock__fail(c, rc, "could not take a fencing token: %s", err.message);
        snprintf(c->sqlstate, sizeof c->sqlstate, "%s", err.sqlstate);
        return rc;
    }
    c->message[0] = '\0';
    return 0;
}
