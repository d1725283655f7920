/* doctor_tls.c — the connection's TLS state, for doctor's "tls" line.
 * Every lock statement and heartbeat travels on this connection, so who
 * can read or forge them is worth a line of its own. */
#include "doctor_tls.h"

#include <stdio.h>
#include <string.h>

/* The sslmode libpq used: the conninfo's, PGSSLMODE's, or its default. */
static void sslmode_of(PGconn *conn, char *buf, size_t len)
{
    PQconninfoOption *opts = PQconninfo(conn);
    snprintf(buf, len, "prefer");
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "sslmode") == 0 && o->val && *o->val)
            snprintf(buf, len, "%s", o->val);
    PQconninfoFree(opts);
}

void doctor_tls(PGconn *conn, char *buf, size_t len)
{
    char mode[32];
    sslmode_of(conn, mode, sizeof mode);
    const char *host = PQhost(conn);
    if (!PQsslInUse(conn)) {
        /* libpq never starts TLS on a Unix-domain socket, whatever the
         * sslmode: the kernel carries the bytes, no network does. */
        if (host && (host[0] == '/' || host[0] == '@'))
            snprintf(buf, len,
                     "not used: a Unix-domain socket (sslmode %s does not "
                     "apply there)",
                     mode);
        else
            snprintf(buf, len,
                     "not used (sslmode %s): lock statements and heartbeats "
                     "travel in clear text, and nothing proves the server "
                     "is the one meant",
                     mode);
        return;
    }
    const char *protocol = PQsslAttribute(conn, "protocol");
    const char *cipher = PQsslAttribute(conn, "cipher");
    const char *verified;
    if (strcmp(mode, "verify-full") == 0)
        verified = "the server's certificate verified against the CA and "
                   "its name against the host";
    else if (strcmp(mode, "verify-ca") == 0)
        verified = "the server's certificate verified against the CA, its "
                   "name not checked";
    else
        verified = "the server's certificate not verified: anyone in the "
                   "path can pose as the server (sslmode=verify-full "
                   "checks it)";
    snprintf(buf, len, "%s, %s (sslmode %s): %s", protocol ? protocol : "TLS",
             cipher ? cipher : "unknown cipher", mode, verified);
}
