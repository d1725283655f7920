/*
 * The client's state that every operation shares: whether it can start a
 * query, its counted holds, what happens when its connection is lost,
 * and freeing it.
 */
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
#include "internal.h"

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

static void free_params(char **p)
{
    for (size_t i = 0; p && p[i]; i++)
        free(p[i]);
    free(p);
}

void pglock__client_free(pglock_client *c)
{
    pglock__locks_clear(c);
    free(c->locks);
    free(c->database);
    free_params(c->conn_keywords);
    free_params(c->conn_values);
    free(c);
}
