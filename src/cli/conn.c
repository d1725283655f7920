/* Connection options (-h -p -U -d) as libpq keyword/value arrays. */
#include "cli.h"

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
                    const char *client_encoding, char *err, size_t errlen)
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
    PGconn *pg = PQconnectdbParams(keywords, values, 1);
    if (pg && PQstatus(pg) == CONNECTION_OK)
        return pg;
    const char *msg = pg ? PQerrorMessage(pg) : "out of memory";
    if (!*msg)
        msg = "unknown error";
    /* libpq quotes a malformed -d conninfo in its complaint, password
     * and all: the library hides those parts. */
    pglock_conn_error_message(err, errlen, msg, conn ? conn->dbname : NULL);
    PQfinish(pg);
    return NULL;
}
