/*
 * The history's connections: opened with a deadline (libpq's
 * non-blocking connect) and queried with a deadline, so that recording
 * never waits for a server or a pooled server connection past it.
 */
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include "bounded_conn.h"
#include "error_text.h"
#include "history.h"

PGconn *history_connect(const cli_conn *conn, const char *application_name,
                        int64_t deadline, char *err, size_t errlen)
{
    /* Names are stored and shown as UTF-8.  deadline -1: the one-shot
     * commands, bounded by connect_timeout alone. */
    pglock_error perr;
    PGconn *pg = cli_connect_until(conn, application_name, "UTF8", deadline,
                                   &perr);
    if (!pg)
        snprintf(err, errlen, "%s", perr.message);
    return pg;
}

/*
 * Gives up on *conn: its answer will never be read, and what it sent must
 * never run later.  A statement still in the kernel's send queue (a cut
 * network: unacknowledged, retransmitted) would otherwise reach the
 * server once the network heals and run then, seconds late: a zero
 * linger makes the close discard the queue and reset the connection.
 * The shutdown first keeps PQfinish() from queueing (or blocking on)
 * anything more.
 */
static void drop(PGconn **conn)
{
    int fd = PQsocket(*conn);
    if (fd >= 0) {
        struct linger now = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &now, sizeof now);
        shutdown(fd, SHUT_RDWR);
    }
    PQfinish(*conn);
    *conn = NULL;
}

/* cli_query(), which cancels on the server a query not answered in
 * time, with history_exec()'s conventions. */
static PGresult *one_shot(PGconn **conn, const char *sql, int nparams,
                          const char *const *params, char *err, size_t errlen)
{
    pglock_error perr = {0};
    PGresult *res = cli_query(*conn, sql, nparams, params, &perr);
    if (!res) {
        snprintf(err, errlen, "%s", perr.message);
        drop(conn);
        return NULL;
    }
    ExecStatusType s = PQresultStatus(res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        pglock__first_line(err, errlen, PQresultErrorMessage(res));
        PQclear(res);
        return NULL;
    }
    return res;
}

PGresult *history_exec(PGconn **conn, const char *sql, int nparams,
                       const char *const *params, int64_t deadline, char *err,
                       size_t errlen)
{
    if (!*conn || PQstatus(*conn) != CONNECTION_OK) {
        snprintf(err, errlen, "no connection");
        return NULL;
    }
    if (deadline < 0) /* the one-shot commands: bounded by connect_timeout */
        return one_shot(conn, sql, nparams, params, err, errlen);
    pglock__wait_end end;
    PGresult *res = pglock__exec_until(*conn, sql, nparams, NULL, params,
                                       deadline, &end);
    if (end != PGLOCK__WAIT_DONE) {
        if (end == PGLOCK__WAIT_ABANDONED)
            snprintf(err, errlen, "no answer in time");
        else
            pglock__first_line(err, errlen, PQerrorMessage(*conn));
        PQclear(res);
        drop(conn);
        return NULL;
    }
    ExecStatusType s = PQresultStatus(res);
    if (s != PGRES_COMMAND_OK && s != PGRES_TUPLES_OK) {
        pglock__first_line(err, errlen, PQresultErrorMessage(res));
        if (!*err)
            snprintf(err, errlen, "the query failed");
        PQclear(res);
        if (PQstatus(*conn) != CONNECTION_OK)
            drop(conn);
        return NULL;
    }
    return res;
}

int history_check_probe(PGresult *probe, int want_insert, int exit_code)
{
    if (PQgetvalue(probe, 0, 0)[0] != 't') {
        cli_error(exit_code, "no run history in this database: the table "
                             "pglock.runs does not exist");
        cli_hint(
            "Run \"pglock init\" once, as a role that may create a schema.");
        return exit_code;
    }
    const char *v = PQgetvalue(probe, 0, 1);
    if (PQgetisnull(probe, 0, 1) || strcmp(v, "1") != 0) {
        cli_error(exit_code,
                  "pglock.runs has schema version %s; this pglock "
                  "reads version %d",
                  PQgetisnull(probe, 0, 1) ? "(none)" : v,
                  HISTORY_SCHEMA_VERSION);
        cli_hint("Run \"pglock init\" with this version of pglock.");
        return exit_code;
    }
    int col = want_insert ? 2 : 3;
    if (PQgetvalue(probe, 0, col)[0] != 't') {
        cli_error(exit_code, "permission denied to %s pglock.runs",
                  want_insert ? "record runs in" : "read");
        cli_hint("\"pglock init\" prints the GRANTs a role needs.");
        return exit_code;
    }
    return 0;
}
