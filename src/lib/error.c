/*
 * Errors: the one place the library writes them, the SQLSTATE mapping,
 * and codes turned into words.
 *
 * Every message is one line (cut at the first newline), lower case, in
 * PostgreSQL's style.  A function on the caller's PGconn writes a
 * pglock_error; a client keeps a copy of its last one (message and
 * SQLSTATE, for pglock_client_error()).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"

/* ------------------------------------------------------ codes to words */

static const struct {
    int code;
    const char *name;
    const char *text;
} error_table[] = {
    {PGLOCK_OK, "PGLOCK_OK", "success"},
    {PGLOCK_EBUSY, "PGLOCK_EBUSY", "lock is held by another session"},
    {PGLOCK_ETIMEDOUT, "PGLOCK_ETIMEDOUT", "timed out waiting for the lock"},
    {PGLOCK_EINTR, "PGLOCK_EINTR", "wait for the lock was interrupted"},
    {PGLOCK_ENOTHELD, "PGLOCK_ENOTHELD", "lock is not held by this client"},
    {PGLOCK_ECONNLOST, "PGLOCK_ECONNLOST", "connection to the server was lost"},
    {PGLOCK_ECONNECT, "PGLOCK_ECONNECT", "could not connect to the server"},
    {PGLOCK_EPOOLER, "PGLOCK_EPOOLER", "a connection pooler is in the path"},
    {PGLOCK_ESTANDBY, "PGLOCK_ESTANDBY", "server is a standby"},
    {PGLOCK_ELOCKTABLE, "PGLOCK_ELOCKTABLE", "server's lock table is full"},
    {PGLOCK_EINVAL, "PGLOCK_EINVAL", "invalid argument"},
    {PGLOCK_ENOMEM, "PGLOCK_ENOMEM", "out of memory"},
    {PGLOCK_ESERVER, "PGLOCK_ESERVER", "server reported an error"},
    {PGLOCK_ESTATE, "PGLOCK_ESTATE", "operation not allowed in this state"},
    {PGLOCK_EVERSION, "PGLOCK_EVERSION", "server version is too old"},
    {PGLOCK_EAGAIN, "PGLOCK_EAGAIN", "operation still in progress"},
};

static int find(int code)
{
    for (unsigned i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == code)
            return (int)i;
    return -1;
}

const char *pglock_strerror(int code)
{
    int i = find(code);
    return i < 0 ? "unknown error" : error_table[i].text;
}

const char *pglock_err_name(int code)
{
    int i = find(code);
    return i < 0 ? "PGLOCK_EUNKNOWN" : error_table[i].name;
}

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
    const char *primary =
        res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
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
    return pglock__error_set(err, code, state, "%s: %s%s%s%s", what, msg,
                             *state ? " (SQLSTATE " : "", state,
                             *state ? ")" : "");
}

int pglock__fail_error(pglock_client *c, const pglock_error *err)
{
    snprintf(c->message, sizeof c->message, "%s", err->message);
    snprintf(c->sqlstate, sizeof c->sqlstate, "%s", err->sqlstate);
    return err->code;
}

int pglock__fail(pglock_client *c, int code, const char *fmt, ...)
{
    pglock_error err;
    va_list ap;
    va_start(ap, fmt);
    vset(&err, code, NULL, fmt, ap);
    va_end(ap);
    return pglock__fail_error(c, &err);
}

int pglock__fail_result(pglock_client *c, const PGresult *res,
                        const char *what)
{
    pglock_error err;
    pglock__error_result(&err, res, c->conn, what);
    return pglock__fail_error(c, &err);
}

/* ------------------------------------------ connection errors, printable */

/* 1 if msg (libpq's, for a failed connection) is the error libpq reports
 * for parsing conninfo itself: then it may quote any part of it. */
static int is_parse_error(const char *msg, const char *conninfo)
{
    if (!conninfo || !*conninfo)
        return 0;
    char *perr = NULL;
    PQconninfoOption *o = PQconninfoParse(conninfo, &perr);
    if (o) {
        PQconninfoFree(o);
        return 0;
    }
    if (!perr)
        return 1; /* out of memory: hide to be safe */
    char first[256];
    pglock__first_line(first, sizeof first, perr);
    PQfreemem(perr);
    return *first && strstr(msg, first) != NULL;
}

static int is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

/* 1 if the n bytes at name are a word that conninfo uses as a keyword
 * (followed by '=', as in "bogus_option=1" or "?bogus_option=1"): libpq's
 * "invalid connection option" names it, and a name is no secret. */
static int is_keyword_of(const char *name, size_t n, const char *conninfo)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_word_char(name[i]))
            return 0;
    for (const char *p = conninfo; *p; p++) {
        if (strncmp(p, name, n) != 0 ||
            (p > conninfo && is_word_char(p[-1])))
            continue;
        const char *q = p + n;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q == '=')
            return 1;
    }
    return 0;
}

/* The quote that closes the one at open: libpq quotes conninfo verbatim,
 * and a '"' inside it would end the quote too soon, so the farthest '"'
 * with a piece of conninfo before it wins (else the next one; NULL: none). */
static const char *quote_end(const char *open, const char *conninfo)
{
    const char *next = strchr(open + 1, '"'), *best = NULL;
    for (const char *q = next; q; q = strchr(q + 1, '"'))
        if (memmem(conninfo, strlen(conninfo), open + 1,
                   (size_t)(q - open - 1)))
            best = q;
    return best ? best : next;
}

/* 1 if the n bytes at part, where they stand in conninfo, may be (or
 * hold) a secret: libpq itself decides.  Every occurrence of part is
 * replaced by a marker and the result parsed again; unless it parses and
 * no secret field (dispchar "*": password, sslpassword) holds the marker,
 * the part stays hidden. */
static int may_be_secret(const char *part, size_t n, const char *conninfo)
{
    static const char marker[] = "pglockmarker";
    size_t clen = strlen(conninfo), cap = clen * (sizeof marker) + 1;
    char *copy = n ? malloc(cap) : NULL;
    if (!copy)
        return 1;
    size_t o = 0;
    for (const char *p = conninfo; *p;) {
        if (strncmp(p, part, n) == 0) {
            memcpy(copy + o, marker, sizeof marker - 1);
            o += sizeof marker - 1;
            p += n;
        } else {
            copy[o++] = *p++;
        }
    }
    copy[o] = '\0';
    PQconninfoOption *opts = PQconninfoParse(copy, NULL);
    free(copy);
    if (!opts)
        return 1;
    int secret = 0;
    for (PQconninfoOption *opt = opts; opt->keyword; opt++)
        if (opt->dispchar && opt->dispchar[0] == '*' && opt->val &&
            strstr(opt->val, marker))
            secret = 1;
    PQconninfoFree(opts);
    return secret;
}

const char *pglock_conn_error_message(char *buf, size_t len,
                                      const char *message,
                                      const char *conninfo)
{
    if (!buf || len == 0)
        return buf;
    char line[512];
    pglock__first_line(line, sizeof line, message ? message : "");
    if (!is_parse_error(line, conninfo)) {
        snprintf(buf, len, "%s", line);
        return buf;
    }
    /* Each "quoted part" becomes "***", unless it is libpq's own "=", a
     * keyword of conninfo, or a part that holds no secret; the words
     * around it stay. */
    size_t o = 0;
    for (const char *p = line; *p && o + 1 < len;) {
        if (*p != '"') {
            buf[o++] = *p++;
            continue;
        }
        const char *end = quote_end(p, conninfo);
        size_t n = end ? (size_t)(end - p - 1) : strlen(p + 1);
        int keep = (n == 1 && p[1] == '=') ||
                   is_keyword_of(p + 1, n, conninfo) ||
                   !may_be_secret(p + 1, n, conninfo);
        const char *shown = keep ? NULL : "***";
        buf[o++] = '"';
        for (size_t i = 0; i < (shown ? 3 : n) && o + 1 < len; i++)
            buf[o++] = shown ? shown[i] : p[1 + i];
        if (end && o + 1 < len)
            buf[o++] = '"';
        p = end ? end + 1 : p + 1 + n;
    }
    buf[o] = '\0';
    return buf;
}
