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
