/*
 * Stop requests (pglock.h, "Stop requests"): the key a requester holds in
 * shared mode, and the heartbeat's part of watching for one.
 *
 * Every heartbeat of a watching hold tries each of its locks'
 * stop-request keys in exclusive mode, as a transaction lock that the
 * heartbeat's own end gives back (session lifetime: its implicit
 * transaction; xact lifetime: ROLLBACK TO SAVEPOINT in the same message).
 * That costs a lock-manager entry and no planning beyond a Result node,
 * so the heartbeat stays as cheap as before (make bench measures it).
 * Only when a try fails does the next heartbeat, sent at once, read
 * pg_locks and pg_stat_activity to find the requester and ask the
 * server's rule for pg_terminate_backend() whether that role may stop this
 * session: that query costs about a millisecond of planning, which no
 * heartbeat without a request pays.  A failed try that finds no
 * requester is a collision with another holder's try (shared holders of
 * one key): nothing.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

#define STOP_REQUEST_PREFIX "pglock stop request "

int pglock_key_stop_request(pglock_key *out, const pglock_key *key)
{
    char id[32];
    if (!out || !key || pglock_key_format(key, id, sizeof id) < 0)
        return PGLOCK_EINVAL;
    char name[sizeof STOP_REQUEST_PREFIX + sizeof id];
    snprintf(name, sizeof name, STOP_REQUEST_PREFIX "%s", id);
    return pglock_key_int64(out, pglock_name_to_int64(name, strlen(name)));
}

/* The stop-request key of one counted lock, as a bigint: its key from
 * its locktag (objsubid 1 a bigint, 2 a pair: pglock.h's table). */
static int entry_stop_id(const pglock__lock_entry *e, int64_t *out)
{
    pglock_key key, stop;
    int made = e->objsubid == 1
                   ? pglock_key_int64(&key,
                                      (int64_t)(((uint64_t)e->classid << 32) |
                                                e->objid))
                   : pglock_key_pair(&key, (int32_t)e->classid,
                                     (int32_t)e->objid);
    if (made != 0 || pglock_key_stop_request(&stop, &key) != 0)
        return -1;
    *out = stop.id;
    return 0;
}

/* The requester's column: who holds one of the stop-request keys in
 * shared mode, and may stop this session by the server's rule for
 * pg_terminate_backend(), as one line; NULL when nobody may.  The
 * statistics snapshot is cleared first (the CASE's first branch, which
 * runs before the subquery: a scalar subquery runs only when its branch
 * is reached): a holding transaction would otherwise see the
 * pg_stat_activity of its first read for ever. */
static const char who_head[] =
    "CASE WHEN pg_stat_clear_snapshot()::text IS NULL THEN NULL ELSE ("
    "SELECT format('backend pid %s (user %s, application \"%s\")',"
    " a.pid, a.usename, a.application_name)"
    " FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid"
    " LEFT JOIN pg_roles r ON r.oid = a.usesysid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.mode = 'ShareLock'"
    " AND l.objsubid = 1 AND l.pid <> pg_backend_pid()"
    " AND l.database = (SELECT oid FROM pg_database"
    " WHERE datname = current_database())"
    " AND coalesce(r.rolsuper OR (NOT (SELECT rolsuper FROM pg_roles"
    " WHERE rolname = session_user)"
    " AND (pg_has_role(a.usesysid, session_user, 'USAGE')"
    " OR pg_has_role(a.usesysid, 'pg_signal_backend', 'USAGE'))), false)"
    " AND (l.classid, l.objid) IN (VALUES ";
static const char who_tail[] = ") ORDER BY l.pid LIMIT 1) END";

static int append(char **buf, size_t *used, size_t *cap, const char *s)
{
    size_t n = strlen(s);
    if (*used + n + 1 > *cap) {
        size_t want = (*cap ? *cap * 2 : 256) + n;
        char *p = realloc(*buf, want);
        if (!p)
            return -1;
        *buf = p;
        *cap = want;
    }
    memcpy(*buf + *used, s, n + 1);
    *used += n;
    return 0;
}

/* Builds both columns from the client's counted locks. */
static int build_columns(pglock_client *c, char **try_col, char **who_col)
{
    size_t tu = 0, tc = 0, wu = 0, wc = 0;
    int bad = append(who_col, &wu, &wc, who_head);
    for (size_t i = 0; i < c->nlocks && !bad; i++) {
        int64_t id;
        char part[96];
        if (entry_stop_id(&c->locks[i], &id) != 0)
            return -1;
        snprintf(part, sizeof part, "%spg_try_advisory_xact_lock('%lld'::int8)",
                 i ? " AND " : "", (long long)id);
        bad |= append(try_col, &tu, &tc, part);
        snprintf(part, sizeof part, "%s(%lu::oid, %lu::oid)", i ? ", " : "",
                 (unsigned long)((uint64_t)id >> 32),
                 (unsigned long)((uint64_t)id & 0xffffffffu));
        bad |= append(who_col, &wu, &wc, part);
    }
    bad |= append(who_col, &wu, &wc, who_tail);
    return bad ? -1 : 0;
}

int pglock__stop_watch_begin(pglock_client *c)
{
    pglock__stop_watch_end(c);
    if (c->nlocks == 0)
        return 0;
    char *try_col = NULL, *who_col = NULL;
    if (build_columns(c, &try_col, &who_col) != 0) {
        free(try_col);
        free(who_col);
        return pglock__fail(c, PGLOCK_ENOMEM,
                            "could not build the stop-request check");
    }
    /* the longest heartbeat: its fixed text and the longer column */
    size_t longest = strlen(try_col) > strlen(who_col) ? strlen(try_col)
                                                       : strlen(who_col);
    c->stop_sql = malloc(longest + 512);
    if (!c->stop_sql) {
        free(try_col);
        free(who_col);
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    }
    c->stop_sql_len = longest + 512;
    c->stop_try = try_col;
    c->stop_who = who_col;
    return 0;
}

void pglock__stop_watch_end(pglock_client *c)
{
    free(c->stop_try);
    free(c->stop_who);
    free(c->stop_sql);
    c->stop_try = c->stop_who = c->stop_sql = NULL;
    c->stop_sql_len = 0;
    c->stop_seen = 0;
    c->beat_stop = PGLOCK__BEAT_STOP_NONE;
}

const char *pglock__stop_column(pglock_client *c)
{
    if (!c->stop_try) {
        c->beat_stop = PGLOCK__BEAT_STOP_NONE;
        return NULL;
    }
    c->beat_stop = c->stop_seen ? PGLOCK__BEAT_STOP_WHO : PGLOCK__BEAT_STOP_TRY;
    return c->stop_seen ? c->stop_who : c->stop_try;
}

void pglock__stop_answer(pglock_client *c, const PGresult *r, int column)
{
    if (c->beat_stop == PGLOCK__BEAT_STOP_NONE || PQnfields(r) <= column)
        return;
    int null = PQgetisnull(r, 0, column);
    const char *v = PQgetvalue(r, 0, column);
    if (c->beat_stop == PGLOCK__BEAT_STOP_TRY) {
        c->stop_seen = !null && strcmp(v, "f") == 0;
        return;
    }
    c->stop_seen = 0; /* asked and answered: tries again from here */
    if (!null && *v && !c->stop_request[0])
        pglock__first_line(c->stop_request, sizeof c->stop_request, v);
}
