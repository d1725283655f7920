/*
 * Transaction locks on the caller's own PGconn.
 *
 * These are sent as one simple-protocol query holding several statements
 * (one round trip): it needs no prepared statement and no session state,
 * so it passes any pooler.  Keys are written as literals: integers that we
 * format, names through PQescapeLiteral().  The per-wait lock_timeout is
 * set transaction-locally and restored in the same statement that waits:
 *
 *   SELECT set_config('lock_timeout', x.old, true) FROM
 *     (SELECT current_setting('lock_timeout') AS old,
 *             set_config('lock_timeout', 'N', true), pg_advisory_xact_lock(K)) x
 *
 * (the subquery has volatile outputs, so it is not flattened, and its
 * target list runs left to right).  Inside the caller's transaction a
 * savepoint around it (a try's too) keeps a failure from aborting the
 * transaction.
 *
 * The SQL of every lock call is made here too: which advisory-lock
 * function, and how the key is passed (parameters for a client's own
 * connection, literals for these multi-statement queries).
 */
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "internal.h"

/* ------------------------------------------------------- the SQL of a call */

void pglock__key_describe(const pglock_key *key, char *buf, size_t len)
{
    switch (key->kind) {
    case PGLOCK_KEY_PAIR:
        snprintf(buf, len, "%" PRId32 ":%" PRId32, key->ns, key->nsid);
        return;
    case PGLOCK_KEY_INT64:
        snprintf(buf, len, "%" PRId64, key->id);
        return;
    case PGLOCK_KEY_TEXT:
        snprintf(buf, len, "%" PRId64 " (\"%.60s\")", key->id,
                 key->name ? key->name : "");
        return;
    case PGLOCK_KEY_HASHTEXT:
        snprintf(buf, len, "hashtext(\"%.60s\")", key->name ? key->name : "");
        return;
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        snprintf(buf, len, "hashtextextended(\"%.60s\", %" PRId64 ")",
                 key->name ? key->name : "", key->seed);
        return;
    }
    snprintf(buf, len, "(invalid key)");
}

static const char *fn_name(pglock_mode mode, pglock__op op, int xact)
{
    static const char *const names[3][2][2] = {
        {{"pg_advisory_lock", "pg_advisory_lock_shared"},
         {"pg_advisory_xact_lock", "pg_advisory_xact_lock_shared"}},
        {{"pg_try_advisory_lock", "pg_try_advisory_lock_shared"},
         {"pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared"}},
        {{"pg_advisory_unlock", "pg_advisory_unlock_shared"},
         {"pg_advisory_unlock", "pg_advisory_unlock_shared"}},
    };
    return names[op][xact ? 1 : 0][mode == PGLOCK_SHARED ? 1 : 0];
}

void pglock__call_make(pglock__call *out, const pglock_key *key,
                       pglock_mode mode, pglock__op op, int xact, int first)
{
    const char *fn = fn_name(mode, op, xact);
    memset(out, 0, sizeof *out);
    if (pglock__key_is_legacy(key) && key->resolved) {
        /* The server already told us its value: use the bigint. */
        pglock_key k = *key;
        k.kind = PGLOCK_KEY_INT64;
        pglock__call_make(out, &k, mode, op, xact, first);
        return;
    }
    switch (key->kind) {
    case PGLOCK_KEY_PAIR:
        snprintf(out->vbuf[0], sizeof out->vbuf[0], "%" PRId32, key->ns);
        snprintf(out->vbuf[1], sizeof out->vbuf[1], "%" PRId32, key->nsid);
        snprintf(out->fn, sizeof out->fn, "%s($%d, $%d)", fn, first, first + 1);
        out->params[0] = out->vbuf[0];
        out->params[1] = out->vbuf[1];
        out->types[0] = out->types[1] = PGLOCK__INT4OID;
        out->nparams = 2;
        return;
    case PGLOCK_KEY_HASHTEXT:
        snprintf(out->fn, sizeof out->fn, "%s(hashtext($%d))", fn, first);
        snprintf(out->value_expr, sizeof out->value_expr, "hashtext($%d)::int8",
                 first);
        out->params[0] = key->name;
        out->nparams = 1;
        return;
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        snprintf(out->vbuf[1], sizeof out->vbuf[1], "%" PRId64, key->seed);
        snprintf(out->fn, sizeof out->fn,
                 "%s(hashtextextended($%d, $%d::int8))", fn, first, first + 1);
        snprintf(out->value_expr, sizeof out->value_expr,
                 "hashtextextended($%d, $%d::int8)", first, first + 1);
        out->params[0] = key->name;
        out->params[1] = out->vbuf[1];
        out->nparams = 2;
        return;
    case PGLOCK_KEY_INT64:
    case PGLOCK_KEY_TEXT:
    default:
        snprintf(out->vbuf[0], sizeof out->vbuf[0], "%" PRId64, key->id);
        snprintf(out->fn, sizeof out->fn, "%s($%d)", fn, first);
        out->params[0] = out->vbuf[0];
        out->types[0] = PGLOCK__INT8OID;
        out->nparams = 1;
        return;
    }
}

int pglock__call_literal(char *buf, size_t len, PGconn *conn,
                         const pglock_key *key, pglock_mode mode, pglock__op op,
                         int xact)
{
    const char *fn = fn_name(mode, op, xact);
    int n;
    if (pglock__key_is_legacy(key) && !key->resolved) {
        char *lit = PQescapeLiteral(conn, key->name, key->name_len);
        if (!lit)
            return PGLOCK_ENOMEM;
        if (key->kind == PGLOCK_KEY_HASHTEXT)
            n = snprintf(buf, len, "%s(hashtext(%s))", fn, lit);
        else
            n = snprintf(buf, len,
                         "%s(hashtextextended(%s, (%" PRId64 ")::int8))", fn,
                         lit, key->seed);
        PQfreemem(lit);
    } else if (key->kind == PGLOCK_KEY_PAIR) {
        n = snprintf(buf, len, "%s((%" PRId32 ")::int4, (%" PRId32 ")::int4)",
                     fn, key->ns, key->nsid);
    } else {
        n = snprintf(buf, len, "%s((%" PRId64 ")::int8)", fn, key->id);
    }
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

int pglock__value_literal(char *buf, size_t len, PGconn *conn,
                          const pglock_key *key)
{
    if (!pglock__key_is_legacy(key) || !key->name)
        return PGLOCK_EINVAL;
    char *lit = PQescapeLiteral(conn, key->name, key->name_len);
    if (!lit)
        return PGLOCK_ENOMEM;
    int n;
    if (key->kind == PGLOCK_KEY_HASHTEXT)
        n = snprintf(buf, len, "hashtext(%s)::int8", lit);
    else
        n = snprintf(buf, len, "hashtextextended(%s, (%" PRId64 ")::int8)", lit,
                     key->seed);
    PQfreemem(lit);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

/* ------------------------------------------------------ transaction locks */

#define SAVEPOINT "pglock_xact_lock"

static int check_args(PGconn *conn, const pglock_key *key, pglock_mode mode,
                      long timeout_ms, pglock_error *err)
{
    pglock__error_begin(err);
    if (!conn || !key)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 "invalid argument: no connection or key");
    const char *why = pglock__key_invalid(key);
    if (why)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 PGLOCK__INVALID_KEY_FMT, why);
    if (mode != PGLOCK_EXCLUSIVE && mode != PGLOCK_SHARED)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 "invalid lock mode %d", (int)mode);
    if (timeout_ms < PGLOCK_WAIT_FOREVER || timeout_ms > INT_MAX)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 "invalid timeout %ld ms", timeout_ms);
    if (pglock__key_is_legacy(key) && !key->name && !key->resolved)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "invalid key");
    if (PQstatus(conn) != CONNECTION_OK)
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "the connection is not open");
    return 0;
}

/* Runs a short clean-up query (ROLLBACK ...), bounded. */
static int cleanup(PGconn *conn, const char *sql)
{
    if (!PQsendQuery(conn, sql))
        return -1;
    pglock__wait w = {.deadline = pglock__deadline(PGLOCK__CLOSE_TIMEOUT_MS, 0),
                      .interrupt_fd = -1,
                      .cancel_timeout_ms = -1};
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(conn, &w, res, &nres, &cancelled);
    int ok = end == PGLOCK__WAIT_DONE;
    for (int i = 0; i < nres; i++)
        if (PQresultStatus(res[i]) != PGRES_COMMAND_OK)
            ok = 0;
    pglock__clear_results(res, nres);
    if (end == PGLOCK__WAIT_ABANDONED)
        shutdown(PQsocket(conn), SHUT_RDWR);
    return ok ? 0 : -1;
}

/* Reads an attempt's results: the first that failed, the last row set
 * (the lock statement's), and the backend pid (into req->pid_out) and a
 * legacy key's value (into *value: returns 1) and the index of the key
 * a set's statement took (into req->index_out) that its columns carry. */
static int read_answer(PGresult **res, int nres, const pglock__xact_req *req,
                       const PGresult **failed, const PGresult **answer,
                       long long *value)
{
    int have_value = 0;
    for (int i = 0; i < nres; i++) {
        ExecStatusType st = PQresultStatus(res[i]);
        if (st == PGRES_TUPLES_OK) {
            *answer = res[i];
            int col = PQfnumber(res[i], PGLOCK__PID_COLUMN);
            if (req->pid_out && col >= 0 && PQntuples(res[i]) == 1)
                *req->pid_out = atoi(PQgetvalue(res[i], 0, col));
            col = PQfnumber(res[i], PGLOCK__INDEX_COLUMN);
            if (req->index_out && col >= 0 && PQntuples(res[i]) == 1 &&
                !PQgetisnull(res[i], 0, col))
                *req->index_out = atoi(PQgetvalue(res[i], 0, col));
            col = PQfnumber(res[i], PGLOCK__VALUE_COLUMN);
            if (req->resolve && col >= 0 && PQntuples(res[i]) == 1 &&
                !PQgetisnull(res[i], 0, col)) {
                *value = strtoll(PQgetvalue(res[i], 0, col), NULL, 10);
                have_value = 1;
            }
        } else if (st != PGRES_COMMAND_OK && !*failed) {
            *failed = res[i];
        }
    }
    return have_value;
}

/*
 * Sends sql (the whole attempt), waits for it with the deadline and the
 * interrupt, and works out the outcome.  begin: the attempt opened the
 * transaction itself (undo = ROLLBACK), else a savepoint (undo = ROLLBACK
 * TO SAVEPOINT + RELEASE).  try: the answer is the try function's boolean.
 */
static int attempt(PGconn *conn, const char *sql, int begin, int try,
                   long timeout_ms, const pglock__xact_req *req,
                   pglock_error *err)
{
    const char *undo = begin ? "ROLLBACK"
                             : "ROLLBACK TO SAVEPOINT " SAVEPOINT
                               "; RELEASE SAVEPOINT " SAVEPOINT;
    if (!PQsendQuery(conn, sql))
        return pglock__error_result(err, NULL, conn,
                                    "could not send the lock request");
    pglock__wait w = {
        .deadline = try ? -1
                        : pglock__deadline(timeout_ms,
                                           PGLOCK__DEADLINE_GRACE_MS),
        .interrupt_fd = req->interrupt_fd,
        .cancel_timeout_ms = req->cancel_timeout_ms};
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(conn, &w, res, &nres, &cancelled);

    if (end == PGLOCK__WAIT_ABANDONED) {
        /* A waiter may still be queued on the server: the only way to be
         * sure it is not is to end the connection.  It is the caller's, so
         * we shut its socket; the caller must PQfinish() it. */
        pglock__clear_results(res, nres);
        shutdown(PQsocket(conn), SHUT_RDWR);
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "could not cancel the wait in time, so the "
                                 "connection was shut down: PQfinish() it");
    }
    if (end == PGLOCK__WAIT_CONNLOST) {
        int rc = pglock__error_result(err, nres ? res[nres - 1] : NULL, conn,
                                      "connection lost while taking the lock");
        pglock__clear_results(res, nres);
        return rc;
    }

    const PGresult *failed = NULL, *answer = NULL;
    long long value = 0;
    int have_value = read_answer(res, nres, req, &failed, &answer, &value);
    if (!failed && answer && PQntuples(answer) == 1) {
        /* the try function's answer is the lock statement's last column */
        int got = !try ||
                  PQgetvalue(answer, 0, PQnfields(answer) - 1)[0] == 't';
        pglock__clear_results(res, nres);
        if (got && req->resolve && have_value) {
            req->resolve->id = (int64_t)value;
            req->resolve->resolved = 1;
        }
        if (got)
            return 0;
        pglock__error_set(err, PGLOCK_EBUSY, NULL,
                          "lock is held by another session");
        if (begin && cleanup(conn, undo) != 0)
            return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                     "could not roll back the transaction");
        return PGLOCK_EBUSY;
    }

    int rc = failed ? pglock__error_result(err, failed, conn,
                                           "could not take the lock")
                    : pglock__error_set(err, PGLOCK_ESERVER, NULL,
                                        "unexpected "
                                        "answer to the lock request");
    pglock__clear_results(res, nres);
    if (rc == PGLOCK_EINTR && cancelled) {
        rc = cancelled;
        if (err)
            err->code = rc;
    }
    if (rc == PGLOCK_ETIMEDOUT && err)
        snprintf(err->message, sizeof err->message,
                 "timed out after %ld ms waiting for the lock (SQLSTATE %s)",
                 timeout_ms, err->sqlstate[0] ? err->sqlstate : "none");
    if (rc == PGLOCK_EINTR && err)
        snprintf(err->message, sizeof err->message,
                 "wait for the lock was interrupted");
    if (rc == PGLOCK_ECONNLOST)
        return rc;
    /* Rolling back (to the savepoint) also releases a lock the server may
     * have granted in the instant the wait failed: not held, for sure. */
    if (cleanup(conn, undo) != 0)
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "could not roll back after a failed wait");
    return rc;
}

/* The waiting statement, with lock_timeout set and restored around it. */
static int wait_statement(char *buf, size_t len, const char *call,
                          long timeout_ms)
{
    int n = snprintf(buf, len,
                     "SELECT set_config('lock_timeout', x.old, true) FROM"
                     " (SELECT current_setting('lock_timeout') AS old,"
                     " set_config('lock_timeout', '%ld', true), %s) x",
                     timeout_ms < 0 ? 0L : timeout_ms, call);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

/* The key's lock statement: "SELECT <try call>" or the waiting one. */
static int key_statement(char *stmt, size_t len, PGconn *conn,
                         const pglock_key *key, pglock_mode mode,
                         long timeout_ms, pglock_error *err)
{
    char call[600];
    int try = timeout_ms == PGLOCK_TRY;
    int rc = pglock__call_literal(call, sizeof call, conn, key, mode,
                                  try ? PGLOCK__OP_TRY : PGLOCK__OP_LOCK, 1);
    if (rc == 0 && !try)
        rc = wait_statement(stmt, len, call, timeout_ms);
    else if (rc == 0)
        rc = snprintf(stmt, len, "SELECT %s", call) < (int)len ? 0
                                                               : PGLOCK_EINVAL;
    if (rc != 0)
        return pglock__error_set(err, rc, NULL,
                                 rc == PGLOCK_ENOMEM ? "out of memory"
                                                     : "key name too long");
    return 0;
}

/* The whole attempt around stmt, allocated (NULL: no memory). */
static char *wrap(const char *stmt, int begin, const pglock__xact_req *req)
{
    const char *begin_sql = req->begin_sql ? req->begin_sql : "BEGIN";
    const char *prelude = req->prelude ? req->prelude : "";
    const char *sep = req->prelude ? "; " : "";
    const char *after = req->after ? req->after : "";
    size_t len = strlen(begin_sql) + strlen(prelude) + strlen(stmt) +
                 strlen(after) + 128;
    char *sql = malloc(len);
    if (!sql)
        return NULL;
    if (begin)
        snprintf(sql, len, "%s; %s%s%s", begin_sql, prelude, sep, stmt);
    else
        /* A try needs its savepoint too: it returns false when the lock
         * is busy, but it fails like a wait when the server's lock table
         * is full (53200) or a cancel lands (57014). */
        snprintf(sql, len,
                 "SAVEPOINT " SAVEPOINT "; %s%s%s;"
                 " RELEASE SAVEPOINT " SAVEPOINT,
                 prelude, sep, stmt);
    if (*after) {
        size_t n = strlen(sql);
        snprintf(sql + n, len - n, "; %s", after);
    }
    return sql;
}

int pglock__xact_run(PGconn *conn, const char *stmt, int begin, long timeout_ms,
                     const pglock__xact_req *req, pglock_error *err)
{
    if (begin && PQtransactionStatus(conn) != PQTRANS_IDLE)
        return pglock__error_set(
            err, PGLOCK_ESTATE, NULL,
            "a transaction is already open on the "
            "connection: use pglock_xact_lock() inside it");
    if (!begin && PQtransactionStatus(conn) != PQTRANS_INTRANS)
        return pglock__error_set(err, PGLOCK_ESTATE, NULL,
                                 "a transaction lock needs an open transaction"
                                 " (and not a failed one): BEGIN first, or use"
                                 " pglock_xact_begin_lock()");
    char *sql = wrap(stmt, begin, req);
    if (!sql)
        return pglock__error_set(err, PGLOCK_ENOMEM, NULL, "out of memory");
    int rc = attempt(conn, sql, begin, timeout_ms == PGLOCK_TRY, timeout_ms,
                     req, err);
    free(sql);
    return rc;
}

int pglock__xact_lock_req(PGconn *conn, const pglock_key *key, pglock_mode mode,
                          long timeout_ms, int begin,
                          const pglock__xact_req *req, pglock_error *err)
{
    int rc = check_args(conn, key, mode, timeout_ms, err);
    if (rc)
        return rc;
    char stmt[900];
    rc = key_statement(stmt, sizeof stmt, conn, key, mode, timeout_ms, err);
    if (rc)
        return rc;
    return pglock__xact_run(conn, stmt, begin, timeout_ms, req, err);
}

int pglock_xact_lock(PGconn *conn, const pglock_key *key, pglock_mode mode,
                     long timeout_ms, int interrupt_fd, pglock_error *err)
{
    pglock__xact_req req = {
        .interrupt_fd = interrupt_fd,
        .cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS};
    return pglock__xact_lock_req(conn, key, mode, timeout_ms, 0, &req, err);
}

int pglock_xact_begin_lock(PGconn *conn, const pglock_key *key,
                           pglock_mode mode, long timeout_ms, int interrupt_fd,
                           pglock_error *err)
{
    pglock__xact_req req = {
        .interrupt_fd = interrupt_fd,
        .cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS};
    return pglock__xact_lock_req(conn, key, mode, timeout_ms, 1, &req, err);
}
