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
 * the commit is flushed before COMMIT returns and the xid is durable.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pglock.h"

static const char token_sql[] =
    "BEGIN; "
    "SELECT txid_current(), "
    "pg_logical_emit_message(true, 'pglock', 'fencing token'); "
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
