/*
 * The client's state that every operation shares: whether it can start a
 * query, its counted holds, its last error (message and SQLSTATE, for
 * pglock_client_error()), what happens when its connection is lost, and
 * freeing it.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "internal.h"

/* ------------------------------------------------------ its last error */

int pglock__fail_error(pglock_client *c, const pglock_error *err)
{
    snprintf(c->message, sizeof c->message, "%s", err->message);
    snprintf(c->sqlstate, sizeof c->sqlstate, "%s", err->sqlstate);
    return err->code;
}

int pglock__fail(pglock_client *c, int code, const char *fmt, ...)
{
    char msg[sizeof c->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pglock_error err = {0};
    pglock__error_set(&err, code, NULL, "%s", msg);
    return pglock__fail_error(c, &err);
}

int pglock__fail_result(pglock_client *c, const PGresult *res, const char *what)
{
    pglock_error err = {0};
    pglock__error_result(&err, res, c->conn, what);
    return pglock__fail_error(c, &err);
}

int pglock__client_failed(pglock_client *c, const pglock_error *err)
{
    pglock__fail_error(c, err);
    if (err->code == PGLOCK_ECONNLOST)
        pglock__client_drop(c);
    return err->code;
}

/* ------------------------------------------------------ its connection */

void pglock__client_drop(pglock_client *c)
{
    if (c->conn) {
        /* Abandoned mid-query: shut the socket first, so that finishing
         * the connection cannot block on a dead network. */
        if (PQsocket(c->conn) >= 0)
            shutdown(PQsocket(c->conn), SHUT_RDWR);
        PQfinish(c->conn);
        c->conn = NULL;
    }
    pglock__locks_clear(c);
    c->heartbeat_busy = 0;
    c->heartbeat_error = 0;
    c->releasing = 0;
    c->released = 0;
    c->in_xact = 0;
    c->beat_aborted = 0;
}

int pglock__client_ready(pglock_client *c)
{
    /* A forked child shares the parent's socket: one byte of its own on
     * it would break the parent's protocol and session. */
    if (c->owner_pid != (int)getpid())
        return pglock__fail(c, PGLOCK_ESTATE,
                            "the client belongs to process %d, which opened "
                            "it; a forked child may only close it",
                            c->owner_pid);
    c->released = 0; /* a call after the release may take a lock again */
    if (!c->conn)
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the lock connection is closed: it was lost "
                            "earlier, with every lock it held");
    if (c->heartbeat_busy)
        return pglock__fail(c, PGLOCK_ESTATE,
                            "a heartbeat is in progress on this client");
    return 0;
}

int pglock__client_read_begin(pglock_client *c)
{
    if (!c)
        return PGLOCK_EINVAL;
    int rc = pglock__client_enter(c);
    if (rc)
        return rc;
    if (c->beat_aborted)
        return pglock__fail(c, PGLOCK_ESTATE,
                            "the last heartbeat failed in the holding "
                            "transaction (a cancel): confirm the lease with "
                            "pglock_heartbeat() first");
    return 0;
}

int pglock__client_read_end(pglock_client *c, int rc, const pglock_error *err)
{
    if (rc == 0) {
        c->message[0] = '\0';
        c->sqlstate[0] = '\0';
        return 0;
    }
    pglock_error e = *err;
    e.code = rc;
    pglock__fail_error(c, &e);
    if (rc == PGLOCK_ECONNLOST || !c->conn ||
        PQstatus(c->conn) != CONNECTION_OK)
        pglock__client_drop(c);
    else if (c->in_xact && PQtransactionStatus(c->conn) == PQTRANS_INERROR)
        /* Failed inside the savepoint the last lock statement left: it
         * costs that savepoint only, which the next heartbeat rolls back
         * to, as after a cancelled heartbeat. */
        c->beat_aborted = 1;
    return rc;
}

void pglock__locks_clear(pglock_client *c)
{
    for (size_t i = 0; i < c->nlocks; i++)
        free(c->locks[i].name);
    c->nlocks = 0;
}

int pglock__client_held(const pglock_client *c)
{
    return c->hold_running && c->owner_pid == (int)getpid();
}

int pglock__client_enter(pglock_client *c)
{
    return pglock__client_held(c) ? PGLOCK_ESTATE : pglock__client_ready(c);
}

/* The parameters keep_params() copied: keywords NULL-terminated, and
 * values one per keyword (and one beyond), any of which may be NULL (a
 * NULL value, which libpq ignores), so they are counted by the keywords,
 * not by their own first NULL. */
static void free_params(char **keywords, char **values)
{
    size_t n = 0;
    while (keywords && keywords[n])
        free(keywords[n++]);
    for (size_t i = 0; values && i <= n; i++)
        free(values[i]);
    free(keywords);
    free(values);
}

void pglock__client_free(pglock_client *c)
{
    pglock__locks_clear(c);
    free(c->locks);
    free(c->database);
    free_params(c->conn_keywords, c->conn_values);
    free(c);
}
