/*
 * Who holds what: one statement over pg_locks, pg_stat_activity and
 * pg_database, decoded into keys (pglock_holders_list() in pglock.h).
 *
 * Cost.  pg_locks copies the server's whole lock table, so the statement
 * costs at least what SELECT count(*) FROM pg_locks costs.  The rest is
 * kept in proportion: a session's locks come back as one list in one
 * row (per database, kind, mode and grant), and its session
 * (pg_stat_activity, itself a join with pg_database and pg_authid) and
 * database come once each, in rows of their own, joined here by binary
 * search.  Joining on the server sent every session column once per
 * lock, and the planner, which believes pg_locks has one row, chose
 * nested loops: 5x to 13x count(*) with 10,000 locks.  The server does
 * not sort (the client sorts, n log n); pg_blocking_pids() runs for
 * waiters only.
 *
 * In the client (what a whole `pglock status` costs beside psql reading
 * count(*)): one row per lock cost more in libpq, which allocates every
 * row and every field of it, than everything else together; a list is
 * one field.  Each session's columns are parsed once, not once per lock
 * it holds, numbers are read by hand, and the sort compares database
 * names only when they are not the same string of the answer.
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "database_name.h"
#include "internal.h"
#include "prefault.h"

/*
 * %s is pg_locks.waitstart on PostgreSQL 14+ and a NULL before (the
 * column does not exist there).  $1: every database; $2 $3 $4: the
 * classids, objids and objsubids of the keys asked for, or NULL for all.
 *
 * Four kinds of rows in one answer, told apart by the first column, all
 * other columns text (one UNION ALL, so one type per column): 'r' once,
 * whether the server is in recovery; 'd' per database (oid, name); 's'
 * per session of pg_stat_activity; 'l' per session's advisory lock
 * requests of one database, kind (objsubid), mode and grant.  A lock row
 * carries only the locks' own columns and the client joins it with its
 * session and database: the session's columns are sent once per session,
 * not once per lock, which is what keeps the statement near the cost of
 * reading pg_locks at all.  The locks of a row are one list of their
 * locktags as bigints, classid:objid (for a pair too), separated by
 * spaces: 10,000 locks held by one session are one row, not 10,000
 * rows that libpq would allocate and the server format one by one.  A
 * backend waits for one lock at a time, so a waiter's row is that one
 * lock, and its waitstart (max() of one) and blockers are its own.
 * Durations are the server's, against its own clock: client clock skew
 * does not matter.
 *
 * Two choices that keep a new backend's first statement cheap (what one
 * `pglock status` runs; at 10,000 locks, 33 ms on the server became
 * 26 ms, against 17 ms for count(*)):
 * - Sessions come from pg_stat_get_activity(), the function under the
 *   pg_stat_activity view, and the user's name from pg_get_userbyid():
 *   the view also joins pg_database and pg_authid, which a new backend
 *   must look up and plan (about 4 ms).  A role dropped while its session
 *   lives reads "unknown (OID=n)" instead of NULL.  The current
 *   database's oid is our own session's datid, for the same reason.
 * - The constant '0'::xid among the grouping columns changes no group: it
 *   makes the planner hash them, since xid can be hashed but not sorted.
 *   Believing pg_locks returns a handful of rows, it would sort instead,
 *   copying every lock row before grouping (about 4 ms more).
 */
static const char query_template[] =
    "SELECT 'r', NULL::int, pg_is_in_recovery()::text, NULL::text,"
    " NULL::text, NULL::text, NULL::text, NULL::text, NULL::text,"
    " NULL::text, NULL::text"
    " UNION ALL"
    " SELECT 'd', NULL, oid::text, datname::text,"
    " NULL, NULL, NULL, NULL, NULL, NULL, NULL FROM pg_database"
    " UNION ALL"
    " SELECT 's', pid, pg_get_userbyid(usesysid)::text, application_name,"
    "  host(client_addr),"
    "  client_port::text, state,"
    "  (query IS NOT DISTINCT FROM '<insufficient privilege>')::text,"
    "  CASE WHEN state LIKE 'idle%%'"
    "   THEN extract(epoch FROM now() - state_change)::text END,"
    "  extract(epoch FROM now() - backend_start)::text,"
    "  extract(epoch FROM now() - query_start)::text"
    " FROM pg_stat_get_activity(NULL) WHERE pid IS NOT NULL"
    " UNION ALL"
    " SELECT 'l', l.pid,"
    "  string_agg(((l.classid::int8 << 32) | l.objid::int8)::text, ' '),"
    "  NULL, l.objsubid::text, (l.mode = 'ExclusiveLock')::text,"
    "  l.granted::text, l.database::text,"
    "  CASE WHEN NOT l.granted THEN extract(epoch FROM now() - max(%s))::text END,"
    "  CASE WHEN NOT l.granted THEN pg_blocking_pids(l.pid)::text END, NULL"
    " FROM pg_locks l"
    " WHERE l.locktype = 'advisory'"
    "  AND ($1::bool OR l.database ="
    "   (SELECT datid FROM pg_stat_get_activity(pg_backend_pid())))"
    "  AND ($2::oid[] IS NULL OR (l.classid, l.objid, l.objsubid) IN"
    "   (SELECT * FROM unnest($2::oid[], $3::oid[], $4::int2[])))"
    " GROUP BY l.pid, l.database, l.objsubid, l.mode, l.granted, '0'::xid";

/* The columns, by row kind (C_KIND says which). */
enum { C_KIND, C_PID, C_1, C_2, C_3, C_4, C_5, C_6, C_7, C_8, C_9, C_NCOLS };
/* 'r' */
enum { R_IN_RECOVERY = C_1 };
/* 'd' */
enum { D_OID = C_1, D_NAME = C_2 };
/* 's' */
enum {
    S_USER = C_1,
    S_APPNAME,
    S_ADDR,
    S_PORT,
    S_STATE,
    S_HIDDEN,
    S_IDLE,
    S_AGE,
    S_QUERY_AGE
};
/* 'l' */
enum {
    L_LOCKTAGS = C_1,
    L_OBJSUBID = C_3,
    L_EXCLUSIVE,
    L_GRANTED,
    L_DATABASE,
    L_WAITSTART_AGE,
    L_BLOCKED_BY
};

/* A row of a session or a database, found by pid or oid. */
typedef struct row_ref {
    uint32_t id;
    int row;
} row_ref;

/* A session row, its numbers parsed once for all the locks it holds. */
typedef struct session_ref {
    uint32_t pid;
    int row;
    int hidden;
    int client_port;
    double idle_s, age_s, query_age_s; /* -1: NULL */
} session_ref;

struct pglock_holders {
    PGresult *res; /* the strings of the entries point into it */
    pglock_holder *entries;
    int n;
    int *pids; /* storage for every blocked_by */
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
        return pglock_key_int64(out, id);
    }
    if (objsubid == 2) {
        int32_t ns, nsid;
        memcpy(&ns, &classid, sizeof ns);
        memcpy(&nsid, &objid, sizeof nsid);
        return pglock_key_pair(out, ns, nsid);
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

/* An unsigned decimal that fits in 32 bits, digits only (an oid's or
 * a pid's text), or -1. */
static int parse_u32(const char *s, uint32_t *out)
{
    uint64_t v = 0;
    const char *p = s;
    for (; *p >= '0' && *p <= '9'; p++) {
        v = v * 10 + (uint64_t)(*p - '0');
        if (v > UINT32_MAX)
            return -1;
    }
    if (p == s || *p)
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
    int c = database_name_cmp(a->database, b->database);
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

static int compare_refs(const void *pa, const void *pb)
{
    const row_ref *a = pa, *b = pb;
    return a->id < b->id ? -1 : a->id > b->id;
}

static int compare_sessions(const void *pa, const void *pb)
{
    const session_ref *a = pa, *b = pb;
    return a->pid < b->pid ? -1 : a->pid > b->pid;
}

/* The row of id in refs (sorted), or -1. */
static int find_row(const row_ref *refs, size_t n, uint32_t id)
{
    row_ref key = {id, 0};
    const row_ref *hit = n ? bsearch(&key, refs, n, sizeof *refs, compare_refs)
                           : NULL;
    return hit ? hit->row : -1;
}

/* The answer's sessions (by pid) and databases (by oid), sorted, so that
 * each lock finds its own in log time.  Counts in ns and nd; last is
 * the session found last (a session's locks mostly come in a run). */
typedef struct row_index {
    session_ref *sessions;
    row_ref *databases;
    size_t ns, nd;
    const session_ref *last;
} row_index;

static const session_ref *find_session(row_index *ix, uint32_t pid)
{
    if (ix->last && ix->last->pid == pid)
        return ix->last;
    session_ref key = {.pid = pid};
    const session_ref *hit = ix->ns ? bsearch(&key, ix->sessions, ix->ns,
                                              sizeof key, compare_sessions)
                                    : NULL;
    if (hit)
        ix->last = hit;
    return hit;
}

static session_ref parse_session(const PGresult *res, int r, uint32_t pid)
{
    session_ref s = {pid, r, 0, 0, -1, -1, -1};
    s.hidden = is_true(res, r, S_HIDDEN);
    s.client_port = PQgetisnull(res, r, S_PORT)
                        ? 0
                        : atoi(PQgetvalue(res, r, S_PORT));
    s.idle_s = seconds_or_unknown(res, r, S_IDLE);
    s.age_s = seconds_or_unknown(res, r, S_AGE);
    s.query_age_s = seconds_or_unknown(res, r, S_QUERY_AGE);
    return s;
}

static int index_rows(const PGresult *res, row_index *ix)
{
    int rows = PQntuples(res);
    int ns = 0, nd = 0;
    for (int r = 0; r < rows; r++) {
        char kind = PQgetvalue(res, r, C_KIND)[0];
        ns += kind == 's';
        nd += kind == 'd';
    }
    ix->sessions = calloc((size_t)ns + 1, sizeof *ix->sessions);
    ix->databases = calloc((size_t)nd + 1, sizeof *ix->databases);
    ix->ns = ix->nd = 0;
    ix->last = NULL;
    if (!ix->sessions || !ix->databases)
        return -1;
    for (int r = 0; r < rows; r++) {
        char kind = PQgetvalue(res, r, C_KIND)[0];
        uint32_t id;
        if (kind == 's' && !PQgetisnull(res, r, C_PID))
            ix->sessions[ix->ns++] = parse_session(
                res, r, (uint32_t)atoi(PQgetvalue(res, r, C_PID)));
        else if (kind == 'd' && parse_u32(PQgetvalue(res, r, D_OID), &id) == 0)
            ix->databases[ix->nd++] = (row_ref){id, r};
    }
    qsort(ix->sessions, ix->ns, sizeof *ix->sessions, compare_sessions);
    qsort(ix->databases, ix->nd, sizeof *ix->databases, compare_refs);
    return 0;
}

/* The session columns of e, from its session s (NULL: none). */
static void take_session(const PGresult *res, const session_ref *s,
                         pglock_holder *e, double waitstart_age)
{
    e->waiting_s = waitstart_age;
    e->waiting_source = waitstart_age >= 0 && !e->granted ? "waitstart" : NULL;
    e->held_min_s = e->held_max_s = -1;
    if (!s)
        return;
    e->has_session = 1;
    e->hidden = s->hidden;
    e->user = text_or_null(res, s->row, S_USER);
    e->application_name = text_or_null(res, s->row, S_APPNAME);
    e->client_addr = text_or_null(res, s->row, S_ADDR);
    e->client_port = s->client_port;
    e->state = text_or_null(res, s->row, S_STATE);
    if (e->granted) {
        e->held_min_s = s->idle_s;
        e->held_max_s = s->age_s;
    } else if (waitstart_age < 0 && s->query_age_s >= 0) {
        /* an upper bound while waitstart is not set yet, or before 14 */
        e->waiting_s = s->query_age_s;
        e->waiting_source = "query_start";
    }
}

int pglock__locktag_next(const char **list, uint32_t *classid, uint32_t *objid)
{
    const char *p = *list;
    while (*p == ' ')
        p++;
    int negative = *p == '-';
    p += negative;
    if (*p < '0' || *p > '9')
        return -1;
    uint64_t v = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        uint64_t digit = (uint64_t)(*p - '0');
        if (v > (UINT64_MAX - digit) / 10)
            return -1;
        v = v * 10 + digit;
    }
    if ((*p && *p != ' ') || v > (uint64_t)INT64_MAX + negative)
        return -1;
    /* two's complement: the bigint's bits are classid:objid */
    uint64_t bits = negative ? 0 - v : v;
    *classid = (uint32_t)(bits >> 32);
    *objid = (uint32_t)bits;
    *list = p;
    return 0;
}

/* How many locktags lock row r lists. */
static size_t count_locktags(const PGresult *res, int r)
{
    size_t n = 0;
    const char *s = PQgetvalue(res, r, L_LOCKTAGS);
    for (size_t i = 0; s[i]; i++)
        n += s[i] != ' ' && (i == 0 || s[i - 1] == ' ');
    return n;
}

/* The columns lock row r's requests share (all but the key) into *e. */
static void decode_request(const PGresult *res, int r, row_index *ix,
                           pglock_holder *e)
{
    uint32_t db;
    memset(e, 0, sizeof *e);
    int d = parse_u32(PQgetvalue(res, r, L_DATABASE), &db) == 0
                ? find_row(ix->databases, ix->nd, db)
                : -1;
    e->database = d < 0 ? NULL : PQgetvalue(res, d, D_NAME);
    e->mode = is_true(res, r, L_EXCLUSIVE) ? PGLOCK_EXCLUSIVE : PGLOCK_SHARED;
    e->granted = is_true(res, r, L_GRANTED);
    e->pid = PQgetisnull(res, r, C_PID) ? 0 : atoi(PQgetvalue(res, r, C_PID));
    const session_ref *s = e->pid ? find_session(ix, (uint32_t)e->pid) : NULL;
    take_session(res, s, e, seconds_or_unknown(res, r, L_WAITSTART_AGE));
}

/* Appends lock row r's requests to list (room made by the caller); the
 * blockers go to list->pids from *used.  A locktag that
 * pg_advisory_lock() does not make is skipped. */
static void decode_lock_row(const PGresult *res, int r, row_index *ix,
                            pglock_holders *list, size_t *used)
{
    pglock_holder proto;
    decode_request(res, r, ix, &proto);
    if (!PQgetisnull(res, r, L_BLOCKED_BY)) {
        proto.blocked_by = list->pids + *used;
        proto.n_blocked_by = parse_pids(PQgetvalue(res, r, L_BLOCKED_BY),
                                        list->pids + *used);
        *used += (size_t)proto.n_blocked_by;
    }
    int objsubid = atoi(PQgetvalue(res, r, L_OBJSUBID));
    const char *tags = PQgetvalue(res, r, L_LOCKTAGS);
    uint32_t classid, objid;
    while (pglock__locktag_next(&tags, &classid, &objid) == 0) {
        pglock_holder *e = &list->entries[list->n];
        *e = proto;
        if (pglock__key_from_locktag(classid, objid, objsubid, &e->key) == 0)
            list->n++;
    }
}

/* Decodes a successful answer into a new list (taking res); NULL when out
 * of memory (res is then the caller's). */
static pglock_holders *decode(PGresult *res)
{
    int rows = PQntuples(res);
    size_t npids = 0, nlocks = 0;
    for (int r = 0; r < rows; r++) {
        if (PQgetvalue(res, r, C_KIND)[0] != 'l')
            continue;
        nlocks += count_locktags(res, r);
        if (!PQgetisnull(res, r, L_BLOCKED_BY))
            npids += (size_t)count_pids(PQgetvalue(res, r, L_BLOCKED_BY));
    }
    pglock_holders *list = calloc(1, sizeof *list);
    row_index ix = {0};
    int ok = list && nlocks < INT_MAX && index_rows(res, &ix) == 0;
    if (ok) {
        list->entries = malloc((nlocks + 1) * sizeof *list->entries);
        prefault(list->entries, (nlocks + 1) * sizeof *list->entries);
        list->pids = calloc(npids + 1, sizeof *list->pids);
        ok = list->entries && list->pids;
    }
    size_t used = 0;
    for (int r = 0; ok && r < rows; r++)
        if (PQgetvalue(res, r, C_KIND)[0] == 'l')
            decode_lock_row(res, r, &ix, list, &used);
    free(ix.sessions);
    free(ix.databases);
    if (!ok) {
        if (list) {
            free(list->entries);
            free(list->pids);
        }
        free(list);
        return NULL;
    }
    list->res = res;
    qsort(list->entries, (size_t)list->n, sizeof *list->entries, compare_qsort);
    return list;
}

/* 1 if the answer says the server is in recovery. */
static int in_recovery(const PGresult *res)
{
    for (int r = 0; r < PQntuples(res); r++)
        if (PQgetvalue(res, r, C_KIND)[0] == 'r')
            return is_true(res, r, R_IN_RECOVERY);
    return 0;
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
                                     "legacy keys first",
                                     i + 1);
        }
        const char *sep = i ? "," : "";
        len[0] += (size_t)snprintf(a[0] + len[0], cap - len[0], "%s%" PRIu32,
                                   sep, classid);
        len[1] += (size_t)snprintf(a[1] + len[1], cap - len[1], "%s%" PRIu32,
                                   sep, objid);
        len[2] += (size_t)snprintf(a[2] + len[2], cap - len[2], "%s%d", sep,
                                   sub);
    }
    for (int k = 0; k < 3; k++)
        snprintf(a[k] + len[k], cap - len[k], "}");
    *cls = a[0];
    *objs = a[1];
    *subs = a[2];
    return PGLOCK_OK;
}

/* Sends the statement and waits for its answer, bounded by timeout_ms
 * (pglock__exec_params()); the answer (PGRES_TUPLES_OK) in *out, or an
 * error code. */
static int run_query(PGconn *conn, const char *const params[4], long timeout_ms,
                     PGresult **out, pglock_error *err)
{
    const char *waitstart = PQserverVersion(conn) >= 140000
                                ? "l.waitstart"
                                : "NULL::timestamptz";
    char sql[sizeof query_template + 32];
    snprintf(sql, sizeof sql, query_template, waitstart);
    pglock_error qerr = {0};
    PGresult *res = pglock__exec_params(conn, sql, 4, params, timeout_ms,
                                        &qerr);
    int rc = PGLOCK_OK;
    if (!res)
        rc = pglock__error_set(err, qerr.code,
                               qerr.sqlstate[0] ? qerr.sqlstate : NULL,
                               "could not read pg_locks: %s", qerr.message);
    else if (PQresultStatus(res) != PGRES_TUPLES_OK)
        rc = pglock__error_result(err, res, conn, "could not read pg_locks");
    else if (PQnfields(res) != C_NCOLS || PQntuples(res) < 1)
        rc = pglock__error_set(err, PGLOCK_ESERVER, NULL,
                               "could not read pg_locks: unexpected answer");
    else if (in_recovery(res))
        rc = pglock__error_set(err, PGLOCK_ESTANDBY, NULL,
                               "the server is a standby (in recovery): "
                               "advisory locks are taken on the primary, "
                               "and none of them can be seen here");
    if (rc)
        PQclear(res);
    else
        *out = res;
    return rc;
}

int pglock_holders_list(pglock_holders **out, PGconn *conn,
                        const pglock_key *keys, int nkeys, unsigned flags,
                        long timeout_ms, pglock_error *err)
{
    if (out)
        *out = NULL;
    pglock__error_begin(err);
    if (!out)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "no out pointer");
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
    const char *params[4] = {flags & PGLOCK_HOLDERS_ALL_DATABASES ? "true"
                                                                  : "false",
                             cls, objs, subs};
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

int pglock_client_holders(pglock_holders **out, pglock_client *client,
                          const pglock_key *keys, int nkeys, unsigned flags,
                          long timeout_ms)
{
    if (out)
        *out = NULL;
    int rc = pglock__client_read_begin(client);
    if (rc)
        return rc;
    pglock_error err;
    rc = pglock_holders_list(out, client->conn, keys, nkeys, flags, timeout_ms,
                             &err);
    return pglock__client_read_end(client, rc, &err);
}
