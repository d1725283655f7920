/* Connection options (-h -p -U -d) as libpq keyword/value arrays. */
#include <stddef.h>
#include "cli.h"

void cli_conn_params(const cli_conn *conn, const char *application_name,
                     const char *keywords[8], const char *values[8])
{
    int n = 0;
    /* dbname first: with expand_dbname a conninfo string or URI in it is
     * expanded, and the explicit -h/-p/-U that follow override it, as in
     * psql. */
    if (conn && conn->dbname) {
        keywords[n] = "dbname";
        values[n++] = conn->dbname;
    }
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
    keywords[n] = "fallback_application_name";
    values[n++] = application_name ? application_name : "pglock";
    keywords[n] = NULL;
    values[n] = NULL;
}
