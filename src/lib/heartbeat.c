/*
 * Heartbeat: one cheap query confirming that the lock connection is alive,
 * still on the backend it opened, and that the backend still holds every
 * lock the client counts (pg_locks).  Non-blocking, for event loops.
 */
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* The arrays are parameters ($1..$4), except in xact hold: there the
 * query must use the simple protocol, because an extended-protocol query
 * leaves its unnamed portal, and with it a snapshot (backend_xmin), open
 * until the next query, which would hold back VACUUM.  Their elements are
 * numbers and two fixed words, so they are safe as literals. */
static const char beat_fmt[] =
    "SELECT pg_backend_pid(), (SELECT count(*) FROM"
    " unnest(%s%s%s::oid[], %s%s%s::oid[], %s%s%s::int2[], %s%s%s::text[])"
    " AS k(c, o, s, m)"
    " WHERE NOT EXISTS (SELECT 1 FROM pg_locks l"
    "  WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()"
    "  AND l.granted AND l.classid = k.c AND l.objid = k.o"
    "  AND l.objsubid = k.s AND l.mode = k.m))";

/* "{a,b,c}" of one column of the holds; caller frees. */
static char *array_of(const pglock_client *c, int column)
{
    size_t cap = 3 + c->nholds * 16;
    char *buf = malloc(cap), *p = buf;
    if (!buf)
        return NULL;
    *p++ = '{';
    for (size_t i = 0; i < c->nholds; i++) {
        const pglock__hold *h = &c->holds[i];
        if (i)
            *p++ = ',';
        if (column == 0)
            p += sprintf(p, "%" PRIu32, h->classid);
        else if (column == 1)
            p += sprintf(p, "%" PRIu32, h->objid);
        else if (column == 2)
            p += sprintf(p, "%d", h->objsubid);
        else
            p += sprintf(p, "%s", h->mode == PGLOCK_SHARED ? "ShareLock"
                                                           : "ExclusiveLock");
    }
    *p++ = '}';
    *p = '\0';
    return buf;
}

int pglock_heartbeat_send(pglock_client *c)
{
    if (!c)
        return PGLOCK_EINVAL;
    int ready = pglock__client_ready(c);
    if (ready)
        return ready;
    char *arr[4] = {NULL, NULL, NULL, NULL};
    int ok = 1;
    for (int i = 0; i < 4; i++)
        ok = ok && (arr[i] = array_of(c, i)) != NULL;
    if (!ok) {
        for (int i = 0; i < 4; i++)
            free(arr[i]);
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    }
    int simple = c->hold == PGLOCK_HOLD_XACT;
    size_t len = sizeof beat_fmt + 16;
    for (int i = 0; i < 4; i++)
        len += strlen(arr[i]);
    char *sql = malloc(len);
    if (!sql) {
        for (int i = 0; i < 4; i++)
            free(arr[i]);
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    }
    const char *q = simple ? "'" : "";
    snprintf(sql, len, beat_fmt, q, simple ? arr[0] : "$1", q,
             q, simple ? arr[1] : "$2", q, q, simple ? arr[2] : "$3", q,
             q, simple ? arr[3] : "$4", q);
    int64_t now = pglock_now_ms();
    const char *const params[4] = {arr[0], arr[1], arr[2], arr[3]};
    int sent = simple ? PQsendQuery(c->conn, sql)
                      : PQsendQueryParams(c->conn, sql, 4, NULL, params, NULL,
                                          NULL, 0);
    free(sql);
    for (int i = 0; i < 4; i++)
        free(arr[i]);
    if (!sent) {
        pglock__fail_result(c, NULL, "could not send the heartbeat");
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    c->heartbeat_busy = 1;
    c->heartbeat_sent_at = now;
    return 0;
}

/* The heartbeat failed: the client's locks can no longer be vouched for.
 * Close the connection, so that whatever it still holds is freed too. */
static int lost(pglock_client *c)
{
    pglock__client_drop(c);
    return PGLOCK_ECONNLOST;
}

int pglock_heartbeat_poll(pglock_client *c)
{
    if (!c)
        return PGLOCK_EINVAL;
    if (!c->conn)
        return pglock__client_ready(c);
    if (!c->heartbeat_busy)
        return pglock__fail(c, PGLOCK_ESTATE, "no heartbeat in progress");
    if (!PQconsumeInput(c->conn)) {
        PGresult *r = PQisBusy(c->conn) ? NULL : PQgetResult(c->conn);
        pglock__fail_result(c, r, "heartbeat failed");
        PQclear(r);
        return lost(c);
    }
    int confirmed = -1;  /* -1: no answer yet */
    PGresult *bad = NULL;
    while (!PQisBusy(c->conn)) {
        PGresult *r = PQgetResult(c->conn);
        if (!r) {
            c->heartbeat_busy = 0;
            break;
        }
        if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
            PQclear(bad);
            bad = r;
            continue;
        }
        int pid = atoi(PQgetvalue(r, 0, 0));
        long missing = atol(PQgetvalue(r, 0, 1));
        PQclear(r);
        /* In xact hold with no transaction open, nothing is held and a
         * pooler lends whichever backend it has. */
        int pinned = c->hold == PGLOCK_HOLD_SESSION || c->in_xact;
        if (pinned && pid != c->backend_pid) {
            PQclear(bad);
            c->heartbeat_busy = 0;
            pglock__fail(c, PGLOCK_ECONNLOST,
                         "the lock connection reached backend %d instead of "
                         "%d: the session (and its locks) is gone",
                         pid, c->backend_pid);
            return lost(c);
        }
        confirmed = missing == 0 ? 1 : 0;
        if (!confirmed) {
            PQclear(bad);
            c->heartbeat_busy = 0;
            pglock__fail(c, PGLOCK_ECONNLOST,
                         "the server session no longer holds %ld of the "
                         "locks this client counts", missing);
            return lost(c);
        }
        /* keep reading until the end of the answer */
        c->message[0] = '\0';
        c->confirmed_at = c->heartbeat_sent_at;
    }
    if (bad) {
        c->heartbeat_busy = 0;
        pglock__fail_result(c, bad, "heartbeat failed");
        PQclear(bad);
        return lost(c);
    }
    if (PQstatus(c->conn) != CONNECTION_OK) {
        pglock__fail_result(c, NULL, "heartbeat failed");
        return lost(c);
    }
    if (c->heartbeat_busy)
        return PGLOCK_EAGAIN;
    if (confirmed != 1)
        return pglock__fail(c, PGLOCK_ESERVER, "heartbeat got no answer");
    c->sqlstate[0] = '\0';
    return 0;
}

int pglock_heartbeat(pglock_client *c, long timeout_ms)
{
    int rc = pglock_heartbeat_send(c);
    if (rc != 0)
        return rc;
    int64_t deadline = pglock__deadline(timeout_ms, 0);
    for (;;) {
        rc = pglock_heartbeat_poll(c);
        if (rc != PGLOCK_EAGAIN)
            return rc;
        int64_t left = deadline < 0 ? -1 : deadline - pglock_now_ms();
        if (deadline >= 0 && left <= 0)
            return pglock__fail(c, PGLOCK_ETIMEDOUT,
                                "heartbeat not answered within %ld ms",
                                timeout_ms);
        struct pollfd p = {.fd = PQsocket(c->conn), .events = POLLIN};
        poll(&p, 1, left > 1000 ? 1000 : (int)left);
    }
}
