/*
 * The lock path of a client, from pglock_lock() to the grant: the client's
 * own count of its locks (PostgreSQL's locks are re-entrant: n locks need
 * n unlocks), the session-lock statement, the check of pg_locks after a
 * failed one (the grant race), and the xact lifetime's statements in the
 * holding transaction.
 *
 * Session lifetime.  Acquire and release are one statement each.  The
 * per-wait lock_timeout travels in the acquiring statement: set_config()
 * is evaluated before the lock function (target list, left to right) and
 * the server reads lock_timeout when the wait starts.  It is sent only
 * when the session's value must change, since even an unused set_config()
 * costs the server measurable time when many clients contend for one key
 * (bench/).  The statements are the cheapest forms that keep those
 * guarantees (bench/bench_sql_variants.c, issue 31): the key's parameter
 * types are declared rather than cast, and there is no placeholder column
 * when the setting is not sent; what is left over raw libpq's own
 * statement is the server's parse and plan of any unnamed statement.
 *
 * The grant race: a lock statement that failed or was cancelled may still
 * have been granted its lock in the same instant (PostgreSQL can grant a
 * waiter and then deliver the cancel or the lock_timeout error, and a
 * cancel can land just after pg_try_advisory_lock() returned).  So after
 * any failed session-lock statement pg_locks has the last word: one check,
 * for pglock_lock() (a set of one key) and pglock_lock_any() (a set).  It
 * is one statement, bounded by PGLOCK__CLOSE_TIMEOUT_MS.  When it cannot
 * answer, nobody knows whether the lock is held, so the connection is
 * closed: that frees whatever it was granted.
 *
 * Xact lifetime: the locks are transaction locks inside one open READ
 * COMMITTED transaction that does nothing else, so that they pass a
 * transaction-mode pooler, which keeps an open transaction on one server
 * backend.  The first lock opens the transaction, applies the lock
 * connection's settings transaction-locally (never a plain SET: through a
 * pooler it would stay on a server connection other clients get next) and
 * takes the lock, all in one round trip; idle_in_transaction_session_timeout
 * is the lease's server-side clock.  The transaction is READ ONLY and runs
 * only short statements, so it never gets a transaction id and holds no
 * snapshot between them: it does not hold back VACUUM.  Each statement
 * also returns pg_backend_pid(), checked against the one recorded when the
 * transaction began, and counts itself in a transaction-local setting
 * that the heartbeat reads back (heartbeat.c).  The statements themselves
 * are xact_lock.c's, shared with pglock_xact_lock().
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* ------------------------------------------------------------- counts */

/* The entry for key+mode, or NULL.  An unresolved legacy key is found by
 * its name (and seed). */
pglock__lock_entry *pglock__lock_find(const pglock_client *c,
                                      const pglock_key *key,
                                      pglock_mode mode)
{
    uint32_t classid = 0, objid = 0;
    int objsubid = 0;
    int by_tag = pglock_key_locktag(key, &classid, &objid, &objsubid) == 0;
    for (size_t i = 0; i < c->nlocks; i++) {
        pglock__lock_entry *h = &c->locks[i];
        if (h->mode != mode)
            continue;
        if (by_tag) {
            if (h->classid == classid && h->objid == objid &&
                h->objsubid == objsubid)
                return h;
        } else if (h->name && h->kind == key->kind &&
                   (key->kind != PGLOCK_KEY_HASHTEXTEXTENDED ||
                    h->seed == key->seed) &&
                   strcmp(h->name, key->name) == 0) {
            return h;
        }
    }
    return NULL;
}

/* Counts one more lock of a resolved key. */
static int entry_add(pglock_client *c, const pglock_key *key, pglock_mode mode)
{
    pglock__lock_entry *h = pglock__lock_find(c, key, mode);
    if (h) {
        h->count++;
        return 0;
    }
    if (c->nlocks == c->caplocks) {
        size_t cap = c->caplocks ? c->caplocks * 2 : 8;
        pglock__lock_entry *n = realloc(c->locks, cap * sizeof *n);
        if (!n)
            return PGLOCK_ENOMEM;
        c->locks = n;
        c->caplocks = cap;
    }
    h = &c->locks[c->nlocks];
    memset(h, 0, sizeof *h);
    pglock_key_locktag(key, &h->classid, &h->objid, &h->objsubid);
    h->mode = mode;
    h->count = 1;
    h->kind = key->kind;
    h->seed = key->seed;
    if (pglock__key_is_legacy(key)) {
        h->name = strdup(key->name);
        if (!h->name)
            return PGLOCK_ENOMEM;
    }
    c->nlocks++;
    return 0;
}

int pglock__lock_granted(pglock_client *c, const pglock_key *key,
                         pglock_mode mode, int64_t sent_at)
{
    if (entry_add(c, key, mode) != 0) {
        /* Held on the server but not counted: a lock nobody could unlock
         * or verify.  Closing the connection frees it. */
        pglock__client_drop(c);
        return pglock__fail(c, PGLOCK_ENOMEM,
                            "out of memory after the lock was granted: the "
                            "connection was closed, so every lock of this "
                            "client is lost");
    }
    c->message[0] = '\0';
    c->sqlstate[0] = '\0';
    c->confirmed_at = sent_at;
    return 0;
}

static void entry_remove(pglock_client *c, pglock__lock_entry *h)
{
    free(h->name);
    *h = c->locks[--c->nlocks];
}

/* --------------------------------------------------------- arguments */

static int check_key(const pglock_key *key)
{
    if (pglock__key_invalid(key))
        return 0;
    switch (key->kind) {
    case PGLOCK_KEY_INT64:
    case PGLOCK_KEY_PAIR:
    case PGLOCK_KEY_TEXT:
        return 1;
    case PGLOCK_KEY_HASHTEXT:
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        return key->name != NULL || key->resolved;
    }
    return 0;
}

static int check_call(pglock_client *c, const pglock_key *key,
                      pglock_mode mode)
{
    if (!c)
        return PGLOCK_EINVAL;
    if (pglock__client_held(c))
        return PGLOCK_ESTATE; /* the hold's client: nothing of it touched */
    const char *why = pglock__key_invalid(key);
    if (why)
        return pglock__fail(c, PGLOCK_EINVAL, PGLOCK__INVALID_KEY_FMT, why);
    if (!check_key(key))
        return pglock__fail(c, PGLOCK_EINVAL, "invalid key");
    if (mode != PGLOCK_EXCLUSIVE && mode != PGLOCK_SHARED)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid lock mode %d",
                            (int)mode);
    return pglock__client_ready(c);
}

/* --------------------------------------------------- after a failure */

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


/* Asks pg_locks whether this backend holds key in mode, a set of one:
 * pglock__granted_among()'s answer (0 held, -1 not, or PGLOCK_ECONNLOST).
 * An unresolved legacy key is resolved by the same statement, into *key. */
static int held_on_server(pglock_client *c, pglock_key *key, pglock_mode mode)
{
    if (pglock__key_is_legacy(key) && !key->resolved)
        return pglock__granted_among(c, NULL, 1, mode, key, "wait");
    uint32_t classid, objid;
    int objsubid;
    pglock_key_locktag(key, &classid, &objid, &objsubid);
    char ids[24];
    snprintf(ids, sizeof ids, "{%" PRId64 "}",
             (int64_t)(((uint64_t)classid << 32) | objid));
    return pglock__granted_among(c, ids, objsubid, mode, NULL, "wait");
}

/* ---------------------------------------------------------- statement */

int pglock__session_statement(pglock_client *c, const char *sql, int nparams,
                              const Oid *types, const char *const *params,
                              int64_t deadline, PGresult **res, int *nres,
                              int *cancelled)
{
    if (!PQsendQueryParams(c->conn, sql, nparams, types, params, NULL, NULL,
                           0)) {
        pglock__fail_result(c, NULL, "could not send the lock request");
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    pglock__wait w = {.deadline = deadline,
                      .interrupt_fd = c->opts.interrupt_fd,
                      .cancel_timeout_ms = c->opts.cancel_timeout_ms};
    pglock__wait_end end = pglock__await(c->conn, &w, res, nres, cancelled);
    if (end == PGLOCK__WAIT_ABANDONED) {
        pglock__clear_results(res, *nres);
        pglock__client_drop(c);
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "could not cancel the wait within %ld ms, so the "
                            "connection was closed: every session lock of "
                            "this client is lost",
                            c->opts.cancel_timeout_ms);
    }
    if (end == PGLOCK__WAIT_CONNLOST || *nres == 0) {
        pglock__fail_result(c, *nres ? res[*nres - 1] : NULL,
                            "connection lost while taking the lock");
        pglock__clear_results(res, *nres);
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    return 0;
}

/* ---------------------------------------------------------------- lock */

/* After a failed wait (rc, with the client's message set): the
 * outcome, for which pg_locks has the last word. */
static int wait_failed(pglock_client *c, int rc, int cancelled,
                       pglock_key *key_io, pglock_key *key,
                       pglock_mode mode, long timeout_ms)
{
    if (rc == PGLOCK_ECONNLOST) {
        pglock__client_drop(c);
        return rc;
    }
    if (rc == PGLOCK_EINTR && cancelled)
        rc = cancelled; /* our own cancel: interrupt or client deadline */
    /* PostgreSQL can grant the lock in the instant the timeout or cancel
     * fires and still report the error, and even a try can fail after its
     * grant (a cancel landing just after pg_try_advisory_lock() returned):
     * pg_locks decides. */
    int held = held_on_server(c, key, mode);
    if (held == PGLOCK_ECONNLOST)
        return held;
    if (held == 0) {
        *key_io = *key;
        return 0;
    }
    const char *state = c->sqlstate; /* the failed wait's, kept */
    char k[128];
    pglock__key_describe(key, k, sizeof k);
    if (rc == PGLOCK_ETIMEDOUT)
        snprintf(c->message, sizeof c->message,
                 "timed out after %ld ms waiting for lock %s%s%s%s",
                 timeout_ms, k, *state ? " (SQLSTATE " : "", state,
                 *state ? ")" : "");
    else if (rc == PGLOCK_EINTR)
        snprintf(c->message, sizeof c->message,
                 "wait for lock %s was interrupted", k);
    return rc;
}

/* A session lock on the client's connection: 0 when held (the key
 * resolved into *key_io, not yet counted), else a code with the message on
 * the client. */
static int session_acquire(pglock_client *c, pglock_key *key_io,
                           pglock_mode mode, long timeout_ms)
{
    int rc;
    pglock_key key = *key_io;
    int try = timeout_ms == PGLOCK_TRY;

    /* The wait's lock_timeout goes in the same statement, and only when
     * the session has another value (a try never waits: it needs none).
     * Set with is_local false it lasts for the session; a statement that
     * fails rolls it back, so the client then forgets what it knows. */
    long wanted = timeout_ms < 0 ? 0L : timeout_ms;
    int set_timeout = !try && c->lock_timeout_ms != wanted;
    pglock__call call;
    pglock__call_make(&call, &key, mode, try ? PGLOCK__OP_TRY : PGLOCK__OP_LOCK,
                      0, set_timeout ? 2 : 1);
    char sql[400], lock_timeout[24];
    snprintf(lock_timeout, sizeof lock_timeout, "%ld", wanted);
    /* The setting's column when it is sent, then the lock call's
     * (column lock_col), then a legacy key's value. */
    int lock_col = set_timeout ? 1 : 0;
    snprintf(sql, sizeof sql, "SELECT %s%s%s%s",
             set_timeout ? "set_config('lock_timeout', $1, false), " : "",
             call.fn, *call.value_expr ? ", " : "", call.value_expr);
    const char *params[3] = {lock_timeout, call.params[0], call.params[1]};
    const Oid types[3] = {0, call.types[0], call.types[1]};
    int skip = set_timeout ? 0 : 1;
    int nparams = (set_timeout ? 1 : 0) + call.nparams;
    if (set_timeout)
        c->lock_timeout_ms = -1; /* known again only once it succeeds */

    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    int64_t deadline =
        try ? -1 : pglock__deadline(timeout_ms, PGLOCK__DEADLINE_GRACE_MS);
    rc = pglock__session_statement(c, sql, nparams, types + skip,
                                   params + skip, deadline, res, &nres,
                                   &cancelled);
    if (rc)
        return rc;
    PGresult *r = res[nres - 1];

    if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) == 1) {
        int got = try ? PQgetvalue(r, 0, lock_col)[0] == 't' : 1;
        if (set_timeout)
            c->lock_timeout_ms = wanted;
        if (*call.value_expr) {
            key.id = strtoll(PQgetvalue(r, 0, lock_col + 1), NULL, 10);
            key.resolved = 1;
        }
        pglock__clear_results(res, nres);
        if (!got) {
            char k[128];
            pglock__key_describe(&key, k, sizeof k);
            return pglock__fail(c, PGLOCK_EBUSY,
                                "lock %s is held by another session", k);
        }
        *key_io = key;
        return 0;
    }

    /* The wait failed. */
    rc = pglock__fail_result(c, r, "could not take the lock");
    pglock__clear_results(res, nres);
    return wait_failed(c, rc, cancelled, key_io, &key, mode, timeout_ms);
}

int pglock_lock(pglock_client *c, const pglock_key *key_in, pglock_mode mode,
                long timeout_ms)
{
    int rc = check_call(c, key_in, mode);
    if (rc)
        return rc;
    if (timeout_ms < PGLOCK_WAIT_FOREVER || timeout_ms > INT_MAX)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid timeout %ld ms",
                            timeout_ms);
    pglock_key key = *key_in;
    int64_t sent_at = pglock_now_ms();
    rc = c->lifetime == PGLOCK_LIFETIME_XACT
             ? pglock__holding_xact_lock(c, &key, mode, timeout_ms)
             : session_acquire(c, &key, mode, timeout_ms);
    if (rc)
        return rc;
    int64_t answered_at = pglock_now_ms();
    if ((rc = pglock__lock_granted(c, &key, mode, sent_at)) != 0)
        return rc;
    /* After a long wait the send time says little about the server's idle
     * clock, which starts when the lock is granted: confirm now, so the
     * lease counts from a fresh, known moment. */
    if (c->opts.lease_ms > 0 && answered_at - sent_at > c->opts.lease_ms / 8) {
        rc = pglock_heartbeat(c, c->opts.lease_ms / 2);
        if (rc == PGLOCK_ETIMEDOUT) {
            /* unconfirmed within half the lease: give it up */
            pglock__client_drop(c);
            return PGLOCK_ECONNLOST;
        }
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* ----------------------------------------------------------- xact lifetime */


#define BEGIN_SQL "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY"

/* The statements before the lock: the backend's pid, a legacy key's value
 * (the hold is counted by its value, so it is learnt in the same round
 * trip and under the same savepoint and wait as the lock), the count of
 * lock statements that the heartbeat reads back (undone with the lock
 * when the savepoint is rolled back) and, when the transaction begins,
 * its settings. */
static int prelude_sql(char *buf, size_t len, pglock_client *c,
                       const pglock_key *key, int begin)
{
    char value[700] = "", settings[2048] = "";
    int rc = 0;
    if (key && pglock__key_is_legacy(key) && !key->resolved)
        rc = pglock__value_literal(value, sizeof value, c->conn, key);
    if (rc == 0 && begin)
        rc = pglock__settings_sql(settings, sizeof settings, &c->opts, 1,
                                  c->server_version);
    if (rc != 0)
        return rc;
    /* The server counts up from its own value, not ours: a lock undone
     * behind our back (a ROLLBACK TO SAVEPOINT on the borrowed connection)
     * then stays one short for good, even after later lock statements,
     * and the heartbeat sees it.  A new transaction starts from 1. */
    const char *count = begin ? "'1'"
        : "(coalesce(nullif(current_setting('" PGLOCK__LOCKS_SETTING
          "', true), ''), '0')::int8 + 1)::text";
    int n = snprintf(buf, len,
                     "SELECT pg_backend_pid() AS " PGLOCK__PID_COLUMN
                     "%s%s%s, set_config('" PGLOCK__LOCKS_SETTING
                     "', %s, true)%s%s",
                     *value ? ", " : "", value,
                     *value ? " AS " PGLOCK__VALUE_COLUMN : "", count,
                     *settings ? ", " : "", settings);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

/* One lock statement in the holding transaction (opened by it when none
 * is), with the hold's bookkeeping: the key's (stmt NULL) or a set's stmt
 * (key NULL; its index into *index_out).  0 when held, else a code with
 * the message on the client (dropped on PGLOCK_ECONNLOST); PGLOCK_EBUSY
 * has no message. */
static int holding_statement(pglock_client *c, pglock_key *key, const char *stmt,
                          pglock_mode mode, long timeout_ms, int *index_out)
{
    int begin = !c->in_xact;
    if (c->beat_aborted)
        return pglock__fail(c, PGLOCK_ESTATE,
                            "the last heartbeat failed in the holding "
                            "transaction (a cancel): confirm the lease with "
                            "pglock_heartbeat() before taking another lock");
    char prelude[3000];
    int rc = prelude_sql(prelude, sizeof prelude, c, key, begin);
    if (rc)
        return pglock__fail(c, rc, rc == PGLOCK_ENOMEM ? "out of memory"
                                   : "invalid options or key name too long");
    int pid = 0;
    pglock__xact_req req = {.begin_sql = BEGIN_SQL,
                            .prelude = prelude,
                            .interrupt_fd = c->opts.interrupt_fd,
                            .cancel_timeout_ms = c->opts.cancel_timeout_ms,
                            .pid_out = &pid,
                            .resolve = key,
                            .index_out = index_out,
                            /* the heartbeats' savepoint, after this lock */
                            .after = "SAVEPOINT " PGLOCK__BEAT_SAVEPOINT};
    pglock_error err = {0};
    rc = stmt ? pglock__xact_run(c->conn, stmt, begin, timeout_ms, &req, &err)
              : pglock__xact_lock_req(c->conn, key, mode, timeout_ms, begin,
                                      &req, &err);
    /* A busy try inside the transaction still released its savepoint, and
     * with it the count its statement set. */
    if (rc == 0 || (rc == PGLOCK_EBUSY && !begin))
        c->xact_locks = (begin ? 0 : c->xact_locks) + 1;
    if (rc == PGLOCK_EBUSY)
        return rc;
    if (rc) {
        pglock__fail_error(c, &err);
        if (rc == PGLOCK_ECONNLOST)
            pglock__client_drop(c);
        return rc;
    }
    if (key && pglock__key_is_legacy(key) && !key->resolved) {
        pglock__client_drop(c); /* held, but it could never be verified */
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the server did not return the key's value: "
                            "the connection was closed");
    }
    if (begin) {
        c->in_xact = 1;
        c->backend_pid = pid;
    } else if (pid != c->backend_pid) {
        pglock__fail(c, PGLOCK_ECONNLOST,
                     "the holding transaction reached backend %d instead of "
                     "%d: its locks are gone", pid, c->backend_pid);
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    return 0;
}

int pglock__holding_xact_lock(pglock_client *c, pglock_key *key,
                              pglock_mode mode, long timeout_ms)
{
    int rc = holding_statement(c, key, NULL, mode, timeout_ms, NULL);
    if (rc == PGLOCK_EBUSY) {
        char k[128];
        pglock__key_describe(key, k, sizeof k);
        return pglock__fail(c, PGLOCK_EBUSY,
                            "lock %s is held by another session", k);
    }
    return rc;
}

int pglock__holding_xact_any(pglock_client *c, const char *stmt,
                             int *index_out)
{
    return holding_statement(c, NULL, stmt, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                          index_out);
}

int pglock__holding_xact_end(pglock_client *c, long timeout_ms)
{
    if (!c->in_xact || !c->conn)
        return 0;
    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(c->conn, "ROLLBACK", 0, NULL,
                                         timeout_ms, &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_COMMAND_OK) {
        pglock__fail_result(c, res, "could not end the holding transaction;"
                                    " the connection was closed");
        PQclear(res);
        pglock__client_drop(c);
        return PGLOCK_ECONNLOST;
    }
    PQclear(res);
    c->in_xact = 0;
    c->backend_pid = 0;
    c->beat_aborted = 0;
    return 0;
}

/* -------------------------------------------------------------- unlock */

/* pglock_unlock() with the xact lifetime: the lock goes only with its transaction. */
static int xact_unlock(pglock_client *c, pglock__lock_entry *h, const char *k)
{
    if (h->count > 1) {
        h->count--;   /* still held, by the same transaction */
        return 0;
    }
    if (c->nlocks > 1)
        return pglock__fail(c, PGLOCK_ESTATE,
            "lock %s cannot be released alone: with the xact lifetime the locks are "
            "released together, when the holding transaction ends; release "
            "the client's other locks first, or use pglock_unlock_all()", k);
    return pglock_unlock_all(c);
}


int pglock_unlock(pglock_client *c, const pglock_key *key, pglock_mode mode)
{
    int rc = check_call(c, key, mode);
    if (rc)
        return rc;
    pglock__lock_entry *h = pglock__lock_find(c, key, mode);
    char k[128];
    pglock__key_describe(key, k, sizeof k);
    if (!h)
        return pglock__fail(c, PGLOCK_ENOTHELD,
            "lock %s (%s) is not held by this session: session locks belong "
            "to the connection that took them, so a lock taken on another "
            "connection (or through a pooler that moved the session) cannot "
            "be released here", k, mode == PGLOCK_SHARED ? "shared"
                                                          : "exclusive");
    if (c->lifetime == PGLOCK_LIFETIME_XACT)
        return xact_unlock(c, h, k);

    /* Release by the coordinates we counted (a legacy key's value is
     * known since it was taken). */
    pglock_key tag = {.kind = PGLOCK_KEY_INT64};
    if (h->objsubid == 2) {
        tag.kind = PGLOCK_KEY_PAIR;
        tag.ns = (int32_t)h->classid;
        tag.nsid = (int32_t)h->objid;
    } else {
        tag.id = (int64_t)(((uint64_t)h->classid << 32) | h->objid);
    }
    pglock__call call;
    pglock__call_make(&call, &tag, mode, PGLOCK__OP_UNLOCK, 0, 1);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT %s", call.fn);
    pglock__wait_end end;
    /* The kernel's tcp_user_timeout bounds this on a dead network. */
    PGresult *res = pglock__exec_bounded_typed(c->conn, sql, call.nparams,
                                               call.types, call.params, -1,
                                               &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_TUPLES_OK ||
        PQntuples(res) != 1) {
        rc = pglock__fail_result(c, res, "could not release the lock");
        PQclear(res);
        if (rc == PGLOCK_ECONNLOST || end != PGLOCK__WAIT_DONE) {
            pglock__client_drop(c);
            return PGLOCK_ECONNLOST;
        }
        return rc;
    }
    int released = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (--h->count == 0 || !released)
        entry_remove(c, h);
    if (!released)
        return pglock__fail(c, PGLOCK_ENOTHELD,
            "lock %s was counted as held but the server session no longer "
            "holds it: it was lost", k);
    c->message[0] = '\0';
    c->sqlstate[0] = '\0';
    return 0;
}

int pglock_unlock_all(pglock_client *c)
{
    if (!c)
        return PGLOCK_EINVAL;
    int ready = pglock__client_enter(c);
    if (ready)
        return ready;
    if (c->lifetime == PGLOCK_LIFETIME_XACT) {
        int rc = pglock__holding_xact_end(c, -1);
        if (rc)
            return rc;
        pglock__locks_clear(c);
        return 0;
    }
    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(
        c->conn, "SELECT pg_advisory_unlock_all()", 0, NULL, -1, &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_TUPLES_OK) {
        int rc = pglock__fail_result(c, res, "could not release the locks");
        PQclear(res);
        if (rc == PGLOCK_ECONNLOST || end != PGLOCK__WAIT_DONE) {
            pglock__client_drop(c);
            return PGLOCK_ECONNLOST;
        }
        return rc;
    }
    PQclear(res);
    pglock__locks_clear(c);
    c->message[0] = '\0';
    c->sqlstate[0] = '\0';
    return 0;
}

int pglock_lock_count(const pglock_client *c, const pglock_key *key,
                      pglock_mode mode)
{
    if (!c || !check_key(key))
        return 0;
    const pglock__lock_entry *h = pglock__lock_find(c, key, mode);
    return h ? h->count : 0;
}
