/*
 * Connections and queries that never wait past a deadline or an
 * interrupt, and a failed connection's message made safe to print: one
 * compiled module of src/common (bounded_connect.c, bounded_query.c,
 * conn_error.c) that the library and the command line both link.  The
 * library waits for every query of its own here; pglock's one-shot
 * commands (status, doctor, key, history, terminate) connect and query
 * with it.  Internal: hidden from libpglock.so, as every pglock__ name.
 * A library user has libpq for its own connections; pglock's promise to
 * it is about locks, not about a second connection, so none of this is
 * in pglock.h.
 */
#ifndef PGLOCK_BOUNDED_CONN_H
#define PGLOCK_BOUNDED_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <libpq-fe.h>
#include "pglock.h"

/* How long a cancel may take before the connection is given up, when the
 * caller gave no other bound. */
#define PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS 2000L

/*
 * libpq's message for a failed connection (message: PQerrorMessage(), or
 * PQconninfoParse()'s errmsg), made safe to print: its first line, and
 * when it is libpq's complaint about the conninfo string or URI itself
 * (given as conninfo, the dbname that libpq expands), every part it
 * quotes that may hold the password is replaced by "***"
 * (postgresql://app:s3cr%ZZet@host: invalid percent-encoded token:
 * "***"); libpq decides: a part it would not read into a password field
 * stays (a misspelt keyword, a bad dbname).  Other messages are kept
 * whole.  Returns buf.  pglock_client_error() is already safe.
 */
const char *pglock__conn_error_message(char *buf, size_t len,
                                       const char *message,
                                       const char *conninfo);

/*
 * PQconnectdbParams() that never blocks past a deadline or an interrupt.
 * deadline is on pglock_now_ms()'s clock (-1: none): past it the connect
 * gives up with PGLOCK_ETIMEDOUT ("could not connect in time").  It connects without blocking and enforces connect_timeout for each host
 * address tried, as the blocking connect does (libpq leaves that to the
 * caller of its non-blocking connect): the conninfo's connect_timeout,
 * else PGCONNECT_TIMEOUT, else PGLOCK_CONNECT_TIMEOUT_S; "0" waits
 * forever.  A host that does not answer in time is skipped for the next
 * one.  It returns as soon as interrupt_fd becomes readable (-1: none).  libpq still looks host names up
 * synchronously: a dead DNS server holds it for the resolver's timeout.
 *
 * Returns the connection, or NULL with err set: PGLOCK_EINVAL (libpq
 * refused the options themselves: a misspelt keyword, say),
 * PGLOCK_ECONNECT (no host accepted us), PGLOCK_ETIMEDOUT, PGLOCK_EINTR
 * or PGLOCK_ENOMEM.
 * err->message is safe to print (pglock__conn_error_message()).
 * The server's notices are dropped.
 */
PGconn *pglock__connect_params(const char *const *keywords,
                               const char *const *values, int expand_dbname,
                               int64_t deadline, int interrupt_fd,
                               pglock_error *err);

/*
 * PQexecParams() (text parameters and results) with a deadline: after
 * timeout_ms (PGLOCK_WAIT_FOREVER: none) the query is cancelled on the
 * server and NULL returned with PGLOCK_ETIMEDOUT; a cancel that is not
 * answered within 2 s either shuts the connection's socket down and
 * returns PGLOCK_ECONNLOST (PQfinish() it then).
 * Returns the last result, whatever its status (the caller checks and
 * PQclear()s it), or NULL with err set (PGLOCK_ECONNLOST, ...).
 */
PGresult *pglock__exec_params(PGconn *conn, const char *sql, int nparams,
                              const char *const *params, long timeout_ms,
                              pglock_error *err);

/* ---- waiting for a query (bounded_query.c) */

typedef struct pglock__wait {
    int64_t deadline; /* pglock_now_ms() value, or -1: none */
    int interrupt_fd; /* readable: interrupted; -1: none */
    long cancel_timeout_ms;
} pglock__wait;

typedef enum pglock__wait_end {
    PGLOCK__WAIT_DONE = 0, /* every result is in */
    PGLOCK__WAIT_CONNLOST, /* the connection failed */
    PGLOCK__WAIT_ABANDONED /* cancel not confirmed in time: the
                                   connection must not be used again */
} pglock__wait_end;

#define PGLOCK__MAX_RESULTS 8

/* Collects the results of the query already sent on conn.  Waits until
 * they are all in, the deadline passes or the interrupt fires; in the last
 * two cases cancels the query on the server (in a thread joined before
 * the return) and keeps collecting until the cancel is confirmed or cancel_timeout_ms has
 * passed.  *cancelled tells why a cancel was sent (0, PGLOCK_ETIMEDOUT or
 * PGLOCK_EINTR).  Results go to res[] (caller PQclear()s each), at most
 * PGLOCK__MAX_RESULTS (the rest are cleared), count in *nres.  When DONE
 * is returned no cancel is pending: the next query is safe to send. */
pglock__wait_end pglock__await(PGconn *conn, const pglock__wait *w,
                               PGresult **res, int *nres, int *cancelled);
void pglock__clear_results(PGresult **res, int nres);

/* Waits for the answer to the query already sent on conn until deadline
 * (a pglock_now_ms() value, -1: none), with no interrupt and no cancel:
 * at the deadline the query is left running and *end is ABANDONED (wait
 * again, or close conn).  Returns the last result (caller clears); after a
 * failure the server's last words if any came (*end CONNLOST), or NULL.
 * The one wait of every query with a deadline and no cancel, the
 * library's and the command line's. */
PGresult *pglock__answer_until(PGconn *conn, int64_t deadline,
                               pglock__wait_end *end);
/* Sends one parameterised query (types NULL: inferred) and waits for it
 * as pglock__answer_until(); a failed send is CONNLOST, with NULL. */
PGresult *pglock__exec_until(PGconn *conn, const char *sql, int nparams,
                             const Oid *types, const char *const *params,
                             int64_t deadline, pglock__wait_end *end);
/* pglock__exec_until() within timeout_ms from now (-1: forever). */
PGresult *pglock__exec_bounded(PGconn *conn, const char *sql, int nparams,
                               const char *const *params, long timeout_ms,
                               pglock__wait_end *end);
/* The same with the parameters' types declared (NULL: inferred). */
PGresult *pglock__exec_bounded_typed(PGconn *conn, const char *sql, int nparams,
                                     const Oid *types,
                                     const char *const *params, long timeout_ms,
                                     pglock__wait_end *end);

/* ---- connecting (bounded_connect.c) */

/* pglock__connect_params() with w's deadline (-1: none) on top of the
 * per-host connect_timeout; its PGLOCK_ETIMEDOUT is that deadline's. */
PGconn *pglock__connect(const char *const *keywords, const char *const *values,
                        int expand_dbname, const pglock__wait *w,
                        pglock_error *err);

/* Deadline for a wait of timeout_ms starting now (-1 for forever). */
int64_t pglock__deadline(long timeout_ms, long grace_ms);

#endif
