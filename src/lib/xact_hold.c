/*
 * The client's xact hold: its locks are transaction locks inside one open
 * READ COMMITTED transaction that does nothing else, so that they pass a
 * transaction-mode pooler, which keeps an open transaction on one server
 * backend.
 *
 * The first lock opens the transaction, applies the lock connection's
 * settings transaction-locally (never a plain SET: through a pooler it
 * would stay on a server connection other clients get next) and takes the
 * lock, all in one round trip; idle_in_transaction_session_timeout is the
 * lease's server-side clock.  The transaction is READ ONLY and runs only
 * short statements, so it never gets a transaction id and holds no
 * snapshot between them: it does not hold back VACUUM.  Each statement
 * also returns pg_backend_pid(), checked against the one recorded when the
 * transaction began, and counts itself in a transaction-local setting
 * that the heartbeat reads back (heartbeat.c).
 */
#include <stdio.h>
#include <string.h>
#include "internal.h"

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
static int hold_statement(pglock_client *c, pglock_key *key, const char *stmt,
                          pglock_mode mode, long timeout_ms, int *index_out)
{
    int begin = !c->in_xact;
    char prelude[3000];
    int rc = prelude_sql(prelude, sizeof prelude, c, key, begin);
    if (rc)
        return pglock__fail(c, rc, rc == PGLOCK_ENOMEM ? "out of memory"
                                   : "invalid options or key name too long");
    int pid = 0;
    pglock__xact_req req = {.begin_sql = BEGIN_SQL,
                            .prelude = prelude,
                            .interrupt = c->opts.interrupt,
                            .interrupt_fd = c->opts.interrupt_fd,
                            .cancel_timeout_ms = c->opts.cancel_timeout_ms,
                            .pid_out = &pid,
                            .resolve = key,
                            .index_out = index_out};
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

int pglock__xact_hold_lock(pglock_client *c, pglock_key *key,
                           pglock_mode mode, long timeout_ms)
{
    int rc = hold_statement(c, key, NULL, mode, timeout_ms, NULL);
    if (rc == PGLOCK_EBUSY) {
        char k[128];
        pglock__key_describe(key, k, sizeof k);
        return pglock__fail(c, PGLOCK_EBUSY,
                            "lock %s is held by another session", k);
    }
    return rc;
}

int pglock__xact_hold_any(pglock_client *c, const char *stmt, int *index_out)
{
    return hold_statement(c, NULL, stmt, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                          index_out);
}

int pglock__xact_hold_end(pglock_client *c, long timeout_ms)
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
    return 0;
}
