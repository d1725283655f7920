/*
 * Writing a pglock_error (error_text.c), shared by the library and the
 * command line: a compiled module of src/common, hidden from
 * libpglock.so as every pglock__ name.  err may be NULL everywhere: the
 * call then only returns the code.
 */
#ifndef PGLOCK_ERROR_TEXT_H
#define PGLOCK_ERROR_TEXT_H

#include <stddef.h>
#include <libpq-fe.h>
#include "pglock.h"

/* Sets *err to code, sqlstate (NULL: none) and the printf-style message;
 * returns code. */
int pglock__error_set(pglock_error *err, int code, const char *sqlstate,
                      const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Sets *err from a failed query: "what: <the server's primary message>
 * (SQLSTATE xxxxx)", the code pglock__code_for_sqlstate() gives, except
 * PGLOCK_ECONNLOST when there is no SQLSTATE (res NULL, or libpq's own
 * error: the message is then conn's) or conn is no longer CONNECTION_OK.
 * Returns the code. */
int pglock__error_result(pglock_error *err, const PGresult *res,
                         const PGconn *conn, const char *what);
/* At the start of a public function given err (may be NULL): empties it
 * (code 0, no SQLSTATE, no message). */
void pglock__error_begin(pglock_error *err);
/* Maps a SQLSTATE to a PGLOCK_E* code (ESERVER when nothing fits). */
int pglock__code_for_sqlstate(const char *sqlstate);
/* Copies the first line of msg into buf, without the trailing newline. */
void pglock__first_line(char *buf, size_t len, const char *msg);
/* For an error that a server or pooler limit caused (too many clients,
 * a full lock table, PgBouncer's max_client_conn): the words that name
 * the setting to raise, as " (...)" to append to the message's one line;
 * NULL for any other error.  msg: the message (libpq's or the server's);
 * sqlstate: its SQLSTATE or "" / NULL. */
const char *pglock__limit_advice(const char *msg, const char *sqlstate);

#endif
