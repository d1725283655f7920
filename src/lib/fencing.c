/*
 * Fencing tokens: numbers that only grow, across processes, hosts and
 * server crash-restarts, without any table.
 *
 * The token is the 64-bit (epoch-extended) transaction id of a transaction
 * of its own.  A transaction that only asks for its xid writes no WAL of
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

static const char token_sql[] =
    "BEGIN; "
    "SELECT txid_current(), "
    "pg_logical_emit_message(true, 'pglock', 'fencing token'), "
    "set_config('synchronous_commit', 'on', true); "
    "COMMIT";

static int fail(pglock_error *err, int code, const char *sqlstate,
                const char *message)
{
    if (err) {
        err->code = code;
        snprintf(err->sqlstate, sizeof err->sqlstate, "%s",
                 sqlstate ? sqlstate : "");
        snprintf(err->message, sizeof err->message, "%s", message);
        /* one line: drop libpq's trailing newline */
        err->message[strcspn(err->message, "\n")] = '\0';
    }
    return code;
}

int pglock_fencing_token(PGconn *conn, int64_t *out, pglock_error *err)
{
    if (!conn || !out)
        return fail(err, PGLOCK_EINVAL, NULL, "invalid argument");
    if (PQstatus(conn) != CONNECTION_OK)
        return fail(err, PGLOCK_ECONNLOST, NULL, PQerrorMessage(conn));
    if (PQtransactionStatus(conn) != PQTRANS_IDLE)
        return fail(err, PGLOCK_ESTATE, NULL,
                    "cannot take a fencing token inside an open transaction");

    /* One round trip: the three statements go in one Query message. */
    if (!PQsendQuery(conn, token_sql))
        return fail(err, PGLOCK_ECONNLOST, NULL, PQerrorMessage(conn));

    int rc = PGLOCK_OK;
    int64_t token = 0;
    int have_token = 0;
    PGresult *res;
    while ((res = PQgetResult(conn)) != NULL) {
        ExecStatusType st = PQresultStatus(res);
        if (st == PGRES_TUPLES_OK && PQntuples(res) == 1) {
            token = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
            have_token = 1;
        } else if (st != PGRES_COMMAND_OK && st != PGRES_TUPLES_OK &&
                   rc == PGLOCK_OK) {
            const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
            rc = fail(err, PQstatus(conn) == CONNECTION_OK ? PGLOCK_ESERVER
                                                           : PGLOCK_ECONNLOST,
                      state, PQresultErrorMessage(res));
        }
        PQclear(res);
    }
    if (rc != PGLOCK_OK)
        return rc;
    if (PQtransactionStatus(conn) != PQTRANS_IDLE || !have_token)
        return fail(err, PGLOCK_ESERVER, NULL,
                    "could not commit the fencing token's transaction");
    *out = token;
    return PGLOCK_OK;
}

int pglock_client_fencing_token(pglock_client *c, int64_t *out)
{
    if (!c || !out)
        return c ? pglock__fail(c, PGLOCK_EINVAL, "invalid argument")
                 : PGLOCK_EINVAL;
    int ready = pglock__client_ready(c);
    if (ready)
        return ready;
    pglock_error err;
    memset(&err, 0, sizeof err);
    int rc;
    if (c->hold == PGLOCK_HOLD_SESSION) {
        rc = pglock_fencing_token(c->conn, out, &err);
        if (rc == PGLOCK_ECONNLOST)
            pglock__client_drop(c);
    } else {
        /* Never inside the holding transaction, which must keep no xid. */
        PGconn *t = pglock__client_connect_again(c);
        if (!t)
            return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
        if (PQstatus(t) != CONNECTION_OK) {
            char line[400];
            pglock__first_line(line, sizeof line, PQerrorMessage(t));
            PQfinish(t);
            return pglock__fail(c, PGLOCK_ECONNECT,
                                "could not connect for a fencing token: %s",
                                line);
        }
        rc = pglock_fencing_token(t, out, &err);
        PQfinish(t);
        if (rc == PGLOCK_ECONNLOST)
            rc = err.code = PGLOCK_ESERVER; /* the lock connection is fine */
    }
    if (rc) {
        pglock__fail(c, rc, "could not take a fencing token: %s",
                     err.message);
        snprintf(c->sqlstate, sizeof c->sqlstate, "%s", err.sqlstate);
        return rc;
    }
    c->message[0] = '\0';
    return 0;
}
