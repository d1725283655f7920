/*
 * pglock_lock_any(): any one free key of a set, in one statement (the
 * slots of a semaphore).
 *
 * The statement is a recursive CTE that tries the keys one at a time and
 * stops at the first one granted:
 *
 *   WITH RECURSIVE t(i, got) AS (
 *     SELECT 0, false
 *     UNION ALL
 *     SELECT i + 1, pg_try_advisory_lock(('{K1,K2,...}'::int8[])[i + 1])
 *     FROM t WHERE NOT got AND i < N)
 *   SELECT max(i) FILTER (WHERE got) - 1 AS pglock_index, bool_or(got)
 *   FROM t
 *
 * Each step of a recursive CTE reads only the row the step before made,
 * and a step after a grant makes no row, so at most one lock is taken
 * whatever plan the server picks.  The plainer "unnest(...) WHERE
 * pg_try_advisory_lock(id) LIMIT 1" takes one only because the executor
 * happens to stop pulling rows at the limit; nothing in PostgreSQL's
 * documentation promises that for a volatile function in WHERE.
 *
 * With the xact lifetime the same statement, with pg_try_advisory_xact_lock(), is
 * one lock statement of the holding transaction (lock.c): it opens
 * the transaction when none is open, counts itself for the heartbeat and
 * runs under a savepoint.  A failed statement is rolled back to that
 * savepoint, which releases whatever it was granted: no pg_locks check is
 * needed there.  The keys are literals (numbers we format) because the
 * transaction's statements go in one simple-protocol query.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* A key the statement can take: its bigint is known (objsubid 1). */
static int bigint_key(const pglock_key *key)
{
    uint32_t classid, objid;
    int objsubid;
    return !pglock__key_invalid(key) &&
           pglock_key_locktag(key, &classid, &objid, &objsubid) == 0 &&
           objsubid == 1;
}

static int check_args(pglock_client *c, const pglock_key *keys, int nkeys,
                      pglock_mode mode, int *index_out)
{
    if (!c)
        return PGLOCK_EINVAL;
    if (pglock__client_held(c))
        return PGLOCK_ESTATE; /* the hold's client: nothing of it touched */
    if (!keys || !index_out || nkeys < 1 || nkeys > PGLOCK_LOCK_ANY_MAX)
        return pglock__fail(c, PGLOCK_EINVAL,
                            "invalid key set: 1 to %d keys and an index to "
                            "write are needed",
                            PGLOCK_LOCK_ANY_MAX);
    if (mode != PGLOCK_EXCLUSIVE && mode != PGLOCK_SHARED)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid lock mode %d",
                            (int)mode);
    for (int i = 0; i < nkeys; i++) {
        if (!bigint_key(&keys[i]))
            return pglock__fail(c, PGLOCK_EINVAL,
                                "invalid key %d of the set: give 64-bit keys "
                                "(integers, names, resolved legacy keys)",
                                i);
        if (pglock__lock_find(c, &keys[i], mode))
            return pglock__fail(c, PGLOCK_ESTATE,
                                "key %d of the set is already held by this "
                                "client",
                                i);
    }
    return pglock__client_ready(c);
}

/* "{1,2,3}": the keys' bigints as an int8[] literal; NULL: no memory. */
static char *id_array(const pglock_key *keys, int nkeys)
{
    size_t len = (size_t)nkeys * 22 + 3, used = 1;
    char *buf = malloc(len);
    if (!buf)
        return NULL;
    buf[0] = '{';
    for (int i = 0; i < nkeys; i++) {
        uint32_t classid, objid;
        int objsubid;
        pglock_key_locktag(&keys[i], &classid, &objid, &objsubid);
        int64_t id = (int64_t)(((uint64_t)classid << 32) | objid);
        used += (size_t)snprintf(buf + used, len - used, "%s%" PRId64,
                                 i ? "," : "", id);
    }
    snprintf(buf + used, len - used, "}");
    return buf;
}

/* The statement trying the keys ids ("{1,2,3}") in turn, session or
 * transaction locks; allocated (NULL: no memory). */
static char *any_statement(const char *ids, int nkeys, pglock_mode mode,
                           int xact)
{
    size_t len = strlen(ids) + 400;
    char *sql = malloc(len);
    if (!sql)
        return NULL;
    snprintf(sql, len,
             "WITH RECURSIVE t(i, got) AS (SELECT 0, false UNION ALL"
             " SELECT i + 1, pg_try_advisory%s_lock%s(('%s'::int8[])[i + 1])"
             " FROM t WHERE NOT got AND i < %d)"
             " SELECT max(i) FILTER (WHERE got) - 1 AS " PGLOCK__INDEX_COLUMN
             ", bool_or(got) FROM t",
             xact ? "_xact" : "", mode == PGLOCK_SHARED ? "_shared" : "", ids,
             nkeys);
    return sql;
}

/* Sends the statement on the session and reads the index it took:
 * 0..nkeys-1, -1 for none (busy), or a negative PGLOCK_E* code (-1 is
 * never one of them: PGLOCK_EBUSY is not returned here) with its error
 * in *err. */
static int session_try(pglock_client *c, const char *sql, const char *ids,
                       pglock_mode mode, int *taken, pglock_error *err)
{
    pglock__answer a;
    int rc = pglock__session_statement(c, sql, 0, NULL, NULL, -1, &a, err);
    if (rc)
        return rc;
    PGresult *r = a.res[a.nres - 1];
    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        *taken = PQgetvalue(r, 0, 1)[0] == 't' ? atoi(PQgetvalue(r, 0, 0)) : -1;
        pglock__clear_results(a.res, a.nres);
        return 0;
    }
    rc = pglock__error_result(err, r, c->conn, "could not take a lock");
    pglock__clear_results(a.res, a.nres);
    if (rc == PGLOCK_EINTR && a.cancelled)
        rc = err->code = a.cancelled;
    if (rc == PGLOCK_ECONNLOST)
        return rc;
    /* pg_locks has the last word, as after any failed wait (a cancel
     * landing just after the grant) */
    int got = pglock__granted_among(c->conn, ids, 1, mode, NULL, "try", err);
    if (got == PGLOCK_ECONNLOST)
        return got;
    if (got >= 0) {
        *taken = got;
        return 0;
    }
    return rc;
}

/* The statement in the client's hold: 0 with *taken (-1: none free), or a
 * code with its error in *err. */
static int try_statement(pglock_client *c, const char *ids, int nkeys,
                         pglock_mode mode, int *taken, pglock_error *err)
{
    int xact = c->lifetime == PGLOCK_LIFETIME_XACT;
    char *sql = any_statement(ids, nkeys, mode, xact);
    if (!sql)
        return pglock__error_set(err, PGLOCK_ENOMEM, NULL, "out of memory");
    int rc;
    if (xact) {
        rc = pglock__holding_xact_any(c, sql, taken, err);
        if (rc == PGLOCK_EBUSY) {
            *taken = -1;
            rc = 0;
        }
    } else {
        rc = session_try(c, sql, ids, mode, taken, err);
    }
    free(sql);
    return rc;
}

int pglock_lock_any(pglock_client *c, const pglock_key *keys, int nkeys,
                    pglock_mode mode, int *index_out)
{
    int rc = check_args(c, keys, nkeys, mode, index_out);
    if (rc)
        return rc;
    *index_out = -1;
    char *ids = id_array(keys, nkeys);
    if (!ids)
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    int64_t sent_at = pglock_now_ms();
    int taken = -1;
    pglock_error err = {0};
    rc = try_statement(c, ids, nkeys, mode, &taken, &err);
    free(ids);
    if (rc)
        return pglock__client_failed(c, &err);
    if (taken < 0 || taken >= nkeys)
        return pglock__fail(c, PGLOCK_EBUSY,
                            "every one of the %d keys is held by another "
                            "session",
                            nkeys);
    if ((rc = pglock__lock_granted(c, &keys[taken], mode, sent_at)) != 0)
        return rc;
    *index_out = taken;
    return 0;
}
