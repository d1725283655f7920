/*
 * The library's own connections and queries, bounded, and its safe
 * message for a failed connection: what pglock's one-shot commands
 * (status, doctor, key, history, terminate) need beside the public API.
 * Internal: declared here, not in pglock.h, and hidden from libpglock.so
 * (as every pglock__ name); the command line reaches them through the
 * static archive pglock_static, which holds the library's objects and is
 * never installed.  A library user has libpq for its own connections;
 * pglock's promise to it is about locks, not about a second connection.
 */
#ifndef PGLOCK_BOUNDED_CONN_H
#define PGLOCK_BOUNDED_CONN_H

#include <stddef.h>
#include <stdint.h>
#include <libpq-fe.h>
#include "pglock.h"

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

#endif
