/*
 * The grant race: a lock statement that failed or was cancelled may still
 * have been granted its lock in the same instant (PostgreSQL can grant a
 * waiter and then deliver the cancel or the lock_timeout error, and a
 * cancel can land just after pg_try_advisory_lock() returned).  So after
 * any failed session-lock statement pg_locks has the last word: one check,
 * for pglock_lock() (a set of one key) and pglock_lock_any() (a set).
 *
 * It is one statement, bounded by PGLOCK__CLOSE_TIMEOUT_MS.  When it
 * cannot answer, nobody knows whether the lock is held, so the connection
 * is closed: that frees whatever it was granted.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* Parameters: $1 the pg_locks mode, $2 the objsubid, $3 (and $4) the
 * keys: the first column is the set's first bigint (a legacy key's value,
 * computed here), the second the 1-based index of the first key held. */
#define GRANT_CHECK_SQL \
    "SELECT k.ids[1], (SELECT min(u.i)" \
    " FROM unnest(k.ids) WITH ORDINALITY u(id, i)" \
    " JOIN pg_locks l ON l.locktype = 'advisory'" \
    " AND l.pid = pg_backend_pid() AND l.granted" \
    " AND l.objsubid = $2::int2" \
    " AND l.classid = ((u.id >> 32) & 4294967295)::oid" \
    " AND l.objid = (u.id & 4294967295)::oid AND l.mode = $1)" \
    " FROM (SELECT %s AS ids) k"

int pglock__granted_among(pglock_client *c, const char *ids, int objsubid,
                          pglock_mode mode, pglock_key *resolve,
                          const char *failed)
{
    char sub[4], array[128], sql[sizeof GRANT_CHECK_SQL + sizeof array];
    const char *params[4] = {mode == PGLOCK_SHARED ? "ShareLock"
                                                   : "ExclusiveLock",
                             sub, ids, NULL};
    int nparams = 3;
    snprintf(sub, sizeof sub, "%d", objsubid);
    snprintf(array, sizeof array, "$3::int8[]");
    pglock__call call;
    if (resolve) {
        /* the key's bigint over $3 (and $4), as the lock statement had it */
        pglock__call_make(&call, resolve, mode, PGLOCK__OP_TRY, 0, 3);
        snprintf(array, sizeof array, "ARRAY[%s]", call.value_expr);
        params[2] = call.params[0];
        params[3] = call.params[1];
        nparams = 2 + call.nparams;
    }
    snprintf(sql, sizeof sql, GRANT_CHECK_SQL, array);

    /* The caller's error stands unless a lock turns out held. */
    char saved[sizeof c->message], state[sizeof c->sqlstate];
    memcpy(saved, c->message, sizeof saved);
    memcpy(state, c->sqlstate, sizeof state);
    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(c->conn, sql, nparams, params,
                                         PGLOCK__CLOSE_TIMEOUT_MS, &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_TUPLES_OK ||
        PQntuples(res) != 1) {
        char what[96];
        snprintf(what, sizeof what, "could not check pg_locks after a failed "
                                    "%s; the connection was closed", failed);
        pglock__fail_result(c, res, what);
        PQclear(res);
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    if (resolve) {
        resolve->id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        resolve->resolved = 1;
    }
    int index = PQgetisnull(res, 0, 1) ? -1
                : atoi(PQgetvalue(res, 0, 1)) - 1;
    PQclear(res);
    memcpy(c->message, saved, sizeof saved);
    memcpy(c->sqlstate, state, sizeof state);
    return index;
}
