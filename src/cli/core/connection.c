/* Connection options (-h -p -U -d) as libpq keyword/value arrays, and
 * the one-shot commands' connections and queries. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounded_conn.h"
#include "cli.h"
#include "conninfo_rules.h"

/*
 * Only the options the user gave are passed; everything else is libpq's
 * (PG* variables, service files, .pgpass).  dbname goes with
 * expand_dbname, so it may be a conninfo string or a URI.  The order is
 * psql's: a conninfo given with -d overrides -h/-p/-U.  application_name,
 * when given, comes last and is set explicitly (not as a fallback)
 * because it names the lock for other tools.
 */
void cli_conn_params(const cli_conn *conn, const char *application_name,
                     const char *keywords[8], const char *values[8])
{
    int n = 0;
    if (conn && conn->host) {
        keywords[n] = "host";
        values[n++] = conn->host;
    }
    if (conn && conn->port) {
        keywords[n] = "port";
        values[n++] = conn->port;
    }
    if (conn && conn->user) {
        keywords[n] = "user";
        values[n++] = conn->user;
    }
    if (conn && conn->dbname) {
        keywords[n] = "dbname";
        values[n++] = conn->dbname;
    }
    if (application_name) {
        keywords[n] = "application_name";
        values[n++] = application_name;
    }
    keywords[n] = NULL;
    values[n] = NULL;
}

PGconn *cli_connect(const cli_conn *conn, const char *application_name,
                    const char *client_encoding, pglock_error *err)
{
    return cli_connect_until(conn, application_name, client_encoding, -1, err);
}

PGconn *cli_connect_until(const cli_conn *conn, const char *application_name,
                          const char *client_encoding, int64_t deadline,
                          pglock_error *err)
{
    const char *keywords[9], *values[9];
    cli_conn_params(conn, application_name, keywords, values);
    if (client_encoding) {
        int n = 0;
        while (keywords[n])
            n++;
        keywords[n] = "client_encoding";
        values[n++] = client_encoding;
        keywords[n] = NULL;
        values[n] = NULL;
    }
    /* No interrupt: these commands keep the default signal actions, so a
     * signal ends them at once (no lock of theirs to release). */
    return pglock__connect_params(keywords, values, 1, deadline, -1, err);
}

/* libpq's second line for the two commonest failures, which it indents
 * under its message; ours stand alone as hints. */
void cli_connect_hint(const char *message)
{
    if (strstr(message, "connection to server on socket") &&
        strstr(message, "No such file or directory"))
        cli_hint("Is the server running locally and accepting connections "
                 "on that socket?");
    else if (strstr(message, "Connection refused"))
        cli_hint("Is the server running on that host and accepting TCP/IP "
                 "connections?");
}

int cli_connect_error(const pglock_error *err, const char *what)
{
    int code = cli_exit_status_for(err->code);
    /* A refused conninfo is the whole story: no "what" before it. */
    if (code == CLI_EXIT_USAGE)
        what = NULL;
    cli_error(code, "%s%s%s", what ? what : "", what ? ": " : "", err->message);
    cli_connect_hint(err->message);
    return code;
}

/* One knob for the user: a query gets what a connect gets, the
 * connection's connect_timeout (PGCONNECT_TIMEOUT included), else
 * PGLOCK_CONNECT_TIMEOUT_S; libpq's "0" (forever) is honoured too. */
long cli_query_timeout_ms(PGconn *conn)
{
    long ms = conn_timeout_ms(conn);
    return ms < 0 ? PGLOCK_WAIT_FOREVER : ms;
}

PGresult *cli_query(PGconn *conn, const char *sql, int nparams,
                    const char *const *params, pglock_error *err)
{
    return pglock__exec_params(conn, sql, nparams, params,
                               cli_query_timeout_ms(conn), err);
}
