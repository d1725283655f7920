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
 * guarantees (make bench's section 11, bench/bench_sql_variants.c,
 * measures each form's cost on the server): the key's parameter types
 * are declared rather than cast, and there is no placeholder column
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
#include "lease_rules.h"

/* ------------------------------------------------------------- counts */

/* The entry for key+mode, or NULL.  An unresolved legacy key is found by
 * its name (and seed). */
pglock__lock_entry *pglock__lock_find(const pglock_client *c,
                                      const pglock_key *key, pglock_mode mode)
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

static int check_call(pglock_client *c, const pglock_key *key, pglock_mode mode)
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

/* ------------------------------------------------ the session statement */

/* The steps below write what went wrong into the caller's err and leave
 * the client as it was: pglock_lock() and pglock_lock_any() decide, once,
 * what a failure does to it (pglock__client_failed()). */

int pglock__session_statement(pglock_client *c, const char *sql, int nparams,
                              const Oid *types, const char *const *params,
                              int64_t deadline, pglock__answer *a,
                              pglock_error *err)
{
    a->nres = 0;
    a->cancelled = 0;
    if (!PQsendQueryParams(c->conn, sql, nparams, types, params, NULL, NULL,
                           0)) {
        pglock__error_result(err, NULL, c->conn,
                             "could not send the lock request");
        return err->code = PGLOCK_ECONNLOST;
    }
    pglock__wait w = {.deadline = deadline,
                      .interrupt_fd = c->opts.interrupt_fd,
                      .cancel_timeout_ms = c->opts.cancel_timeout_ms};
    pglock__wait_end end = pglock__await(c->conn, &w, a->res, &a->nres,
                                         &a->cancelled);
    if (end == PGLOCK__WAIT_DONE && a->nres > 0)
        return 0;
    if (end == PGLOCK__WAIT_ABANDONED)
        pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                          "could not cancel the wait within %ld ms, so the "
                          "connection was closed: every session lock of "
                          "this client is lost",
                          c->opts.cancel_timeout_ms);
    else
        pglock__error_result(err, a->nres ? a->res[a->nres - 1] : NULL, c->conn,
                             "connection lost while taking the lock");
    pglock__clear_results(a->res, a->nres);
    a->nres = 0;
    return err->code = PGLOCK_ECONNLOST;
}

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

int pglock__granted_among(PGconn *conn, const char *ids, int objsubid,
                          pglock_mode mode, pglock_key *resolve,
                          const char *failed, pglock_error *err)
{
    char sub[4], array[128], sql[sizeof GRANT_CHECK_SQL + sizeof array];
    const char *params[4] = {
        mode == PGLOCK_SHARED ? "ShareLock" : "ExclusiveLock", sub, ids, NULL};
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

    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(conn, sql, nparams, params,
                                         PGLOCK__CLOSE_TIMEOUT_MS, &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_TUPLES_OK ||
        PQntuples(res) != 1) {
        char what[96];
        snprintf(what, sizeof what,
                 "could not check pg_locks after a failed "
                 "%s; the connection was closed",
                 failed);
        pglock__error_result(err, res, conn, what);
        PQclear(res);
        return err->code = PGLOCK_ECONNLOST;
    }
    if (resolve) {
        resolve->id = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
        resolve->resolved = 1;
    }
    int index = PQgetisnull(res, 0, 1) ? -1 : atoi(PQgetvalue(res, 0, 1)) - 1;
    PQclear(res);
    return index;
}

/* Asks pg_locks whether this backend holds key in mode, a set of one:
 * pglock__granted_among()'s answer (0 held, -1 not, or PGLOCK_ECONNLOST).
 * An unresolved legacy key is resolved by the same statement, into *key. */
static int held_on_server(PGconn *conn, pglock_key *key, pglock_mode mode,
                          pglock_error *err)
{
    if (pglock__key_is_legacy(key) && !key->resolved)
        return pglock__granted_among(conn, NULL, 1, mode, key, "wait", err);
    uint32_t classid, objid;
    int objsubid;
    pglock_key_locktag(key, &classid, &objid, &objsubid);
    char ids[24];
    snprintf(ids, sizeof ids, "{%" PRId64 "}",
             (int64_t)(((uint64_t)classid << 32) | objid));
    return pglock__granted_among(conn, ids, objsubid, mode, NULL, "wait", err);
}

/* After a failed session wait (rc, its error in *err): the outcome, for
 * which pg_locks has the last word. */
static int wait_failed(PGconn *conn, int rc, int cancelled, pglock_key *key,
                       pglock_mode mode, long timeout_ms, pglock_error *err)
{
    if (rc == PGLOCK_ECONNLOST)
        return rc;
    if (rc == PGLOCK_EINTR && cancelled)
        rc = err->code = cancelled; /* our own cancel: interrupt or deadline */
    /* PostgreSQL can grant the lock in the instant the timeout or cancel
     * fires and still report the error, and even a try can fail after its
     * grant (a cancel landing just after pg_try_advisory_lock() returned):
     * pg_locks decides. */
    int held = held_on_server(conn, key, mode, err);
    if (held == PGLOCK_ECONNLOST || held == 0)
        return held;
    const char *state = err->sqlstate; /* the failed wait's, kept */
    char k[128];
    pglock__key_describe(key, k, sizeof k);
    if (rc == PGLOCK_ETIMEDOUT)
        snprintf(err->message, sizeof err->message,
                 "timed out after %ld ms waiting for lock %s%s%s%s", timeout_ms,
                 k, *state ? " (SQLSTATE " : "", state, *state ? ")" : "");
    else if (rc == PGLOCK_EINTR)
        snprintf(err->message, sizeof err->message,
                 "wait for lock %s was interrupted", k);
    return rc;
}

/* A session lock on the client's connection: 0 when held (the key
 * resolved into *key_io, not yet counted), else a code with its error in
 * *err. */
static int session_acquire(pglock_client *c, pglock_key *key_io,
                           pglock_mode mode, long timeout_ms, pglock_error *err)
{
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

    pglock__answer a;
    int64_t deadline = try ? -1
                           : pglock__deadline(timeout_ms,
                                              PGLOCK__DEADLINE_GRACE_MS);
    int rc = pglock__session_statement(c, sql, nparams, types + skip,
                                       params + skip, deadline, &a, err);
    if (rc)
        return rc;
    PGresult *r = a.res[a.nres - 1];
    if (PQresultStatus(r) != PGRES_TUPLES_OK || PQntuples(r) != 1) {
        rc = pglock__error_result(err, r, c->conn, "could not take the lock");
        pglock__clear_results(a.res, a.nres);
        rc = wait_failed(c->conn, rc, a.cancelled, &key, mode, timeout_ms, err);
        if (rc == 0)
            *key_io = key; /* granted all the same, and resolved */
        return rc;
    }
    int got = try ? PQgetvalue(r, 0, lock_col)[0] == 't' : 1;
    if (set_timeout)
        c->lock_timeout_ms = wanted;
    if (*call.value_expr) {
        key.id = strtoll(PQgetvalue(r, 0, lock_col + 1), NULL, 10);
        key.resolved = 1;
    }
    pglock__clear_results(a.res, a.nres);
    if (!got) {
        char k[128];
        pglock__key_describe(&key, k, sizeof k);
        return pglock__error_set(err, PGLOCK_EBUSY, NULL,
                                 "lock %s is held by another session", k);
    }
    *key_io = key;
    return 0;
}

/* ------------------------------------------- the holding transaction */

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
    const char *count =
        begin ? "'1'"
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

/* What the holding transaction learnt from a lock statement's answer:
 * the backend that ran it, and whether a legacy key that needed its value
 * got it.  0, or PGLOCK_ECONNLOST with its error in *err. */
static int holding_answer(pglock_client *c, const pglock_key *key, int begin,
                          int pid, pglock_error *err)
{
    if (key && pglock__key_is_legacy(key) && !key->resolved)
        /* held, but it could never be verified */
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "the server did not return the key's value: "
                                 "the connection was closed");
    if (begin) {
        c->in_xact = 1;
        c->backend_pid = pid;
    } else if (pid != c->backend_pid) {
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "the holding transaction reached backend %d "
                                 "instead of %d: its locks are gone",
                                 pid, c->backend_pid);
    }
    return 0;
}

/* One lock statement in the holding transaction (opened by it when none
 * is), with the hold's bookkeeping: the key's (stmt NULL) or a set's stmt
 * (key NULL; its index into *index_out).  0 when held, else a code with
 * its error in *err. */
static int holding_statement(pglock_client *c, pglock_key *key,
                             const char *stmt, pglock_mode mode,
                             long timeout_ms, int *index_out, pglock_error *err)
{
    int begin = !c->in_xact;
    if (c->beat_aborted)
        return pglock__error_set(
            err, PGLOCK_ESTATE, NULL,
            "the last heartbeat failed in the holding transaction (a "
            "cancel): confirm the lease with pglock_heartbeat() before "
            "taking another lock");
    char prelude[3000];
    int rc = prelude_sql(prelude, sizeof prelude, c, key, begin);
    if (rc)
        return pglock__error_set(err, rc, NULL,
                                 rc == PGLOCK_ENOMEM
                                     ? "out of memory"
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
    rc = stmt ? pglock__xact_run(c->conn, stmt, begin, timeout_ms, &req, err)
              : pglock__xact_lock_req(c->conn, key, mode, timeout_ms, begin,
                                      &req, err);
    /* A busy try inside the transaction still released its savepoint, and
     * with it the count its statement set. */
    if (rc == 0 || (rc == PGLOCK_EBUSY && !begin))
        c->xact_locks = (begin ? 0 : c->xact_locks) + 1;
    if (rc)
        return rc;
    return holding_answer(c, key, begin, pid, err);
}

int pglock__holding_xact_any(pglock_client *c, const char *stmt, int *index_out,
                             pglock_error *err)
{
    return holding_statement(c, NULL, stmt, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                             index_out, err);
}

/* ---------------------------------------------------------------- lock */

/* One attempt at the lock, in the client's lifetime: 0 when held (key
 * resolved, not yet counted), else a code with its error in *err. */
static int acquire(pglock_client *c, pglock_key *key, pglock_mode mode,
                   long timeout_ms, pglock_error *err)
{
    if (c->lifetime != PGLOCK_LIFETIME_XACT)
        return session_acquire(c, key, mode, timeout_ms, err);
    int rc = holding_statement(c, key, NULL, mode, timeout_ms, NULL, err);
    if (rc == PGLOCK_EBUSY) {
        char k[128];
        pglock__key_describe(key, k, sizeof k);
        pglock__error_set(err, PGLOCK_EBUSY, NULL,
                          "lock %s is held by another session", k);
    }
    return rc;
}

/* A slice's timeout message ("timed out after SLICE ms ..."), restated
 * for the whole wait. */
static void restate_timeout(pglock_error *err, long slice_ms, long whole_ms)
{
    char head[48], rest[sizeof err->message];
    int n = snprintf(head, sizeof head, "timed out after %ld ms", slice_ms);
    if (strncmp(err->message, head, (size_t)n) != 0)
        return;
    snprintf(rest, sizeof rest, "%s", err->message + n);
    /* (the head is at most 48 bytes: the rest fits after it) */
    snprintf(err->message, sizeof err->message, "timed out after %ld ms%.*s",
             whole_ms, (int)(sizeof err->message - sizeof head), rest);
}

/* The wait, in slices of T_s (lease_wait_slice_ms() says why) within the
 * caller's timeout, kept whole: a slice that the server ends with its
 * lock_timeout proves it alive, and the key is asked for again (queued
 * again, behind whoever came meanwhile); one it does not answer ends as
 * any unanswered wait does, in a cancel and, unanswered too, the
 * connection closed (PGLOCK_ECONNLOST). */
static int acquire_in_slices(pglock_client *c, pglock_key *key,
                             pglock_mode mode, long timeout_ms, long slice,
                             pglock_error *err)
{
    if (timeout_ms == PGLOCK_TRY)
        return acquire(c, key, mode, timeout_ms, err);
    int64_t end = timeout_ms < 0 ? -1 : pglock_now_ms() + timeout_ms;
    for (;;) {
        long t = slice;
        int last = 0;
        if (end >= 0 && end - pglock_now_ms() <= slice) {
            int64_t left = end - pglock_now_ms();
            t = left > 0 ? (long)left : 1;
            last = 1;
        }
        int rc = acquire(c, key, mode, t, err);
        if (rc == PGLOCK_ETIMEDOUT && !last)
            continue;
        if (rc == PGLOCK_ETIMEDOUT && t != timeout_ms)
            restate_timeout(err, t, timeout_ms);
        return rc;
    }
}

/* After a long wait the send time says little about the server's idle
 * clock, which starts when the lock is granted: a heartbeat confirms the
 * lease from a fresh, known moment.  Unconfirmed within half the lease,
 * the lock is given up: PGLOCK_ECONNLOST, with the connection closed. */
static int confirm_fresh(pglock_client *c, long ts)
{
    int rc = pglock_heartbeat(c, lease_confirm_timeout_ms(ts));
    if (rc != PGLOCK_ETIMEDOUT)
        return rc;
    pglock__client_drop(c);
    return PGLOCK_ECONNLOST;
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
    long ts = lease_of(c->opts.lease_ms, c->opts.dead_peer_ms);
    pglock_key key = *key_in;
    pglock_error err = {0};
    int64_t sent_at = pglock_now_ms();
    rc = acquire_in_slices(c, &key, mode, timeout_ms, lease_wait_slice_ms(ts),
                           &err);
    if (rc)
        return pglock__client_failed(c, &err);
    int64_t answered_at = pglock_now_ms();
    if ((rc = pglock__lock_granted(c, &key, mode, sent_at)) != 0)
        return rc;
    if (lease_wait_needs_confirm(ts, answered_at - sent_at))
        return confirm_fresh(c, ts);
    return 0;
}

/* ------------------------------------------------------------ release */

int pglock__holding_xact_end(pglock_client *c, long timeout_ms,
                             pglock_error *err)
{
    if (!c->in_xact || !c->conn)
        return 0;
    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(c->conn, "ROLLBACK", 0, NULL,
                                         timeout_ms, &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_COMMAND_OK) {
        pglock__error_result(err, res, c->conn,
                             "could not end the holding transaction;"
                             " the connection was closed");
        PQclear(res);
        err->code = PGLOCK_ECONNLOST;
        return err->code;
    }
    PQclear(res);
    c->in_xact = 0;
    c->backend_pid = 0;
    c->beat_aborted = 0;
    return 0;
}

/* The session's pg_advisory_unlock_all(): 0, or a code with its error in
 * *err (PGLOCK_ECONNLOST when the answer did not come). */
static int unlock_session(PGconn *conn, pglock_error *err)
{
    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(conn,
                                         "SELECT pg_advisory_unlock_all()", 0,
                                         NULL, -1, &end);
    int rc = 0;
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_TUPLES_OK) {
        rc = pglock__error_result(err, res, conn,
                                  "could not release the locks");
        if (end != PGLOCK__WAIT_DONE)
            rc = err->code = PGLOCK_ECONNLOST;
    }
    PQclear(res);
    return rc;
}

/* -------------------------------------------------------------- unlock */

/* pglock_unlock() with the xact lifetime: the lock goes only with its transaction. */
static int xact_unlock(pglock_client *c, pglock__lock_entry *h, const char *k)
{
    if (h->count > 1) {
        h->count--; /* still held, by the same transaction */
        return 0;
    }
    if (c->nlocks > 1)
        return pglock__fail(
            c, PGLOCK_ESTATE,
            "lock %s cannot be released alone: with the xact lifetime the locks are "
            "released together, when the holding transaction ends; release "
            "the client's other locks first, or use pglock_unlock_all()",
            k);
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
        return pglock__fail(
            c, PGLOCK_ENOTHELD,
            "lock %s (%s) is not held by this session: session locks belong "
            "to the connection that took them, so a lock taken on another "
            "connection (or through a pooler that moved the session) cannot "
            "be released here",
            k, mode == PGLOCK_SHARED ? "shared" : "exclusive");
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
        pglock_error err = {0};
        pglock__error_result(&err, res, c->conn, "could not release the lock");
        PQclear(res);
        if (end != PGLOCK__WAIT_DONE)
            err.code = PGLOCK_ECONNLOST;
        return pglock__client_failed(c, &err);
    }
    int released = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (--h->count == 0 || !released)
        entry_remove(c, h);
    if (!released)
        return pglock__fail(
            c, PGLOCK_ENOTHELD,
            "lock %s was counted as held but the server session no longer "
            "holds it: it was lost",
            k);
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
    int xact = c->lifetime == PGLOCK_LIFETIME_XACT;
    pglock_error err = {0};
    int rc = xact ? pglock__holding_xact_end(c, -1, &err)
                  : unlock_session(c->conn, &err);
    if (rc)
        return pglock__client_failed(c, &err);
    pglock__locks_clear(c);
    if (!xact) {
        c->message[0] = '\0';
        c->sqlstate[0] = '\0';
    }
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
