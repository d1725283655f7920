/*
 * Who holds what: one statement over pg_locks, pg_stat_activity and
 * pg_database, decoded into keys (pglock_holders_list() in pglock.h).
 *
 * Cost.  pg_locks copies the server's whole lock table, so the statement
 * costs at least what SELECT count(*) FROM pg_locks costs.  The rest is
 * kept in proportion: pg_stat_activity (itself a join with pg_database
 * and pg_authid) and pg_database are read once each, in CTEs, and hashed
 * against the lock rows, instead of being looked up once per lock (the
 * planner believes pg_locks has one row and chose nested loops: 13x
 * count(*) with 10,000 locks); the server does not sort (the client sorts
 * what it needs, in n log n); pg_blocking_pids() runs for waiters only.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "internal.h"

/*
 * %s is pg_locks.waitstart on PostgreSQL 14+ and a NULL before (the
 * column does not exist there).  $1: every database; $2 $3 $4: the
 * classids, objids and objsubids of the keys asked for, or NULL for all.
 * Durations are the server's, against its own clock: client clock skew
 * does not matter.  The first column says whether the server is a
 * standby; the outer join gives it a row even when no lock matches (a
 * row whose lock columns are all NULL).
 */
static const char query_template[] =
    "WITH l AS MATERIALIZED ("
    " SELECT l.database, l.classid, l.objid, l.objsubid,"
    "  l.mode = 'ExclusiveLock' AS exclusive, l.granted, l.pid,"
    "  %s AS waitstart"
    " FROM pg_locks l"
    " WHERE l.locktype = 'advisory'"
    "  AND ($1::bool OR l.database = (SELECT oid FROM pg_database"
    "   WHERE datname = current_database()))"
    "  AND ($2::oid[] IS NULL OR (l.classid, l.objid, l.objsubid) IN"
    "   (SELECT * FROM unnest($2::oid[], $3::oid[], $4::int2[])))),"
    " a AS MATERIALIZED ("
    " SELECT pid, usename, application_name, host(client_addr) AS addr,"
    "  client_port, state, query_start,"
    "  query IS NOT DISTINCT FROM '<insufficient privilege>' AS hidden,"
    "  CASE WHEN state LIKE 'idle%%'"
    "   THEN extract(epoch FROM now() - state_change) END AS idle_s,"
    "  extract(epoch FROM now() - backend_start) AS age_s"
    " FROM pg_stat_activity),"
    " d AS MATERIALIZED (SELECT oid, datname FROM pg_database)"
    " SELECT r.in_recovery, d.datname, l.classid, l.objid, l.objsubid,"
    "  l.exclusive,"
    "  l.granted, l.pid, a.pid IS NOT NULL, a.hidden, a.usename,"
    "  a.application_name, a.addr, a.client_port, a.state,"
    "  CASE WHEN l.granted THEN a.idle_s END,"
    "  CASE WHEN l.granted THEN a.age_s END,"
    "  CASE WHEN NOT l.granted"
    "   THEN extract(epoch FROM now() - coalesce(l.waitstart, a.query_start))"
    "  END,"
    "  CASE WHEN NOT l.granted THEN CASE WHEN l.waitstart IS NOT NULL"
    "   THEN 'waitstart' WHEN a.query_start IS NOT NULL THEN 'query_start'"
    "  END END,"
    "  CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid)::text END"
    " FROM (SELECT pg_is_in_recovery()) r(in_recovery) LEFT JOIN"
    "  (l LEFT JOIN a ON a.pid = l.pid LEFT JOIN d ON d.oid = l.database)"
    "  ON true";

enum {
    C_IN_RECOVERY, C_DATNAME, C_CLASSID, C_OBJID, C_OBJSUBID, C_EXCLUSIVE, C_GRANTED, C_PID,
    C_HAS_SESSION, C_HIDDEN, C_USER, C_APPNAME, C_ADDR, C_PORT, C_STATE,
    C_HELD_MIN, C_HELD_MAX, C_WAITING, C_WAITING_SOURCE, C_BLOCKED_BY,
    C_NCOLS
};

struct pglock_holders {
    PGresult *res;         /* the strings of the entries point into it */
    pglock_holder *entries;
    int n;
    int *pids;             /* storage for every blocked_by */
};

int pglock__key_from_locktag(uint32_t classid, uint32_t objid, int objsubid,
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

/* The order pglock_holders_get() promises: database, bigints before
 * pairs, the key; holders before waiters; waiters in the order they began
 * to wait (waitstart; those without one after), then by pid. */
static int compare_entries(const pglock_holder *a, const pglock_holder *b)
{
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
    if (a->granted != b->granted)
        return a->granted ? -1 : 1;
    if (!a->granted) {
        int ea = a->waiting_source && !strcmp(a->waiting_source, "waitstart");
        int eb = b->waiting_source && !strcmp(b->waiting_source, "waitstart");
        if (ea != eb)
            return ea ? -1 : 1;
        if (ea && a->waiting_s != b->waiting_s)
            return a->waiting_s > b->waiting_s ? -1 : 1; /* longer first */
    }
    if (a->pid != b->pid)
        return a->pid < b->pid ? -1 : 1;
    return 0;
}

static int compare_qsort(const void *pa, const void *pb)
{
    return compare_entries(pa, pb);
}

/* Fills e from row r; -1 when the row is not a locktag that
 * pg_advisory_lock() makes. */
static int decode_row(const PGresult *res, int r, pglock_holder *e)
{
    uint32_t classid, objid;
    if (parse_u32(PQgetvalue(res, r, C_CLASSID), &classid) ||
        parse_u32(PQgetvalue(res, r, C_OBJID), &objid) ||
        pglock__key_from_locktag(classid, objid,
                                 atoi(PQgetvalue(res, r, C_OBJSUBID)), &e->key))
        return -1;
    e->database = text_or_null(res, r, C_DATNAME);
    e->mode = is_true(res, r, C_EXCLUSIVE) ? PGLOCK_EXCLUSIVE : PGLOCK_SHARED;
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
    return 0;
}

/* Decodes a successful answer into a new list (taking res); NULL when out
 * of memory (res is then the caller's). */
static pglock_holders *decode(PGresult *res)
{
    int rows = PQntuples(res);
    size_t npids = 0;
    for (int r = 0; r < rows; r++)
        if (!PQgetisnull(res, r, C_BLOCKED_BY))
            npids += (size_t)count_pids(PQgetvalue(res, r, C_BLOCKED_BY));
    pglock_holders *list = calloc(1, sizeof *list);
    if (!list)
        return NULL;
    list->entries = calloc((size_t)rows + 1, sizeof *list->entries);
    list->pids = calloc(npids + 1, sizeof *list->pids);
    if (!list->entries || !list->pids) {
        free(list->entries);
        free(list->pids);
        free(list);
        return NULL;
    }
    list->res = res;
    size_t used = 0;
    for (int r = 0; r < rows; r++) {
        pglock_holder *e = &list->entries[list->n];
        if (decode_row(res, r, e))
            continue;
        if (!PQgetisnull(res, r, C_BLOCKED_BY)) {
            e->blocked_by = list->pids + used;
            e->n_blocked_by = parse_pids(PQgetvalue(res, r, C_BLOCKED_BY),
                                         list->pids + used);
            used += (size_t)e->n_blocked_by;
        }
        list->n++;
    }
    qsort(list->entries, (size_t)list->n, sizeof *list->entries, compare_qsort);
    return list;
}

/* The keys' locktags as three int arrays ("{1,2}"), or EINVAL. */
static int key_arrays(const pglock_key *keys, int nkeys, char **cls,
                      char **objs, char **subs, pglock_error *err)
{
    size_t cap = (size_t)nkeys * 12 + 3;
    char *a[3];
    for (int k = 0; k < 3; k++)
        a[k] = malloc(cap);
    if (!a[0] || !a[1] || !a[2]) {
        free(a[0]);
        free(a[1]);
        free(a[2]);
        return pglock__error_set(err, PGLOCK_ENOMEM, NULL, "out of memory");
    }
    size_t len[3] = {1, 1, 1};
    a[0][0] = a[1][0] = a[2][0] = '{';
    for (int i = 0; i < nkeys; i++) {
        uint32_t classid, objid;
        int sub;
        if (pglock_key_locktag(&keys[i], &classid, &objid, &sub)) {
            free(a[0]);
            free(a[1]);
            free(a[2]);
            return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                     "key %d has no value yet: resolve "
                                     "legacy keys first", i + 1);
        }
        const char *sep = i ? "," : "";
        len[0] += (size_t)snprintf(a[0] + len[0], cap - len[0], "%s%" PRIu32, sep, classid);
        len[1] += (size_t)snprintf(a[1] + len[1], cap - len[1], "%s%" PRIu32, sep, objid);
        len[2] += (size_t)snprintf(a[2] + len[2], cap - len[2], "%s%d", sep, sub);
    }
    for (int k = 0; k < 3; k++)
        snprintf(a[k] + len[k], cap - len[k], "}");
    *cls = a[0];
    *objs = a[1];
    *subs = a[2];
    return PGLOCK_OK;
}

/* Sends the statement and waits for its answer, bounded by timeout_ms;
 * the answer (PGRES_TUPLES_OK) in *out, or an error code. */
static int run_query(PGconn *conn, const char *const params[4],
                     long timeout_ms, PGresult **out, pglock_error *err)
{
    const char *waitstart = PQserverVersion(conn) >= 140000
                                ? "l.waitstart" : "NULL::timestamptz";
    char sql[sizeof query_template + 32];
    snprintf(sql, sizeof sql, query_template, waitstart);
    if (!PQsendQueryParams(conn, sql, 4, NULL, params, NULL, NULL, 0))
        return pglock__error_result(err, NULL, conn, "could not read pg_locks");
    pglock__wait w = {.deadline = pglock__deadline(timeout_ms, 0),
                      .interrupt = NULL,
                      .interrupt_fd = -1,
                      .cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS};
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(conn, &w, res, &nres, &cancelled);
    PGresult *last = nres > 0 ? res[nres - 1] : NULL;
    int rc;
    if (end == PGLOCK__WAIT_ABANDONED) {
        shutdown(PQsocket(conn), SHUT_RDWR); /* only this is sure to end it */
        rc = pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                               "could not read pg_locks: no answer within "
                               "%ld ms, and the cancel was not answered, so "
                               "the connection was shut down: PQfinish() it",
                               timeout_ms);
    } else if (end == PGLOCK__WAIT_CONNLOST || !last) {
        rc = pglock__error_result(err, last, conn, "could not read pg_locks");
    } else if (PQresultStatus(last) != PGRES_TUPLES_OK) {
        rc = pglock__error_result(err, last, conn, "could not read pg_locks");
        if (rc == PGLOCK_EINTR && cancelled == PGLOCK_ETIMEDOUT)
            rc = pglock__error_set(err, PGLOCK_ETIMEDOUT, "57014",
                                   "could not read pg_locks: no answer within "
                                   "%ld ms", timeout_ms);
    } else if (PQnfields(last) != C_NCOLS || PQntuples(last) < 1) {
        rc = pglock__error_set(err, PGLOCK_ESERVER, NULL,
                               "could not read pg_locks: unexpected answer");
    } else if (is_true(last, 0, C_IN_RECOVERY)) {
        rc = pglock__error_set(err, PGLOCK_ESTANDBY, NULL,
                               "the server is a standby (in recovery): "
                               "advisory locks are taken on the primary, "
                               "and none of them can be seen here");
    } else {
        *out = last;
        res[nres - 1] = NULL;
        rc = PGLOCK_OK;
    }
    pglock__clear_results(res, nres);
    return rc;
}

int pglock_holders_list(pglock_holders **out, PGconn *conn,
                        const pglock_key *keys, int nkeys, unsigned flags,
                        long timeout_ms, pglock_error *err)
{
    if (err)
        memset(err, 0, sizeof *err);
    if (!out)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "no out pointer");
    *out = NULL;
    if (nkeys < 0 || (nkeys > 0 && !keys) || timeout_ms == 0 || timeout_ms < -1)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 "invalid keys or timeout");
    if (!conn || PQstatus(conn) != CONNECTION_OK)
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "no connection to the server");
    if (PQisBusy(conn) || PQtransactionStatus(conn) == PQTRANS_ACTIVE)
        return pglock__error_set(err, PGLOCK_ESTATE, NULL,
                                 "the connection is busy with another query");
    char *cls = NULL, *objs = NULL, *subs = NULL;
    if (nkeys > 0) {
        int rc = key_arrays(keys, nkeys, &cls, &objs, &subs, err);
        if (rc)
            return rc;
    }
    const char *params[4] = {
        flags & PGLOCK_HOLDERS_ALL_DATABASES ? "true" : "false", cls, objs, subs};
    PGresult *res = NULL;
    int rc = run_query(conn, params, timeout_ms, &res, err);
    free(cls);
    free(objs);
    free(subs);
    if (rc)
        return rc;
    *out = decode(res);
    if (!*out) {
        PQclear(res);
        return pglock__error_set(err, PGLOCK_ENOMEM, NULL, "out of memory");
    }
    return PGLOCK_OK;
}

int pglock_holders_count(const pglock_holders *list)
{
    return list ? list->n : 0;
}

const pglock_holder *pglock_holders_get(const pglock_holders *list, int i)
{
    if (!list || i < 0 || i >= list->n)
        return NULL;
    return &list->entries[i];
}

void pglock_holders_free(pglock_holders *list)
{
    if (!list)
        return;
    PQclear(list->res);
    free(list->entries);
    free(list->pids);
    free(list);
}
