/* One look at the server's advisory locks (see inspect.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "inspect.h"

/*
 * The one statement.  %s is pg_locks.waitstart on PostgreSQL 14+ and a
 * NULL before (the column does not exist there).  Durations are computed
 * by the server against its own clock, so client clock skew does not
 * matter.  pg_blocking_pids() is called for waiters only: it is the
 * expensive part.
 */
static const char query_template[] =
    "SELECT d.datname,"
    " l.classid::text, l.objid::text, l.objsubid,"
    " l.mode = 'ExclusiveLock', l.granted, l.pid,"
    " a.pid IS NOT NULL,"
    " a.query IS NOT DISTINCT FROM '<insufficient privilege>',"
    " a.usename, a.application_name, host(a.client_addr), a.client_port,"
    " a.state,"
    " CASE WHEN l.granted AND a.state LIKE 'idle%%'"
    "  THEN extract(epoch FROM now() - a.state_change) END,"
    " CASE WHEN l.granted THEN extract(epoch FROM now() - a.backend_start) END,"
    " CASE WHEN NOT l.granted"
    "  THEN extract(epoch FROM now() - coalesce(%s, a.query_start)) END,"
    " CASE WHEN NOT l.granted THEN CASE WHEN %s IS NOT NULL THEN 'waitstart'"
    "  WHEN a.query_start IS NOT NULL THEN 'query_start' END END,"
    " CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid)::text END"
    " FROM pg_locks l"
    " LEFT JOIN pg_database d ON d.oid = l.database"
    " LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory'"
    "  AND ($1::bool OR l.database = (SELECT oid FROM pg_database"
    "   WHERE datname = current_database()))"
    " ORDER BY l.granted DESC, %s NULLS LAST, l.pid";

enum {
    C_DATNAME, C_CLASSID, C_OBJID, C_OBJSUBID, C_EXCLUSIVE, C_GRANTED, C_PID,
    C_HAS_SESSION, C_HIDDEN, C_USER, C_APPNAME, C_ADDR, C_PORT, C_STATE,
    C_HELD_MIN, C_HELD_MAX, C_WAITING, C_WAITING_SOURCE, C_BLOCKED_BY,
    C_NCOLS
};

int inspect_key_from_locktag(uint32_t classid, uint32_t objid, int objsubid,
                             pglock_key *out)
{
    memset(out, 0, sizeof *out);
    if (objsubid == 1) {
        /* Two's complement: the bigint's bits are classid:objid. */
        uint64_t bits = ((uint64_t)classid << 32) | objid;
        int64_t id;
        memcpy(&id, &bits, sizeof id);
        out->kind = PGLOCK_KEY_INT64;
        out->id = id;
        return 0;
    }
    if (objsubid == 2) {
        int32_t ns, nsid;
        memcpy(&ns, &classid, sizeof ns);
        memcpy(&nsid, &objid, sizeof nsid);
        out->kind = PGLOCK_KEY_PAIR;
        out->ns = ns;
        out->nsid = nsid;
        return 0;
    }
    return -1;
}

int inspect_same_lock(const pglock_key *a, const pglock_key *b)
{
    int a_pair = a->kind == PGLOCK_KEY_PAIR, b_pair = b->kind == PGLOCK_KEY_PAIR;
    if (a_pair != b_pair)
        return 0;
    if (a_pair)
        return a->ns == b->ns && a->nsid == b->nsid;
    return a->id == b->id;
}

void inspect_key_text(const pglock_key *key, char *buf, size_t len)
{
    if (key->kind == PGLOCK_KEY_PAIR)
        snprintf(buf, len, "%d:%d", (int)key->ns, (int)key->nsid);
    else
        snprintf(buf, len, "%lld", (long long)key->id);
}

static const char *text_or_null(const PGresult *res, int row, int col)
{
    return PQgetisnull(res, row, col) ? NULL : PQgetvalue(res, row, col);
}

static int is_true(const PGresult *res, int row, int col)
{
    return !PQgetisnull(res, row, col) && PQgetvalue(res, row, col)[0] == 't';
}

static double seconds_or_unknown(const PGresult *res, int row, int col)
{
    if (PQgetisnull(res, row, col))
        return -1;
    double s = strtod(PQgetvalue(res, row, col), NULL);
    return s < 0 ? 0 : s; /* a wait that began after our now() */
}

static int parse_u32(const char *s, uint32_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end || v > UINT32_MAX)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Counts the pids in an int[] literal such as "{12,34}". */
static int count_pids(const char *s)
{
    int n = 0;
    for (; *s; s++)
        if (*s >= '0' && *s <= '9' && (s[1] < '0' || s[1] > '9'))
            n++;
    return n;
}

static int parse_pids(const char *s, int *out)
{
    int n = 0;
    while (*s) {
        if (*s >= '0' && *s <= '9') {
            char *end;
            out[n++] = (int)strtol(s, &end, 10);
            s = end;
        } else {
            s++;
        }
    }
    return n;
}

/* Database, then bigints before pairs, then the key, then server order
 * (holders first, waiters in the order they began to wait). */
static int compare_entries(const void *pa, const void *pb)
{
    const inspect_entry *a = pa, *b = pb;
    int c = strcmp(a->database ? a->database : "", b->database ? b->database : "");
    if (c)
        return c;
    if (a->key.kind != b->key.kind)
        return a->key.kind < b->key.kind ? -1 : 1;
    if (a->key.kind == PGLOCK_KEY_PAIR) {
        if (a->key.ns != b->key.ns)
            return a->key.ns < b->key.ns ? -1 : 1;
        if (a->key.nsid != b->key.nsid)
            return a->key.nsid < b->key.nsid ? -1 : 1;
    } else if (a->key.id != b->key.id) {
        return a->key.id < b->key.id ? -1 : 1;
    }
    return a->order - b->order;
}

int inspect_advisory_locks(PGconn *conn, int all_databases,
                           inspect_snapshot *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *waitstart = PQserverVersion(conn) >= 140000
                                ? "l.waitstart" : "NULL::timestamptz";
    char sql[sizeof query_template + 64];
    snprintf(sql, sizeof sql, query_template, waitstart, waitstart, waitstart);
    const char *params[1] = {all_databases ? "true" : "false"};
    pglock_error qerr;
    PGresult *res = cli_query(conn, sql, 1, params, &qerr);
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *msg = res ? PQresultErrorMessage(res) : qerr.message;
        if (!msg || !*msg)
            msg = PQerrorMessage(conn);
        size_t len = strcspn(msg, "\n");
        snprintf(err, errlen, "could not read pg_locks: %.*s", (int)len, msg);
        PQclear(res);
        return -1;
    }
    if (PQnfields(res) != C_NCOLS) {
        snprintf(err, errlen, "could not read pg_locks: unexpected answer");
        PQclear(res);
        return -1;
    }
    int rows = PQntuples(res);
    int npids = 0;
    for (int r = 0; r < rows; r++)
        if (!PQgetisnull(res, r, C_BLOCKED_BY))
            npids += count_pids(PQgetvalue(res, r, C_BLOCKED_BY));
    out->entries = calloc((size_t)rows + 1, sizeof *out->entries);
    out->pids = calloc((size_t)npids + 1, sizeof *out->pids);
    if (!out->entries || !out->pids) {
        free(out->entries);
        free(out->pids);
        PQclear(res);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    out->res = res;
    int used = 0;
    for (int r = 0; r < rows; r++) {
        inspect_entry *e = &out->entries[out->n];
        uint32_t classid, objid;
        if (parse_u32(PQgetvalue(res, r, C_CLASSID), &classid) ||
            parse_u32(PQgetvalue(res, r, C_OBJID), &objid) ||
            inspect_key_from_locktag(classid, objid,
                                     atoi(PQgetvalue(res, r, C_OBJSUBID)),
                                     &e->key))
            continue; /* not a locktag pg_advisory_lock() makes */
        e->order = r;
        e->database = text_or_null(res, r, C_DATNAME);
        e->exclusive = is_true(res, r, C_EXCLUSIVE);
        e->granted = is_true(res, r, C_GRANTED);
        e->pid = PQgetisnull(res, r, C_PID) ? 0 : atoi(PQgetvalue(res, r, C_PID));
        e->has_session = is_true(res, r, C_HAS_SESSION);
        e->hidden = is_true(res, r, C_HIDDEN);
        e->user = text_or_null(res, r, C_USER);
        e->application_name = text_or_null(res, r, C_APPNAME);
        e->client_addr = text_or_null(res, r, C_ADDR);
        e->client_port = PQgetisnull(res, r, C_PORT) ? 0 : atoi(PQgetvalue(res, r, C_PORT));
        e->state = text_or_null(res, r, C_STATE);
        e->held_min_s = seconds_or_unknown(res, r, C_HELD_MIN);
        e->held_max_s = seconds_or_unknown(res, r, C_HELD_MAX);
        e->waiting_s = seconds_or_unknown(res, r, C_WAITING);
        e->waiting_source = text_or_null(res, r, C_WAITING_SOURCE);
        if (!PQgetisnull(res, r, C_BLOCKED_BY)) {
            e->blocked_by = out->pids + used;
            e->n_blocked_by = parse_pids(PQgetvalue(res, r, C_BLOCKED_BY),
                                         out->pids + used);
            used += e->n_blocked_by;
        }
        out->n++;
    }
    qsort(out->entries, (size_t)out->n, sizeof *out->entries, compare_entries);
    return 0;
}

void inspect_snapshot_clear(inspect_snapshot *snap)
{
    PQclear(snap->res);
    free(snap->entries);
    free(snap->pids);
    memset(snap, 0, sizeof *snap);
}
