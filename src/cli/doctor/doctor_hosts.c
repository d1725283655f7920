/*
 * doctor_hosts.c — doctor's look at every host of a multi-host conninfo.
 *
 * libpq connects to the first listed host that suits target_session_attrs
 * and says nothing about the others.  After a failover that left the old
 * primary running, two of them accept writes, and a lock taken on one
 * excludes nobody on the other: doctor asks each host for its role.
 *
 * The host list comes from libpq itself (PQconninfo() of the connection
 * made, PG* variables and service files included); only its documented
 * comma-separated lists are split here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounded_conn.h"
#include "cli.h"
#include "error_text.h"
#include "conninfo_rules.h"
#include "doctor_hosts.h"

#define CONNINFO_MAX_OPTIONS 64

void doctor_first_line(char *buf, size_t len, const char *msg)
{
    pglock__first_line(buf, len, msg);
    if (len > 0 && !*buf)
        snprintf(buf, len, "unknown error");
}

/* Connects to host h alone with every other option of opts, and sets
 * h->role. */
static void probe(const PQconninfoOption *opts, doctor_host *h,
                  const char *hostaddr)
{
    const char *k[CONNINFO_MAX_OPTIONS + 6], *v[CONNINFO_MAX_OPTIONS + 6];
    int n = 0, has_timeout = 0;
    for (const PQconninfoOption *o = opts; o->keyword; o++) {
        if (!o->val || n == CONNINFO_MAX_OPTIONS)
            continue;
        if (!strcmp(o->keyword, "host") || !strcmp(o->keyword, "hostaddr") ||
            !strcmp(o->keyword, "port") ||
            !strcmp(o->keyword, "target_session_attrs") ||
            !strcmp(o->keyword, "application_name"))
            continue;
        has_timeout |= !strcmp(o->keyword, "connect_timeout");
        k[n] = o->keyword;
        v[n++] = o->val;
    }
    k[n] = "host", v[n++] = h->host;
    if (*hostaddr)
        k[n] = "hostaddr", v[n++] = hostaddr;
    k[n] = "port", v[n++] = h->port;
    k[n] = "target_session_attrs", v[n++] = "any";
    k[n] = "application_name", v[n++] = "pglock doctor";
    if (!has_timeout)
        k[n] = "connect_timeout", v[n++] = "3";
    k[n] = NULL, v[n] = NULL;

    h->role = "unreachable";
    pglock_error err = {0};
    PGconn *c = pglock__connect_params(k, v, 0, -1, -1, &err);
    if (!c) {
        doctor_first_line(h->error, sizeof h->error, err.message);
        return;
    }
    PGresult *res = cli_query(c, "SELECT pg_is_in_recovery()", 0, NULL, &err);
    if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        h->role = PQgetvalue(res, 0, 0)[0] == 't' ? "standby" : "primary";
    else
        doctor_first_line(h->error, sizeof h->error,
                          res ? PQresultErrorMessage(res) : err.message);
    PQclear(res);
    PQfinish(c);
}

int doctor_hosts(PGconn *conn, doctor_host *out, int max)
{
    PQconninfoOption *opts = PQconninfo(conn);
    if (!opts)
        return 0;
    const char *host = NULL, *hostaddr = NULL, *port = NULL;
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        if (!strcmp(o->keyword, "host"))
            host = o->val;
        else if (!strcmp(o->keyword, "hostaddr"))
            hostaddr = o->val;
        else if (!strcmp(o->keyword, "port"))
            port = o->val;
    }
    int n = conninfo_list_length(host);
    if (conninfo_list_length(hostaddr) > n)
        n = conninfo_list_length(hostaddr);
    if (n > max)
        n = max;
    if (n > 1) {
        for (int i = 0; i < n; i++) {
            char addr[256];
            conninfo_list_item(host, i, out[i].host, sizeof out[i].host);
            conninfo_list_item(hostaddr, i, addr, sizeof addr);
            conninfo_list_item(port, conninfo_list_length(port) > 1 ? i : 0,
                               out[i].port, sizeof out[i].port);
            out[i].error[0] = '\0';
            if (!out[i].host[0])
                snprintf(out[i].host, sizeof out[i].host, "%s", addr);
            probe(opts, &out[i], addr);
        }
    }
    PQconninfoFree(opts);
    return n;
}
