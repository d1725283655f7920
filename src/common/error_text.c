/*
 * Writing a pglock_error: the one place the library and the command line
 * write one, the SQLSTATE mapping, and the advice for a limit reached.
 *
 * Every message is one line (cut at the first newline), lower case, in
 * PostgreSQL's style.  A function on the caller's PGconn writes a
 * pglock_error; libpq's connection messages are made safe to print in
 * conn_error.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "error_text.h"

int pglock__code_for_sqlstate(const char *s)
{
    if (!s || !*s)
        return PGLOCK_ESERVER;
    if (strcmp(s, "55P03") == 0) /* lock_not_available: lock_timeout */
        return PGLOCK_ETIMEDOUT;
    if (strcmp(s, "57014") == 0) /* query_canceled */
        return PGLOCK_EINTR;
    if (strcmp(s, "53200") == 0) /* out_of_memory: the lock table */
        return PGLOCK_ELOCKTABLE;
    if (strncmp(s, "08", 2) == 0 || strncmp(s, "57P", 3) == 0)
        return PGLOCK_ECONNLOST; /* connection exception, admin shutdown */
    if (strcmp(s, "25P02") == 0 || strcmp(s, "25001") == 0)
        return PGLOCK_ESTATE; /* transaction aborted / active */
    return PGLOCK_ESERVER;
}

/* ---------------------------------------------------- limits, named */

/* Each limit by the words of its refusal, the first match winning.  A
 * server with a translated lc_messages says them otherwise: its SQLSTATE
 * (53300, 53200) then still names the two commonest. */
#define ADVICE_CONNECTIONS \
    " (all max_connections slots are in use: raise max_connections on the" \
    " server, or put a pooler in front)"
#define ADVICE_LOCK_TABLE \
    " (the server's lock table is full: raise max_locks_per_transaction," \
    " which needs a restart)"

static const struct {
    const char *words;
    const char *advice;
} limit_table[] = {
    {"too many clients already", ADVICE_CONNECTIONS},
    {"remaining connection slots are reserved",
     " (the slots left are superuser_reserved_connections: raise"
     " max_connections on the server)"},
    {"too many connections for role",
     " (the role's CONNECTION LIMIT is reached: raise it with ALTER ROLE)"},
    {"too many connections for database",
     " (the database's CONNECTION LIMIT is reached: raise it with ALTER"
     " DATABASE)"},
    {"no more connections allowed (max_client_conn)",
     " (PgBouncer's max_client_conn is reached: raise max_client_conn in"
     " pgbouncer.ini)"},
    {"query_wait_timeout",
     " (PgBouncer had no free server connection in time: raise its"
     " default_pool_size, within the server's max_connections)"},
    {"out of shared memory", ADVICE_LOCK_TABLE},
};

const char *pglock__limit_advice(const char *msg, const char *sqlstate)
{
    for (unsigned i = 0; msg && i < sizeof limit_table / sizeof limit_table[0];
         i++)
        if (strstr(msg, limit_table[i].words))
            return limit_table[i].advice;
    if (sqlstate && strcmp(sqlstate, "53300") == 0)
        return ADVICE_CONNECTIONS; /* too_many_connections */
    if (sqlstate && strcmp(sqlstate, "53200") == 0)
        return ADVICE_LOCK_TABLE; /* out_of_memory: the lock table */
    return NULL;
}

/* ------------------------------------------------------- the writers */

void pglock__first_line(char *buf, size_t len, const char *msg)
{
    if (len == 0)
        return;
    if (!msg)
        msg = "";
    size_t n = strcspn(msg, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(buf, msg, n);
    buf[n] = '\0';
}

static int vset(pglock_error *err, int code, const char *sqlstate,
                const char *fmt, va_list ap)
{
    if (!err)
        return code;
    err->code = code;
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s",
             sqlstate ? sqlstate : "");
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    err->message[strcspn(err->message, "\n")] = '\0';
    return code;
}

int pglock__error_set(pglock_error *err, int code, const char *sqlstate,
                      const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vset(err, code, sqlstate, fmt, ap);
    va_end(ap);
    return code;
}

int pglock__error_result(pglock_error *err, const PGresult *res,
                         const PGconn *conn, const char *what)
{
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    const char *primary = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY)
                              : NULL;
    char msg[400];
    if (primary && *primary)
        pglock__first_line(msg, sizeof msg, primary);
    else if (res && *PQresultErrorMessage(res))
        pglock__first_line(msg, sizeof msg, PQresultErrorMessage(res));
    else
        pglock__first_line(msg, sizeof msg, conn ? PQerrorMessage(conn) : "");
    if (!*msg)
        snprintf(msg, sizeof msg, "connection to the server was lost");
    if (!state)
        state = "";
    int code = pglock__code_for_sqlstate(state);
    /* No SQLSTATE: the answer never came (libpq's own error). */
    if (!*state || (conn && PQstatus(conn) != CONNECTION_OK))
        code = PGLOCK_ECONNLOST;
    const char *advice = pglock__limit_advice(msg, state);
    return pglock__error_set(err, code, state, "%s: %s%s%s%s%s", what, msg,
                             *state ? " (SQLSTATE " : "", state,
                             *state ? ")" : "", advice ? advice : "");
}

void pglock__error_begin(pglock_error *err)
{
    if (!err)
        return;
    err->code = 0;
    err->sqlstate[0] = '\0';
    err->message[0] = '\0';
}
