/*
 * libpq's conninfo rules, applied to a connection's effective options
 * (PQconninfo): the comma lists of host, hostaddr and port (read by
 * bounded_connect.c and by doctor's host list) and connect_timeout (by
 * bounded_connect.c, the library's client.c and the CLI's
 * connection.c).  Internal, header-only.
 */
#ifndef PGLOCK_CONNINFO_RULES_H
#define PGLOCK_CONNINFO_RULES_H

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pglock.h"

/* How many items a comma-separated libpq list has (0 when absent). */
static inline int conninfo_list_length(const char *list)
{
    if (!list || !*list)
        return 0;
    int n = 1;
    for (; *list; list++)
        n += *list == ',';
    return n;
}

/* Item i of a comma-separated libpq list ("" when absent).  A port list
 * of one item applies to every host: callers pass index 0 for it. */
static inline void conninfo_list_item(const char *list, int i, char *buf,
                                      size_t len)
{
    buf[0] = '\0';
    for (const char *p = list ? list : ""; i >= 0; i--) {
        size_t n = strcspn(p, ",");
        if (i == 0)
            snprintf(buf, len, "%.*s", (int)n, p);
        if (!p[n])
            return;
        p += n + 1;
    }
}

/* libpq's rule for a connect_timeout value: whole seconds, at least 2,
 * and 0 or less meaning none (-1 here).  Unset or empty, pglock's own
 * default, PGLOCK_CONNECT_TIMEOUT_S, where libpq would wait forever.  A
 * value libpq cannot parse never gets here: it refuses the conninfo. */
static inline long conninfo_timeout_ms(const char *value)
{
    long s = PGLOCK_CONNECT_TIMEOUT_S;
    if (value && *value) {
        char *end;
        s = strtol(value, &end, 10);
        while (isspace((unsigned char)*end))
            end++; /* libpq allows trailing white space */
        if (*end)
            s = PGLOCK_CONNECT_TIMEOUT_S;
    }
    if (s <= 0)
        return -1;
    return (s < 2 ? 2 : s) * 1000L;
}

/* conninfo_timeout_ms() of an open connection's connect_timeout
 * (PGCONNECT_TIMEOUT included). */
static inline long conn_timeout_ms(PGconn *conn)
{
    const char *value = NULL;
    PQconninfoOption *opts = PQconninfo(conn);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "connect_timeout") == 0)
            value = o->val;
    long ms = conninfo_timeout_ms(value);
    PQconninfoFree(opts);
    return ms;
}

#endif
