/*
 * Connecting without ever blocking past a deadline or an interrupt.
 *
 * PQconnectdbParams() waits in poll() with signals retried, so a server
 * that accepts and never answers holds the caller until connect_timeout
 * (forever when unset) and a SIGTERM handler's flag is never looked at.
 * libpq's non-blocking connect does not enforce connect_timeout at all:
 * this file does, per host address tried, as the blocking connect does.
 * What libpq still does synchronously is the host-name lookup inside
 * PQconnectPoll(): a dead DNS server can hold a connect for the
 * resolver's own timeout (resolv.conf: timeout x attempts).
 */
#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounded_conn.h"
#include "error_text.h"
#include "conninfo_rules.h"

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message;
}

/* The value of keyword in conn's effective options, or NULL. */
static char *option_of(PGconn *conn, const char *keyword)
{
    PQconninfoOption *opts = PQconninfo(conn);
    char *v = NULL;
    for (PQconninfoOption *o = opts; o && o->keyword && !v; o++)
        if (strcmp(o->keyword, keyword) == 0 && o->val)
            v = strdup(o->val);
    PQconninfoFree(opts);
    return v;
}

/* The time each host address gets (-1: forever), by libpq's rule. */
static long host_timeout_ms(PGconn *conn)
{
    char *v = option_of(conn, "connect_timeout");
    long ms = conninfo_timeout_ms(v);
    free(v);
    return ms;
}

/* Which address libpq is trying: it moves on by itself after a refusal,
 * and each address gets a full connect_timeout. */
static void attempt_of(PGconn *conn, char *buf, size_t len)
{
    const char *h = PQhost(conn), *a = PQhostaddr(conn), *p = PQport(conn);
    snprintf(buf, len, "%s|%s|%s", h ? h : "", a ? a : "", p ? p : "");
}

/* The items of list from index from on, comma-joined (a single item,
 * which libpq applies to every host, stays as it is). */
static char *list_tail(const char *list, int from)
{
    if (!list || conninfo_list_length(list) <= 1)
        return strdup(list ? list : "");
    const char *p = list;
    for (int i = 0; i < from && (p = strchr(p, ',')) != NULL; i++)
        p++;
    return strdup(p ? p : "");
}

/*
 * A new connection to the hosts after the one conn is stuck on, with
 * conn's effective options otherwise (env, service file and expanded
 * dbname included); NULL when that host was the last.  libpq has no way
 * to skip a host from outside, so the skip is a fresh start.
 */
static PGconn *start_after_current(PGconn *conn)
{
    PQconninfoOption *opts = PQconninfo(conn);
    if (!opts)
        return NULL;
    const char *host = NULL, *addr = NULL, *port = NULL;
    int n = 0;
    for (PQconninfoOption *o = opts; o->keyword; o++, n++) {
        if (!strcmp(o->keyword, "host"))
            host = o->val;
        else if (!strcmp(o->keyword, "hostaddr"))
            addr = o->val;
        else if (!strcmp(o->keyword, "port"))
            port = o->val;
    }
    int hosts = conninfo_list_length(host) > conninfo_list_length(addr)
                    ? conninfo_list_length(host)
                    : conninfo_list_length(addr);
    const char *cur_h = PQhost(conn), *cur_p = PQport(conn);
    int at = -1;
    for (int i = 0; i < hosts && at < 0; i++) {
        char h[256], a[256], p[32];
        conninfo_list_item(host, i, h, sizeof h);
        conninfo_list_item(addr, i, a, sizeof a);
        conninfo_list_item(port, conninfo_list_length(port) > 1 ? i : 0, p,
                           sizeof p);
        if ((!strcmp(h, cur_h ? cur_h : "") ||
             !strcmp(a, cur_h ? cur_h : "")) &&
            (!*p || !strcmp(p, cur_p ? cur_p : "")))
            at = i;
    }
    PGconn *next = NULL;
    if (at >= 0 && at + 1 < hosts) {
        const char **k = calloc((size_t)n + 1, sizeof *k);
        const char **v = calloc((size_t)n + 1, sizeof *v);
        char *tails[3] = {list_tail(host, at + 1), list_tail(addr, at + 1),
                          list_tail(port, at + 1)};
        int m = 0;
        for (PQconninfoOption *o = opts; k && v && o->keyword; o++) {
            const char *val = o->val;
            if (!strcmp(o->keyword, "host"))
                val = host ? tails[0] : NULL;
            else if (!strcmp(o->keyword, "hostaddr"))
                val = addr ? tails[1] : NULL;
            else if (!strcmp(o->keyword, "port"))
                val = port ? tails[2] : NULL;
            if (val) {
                k[m] = o->keyword;
                v[m++] = val;
            }
        }
        if (k && v && tails[0] && tails[1] && tails[2])
            next = PQconnectStartParams(k, v, 0);
        for (int i = 0; i < 3; i++)
            free(tails[i]);
        free(k);
        free(v);
    }
    PQconninfoFree(opts);
    return next;
}

/* 1 if libpq refused the options themselves, before trying any host: a
 * conninfo string or URI it cannot parse (conninfo: the caller's, or
 * NULL), a misspelled keyword, a bad sslmode...: the caller's mistake. */
static int is_options_error(const char *msg, const char *conninfo)
{
    if (conninfo &&
        (strchr(conninfo, '=') || strncmp(conninfo, "postgres", 8) == 0)) {
        PQconninfoOption *o = PQconninfoParse(conninfo, NULL);
        if (!o)
            return 1;
        PQconninfoFree(o);
    }
    return strncmp(msg, "invalid ", 8) == 0 ||
           strncmp(msg, "could not match ", 16) == 0 ||
           strncmp(msg, "missing \"=\"", 11) == 0 ||
           strncmp(msg, "unterminated quoted string", 26) == 0 ||
           strncmp(msg, "missing ", 8) == 0;
}

/* The caller's conninfo string or URI, if any: libpq may quote it. */
static const char *conninfo_of(const char *const *keywords,
                               const char *const *values, int expand_dbname)
{
    for (int i = 0; expand_dbname && keywords && keywords[i]; i++)
        if (strcmp(keywords[i], "dbname") == 0)
            return values[i];
    return NULL;
}

/* Takes the SQLSTATE of the server's refusal out of libpq's message for a
 * failed connection, into state ("" if there is none: a refused socket,
 * a timeout).  libpq has no PGresult to give it by, but with
 * PQERRORS_VERBOSE it writes it after the severity ("FATAL:  3D000:
 * database \"x\" does not exist"); taken out, the message reads as
 * usual.  The severity may be translated, the two spaces are not. */
static void take_sqlstate(char *msg, char state[6])
{
    state[0] = '\0';
    for (char *p = strstr(msg, ":  "); p; p = strstr(p + 1, ":  ")) {
        /* after a severity: a word with no lowercase letter or quote,
         * after a space or at a line's start (not in a quoted name) */
        char *w = p;
        while (w > msg && w[-1] != ' ' && w[-1] != '\n' && w[-1] != '"' &&
               !islower((unsigned char)w[-1]))
            w--;
        if (w == p || (w > msg && w[-1] != ' ' && w[-1] != '\n'))
            continue;
        char *code = p + 3;
        int n = 0;
        while (n < 5 && (isdigit((unsigned char)code[n]) ||
                         isupper((unsigned char)code[n])))
            n++;
        if (n != 5 || code[5] != ':' || code[6] != ' ')
            continue;
        memcpy(state, code, 5);
        state[5] = '\0';
        memmove(code, code + 7, strlen(code + 7) + 1);
        return; /* the first host's: the one the message shows */
    }
}

/* Ends conn and sets err to the first line of what went wrong, with what
 * libpq may quote of a malformed conninfo hidden, and the server's
 * SQLSTATE if it refused us. */
static PGconn *fail(PGconn *conn, pglock_error *err, int code,
                    const char *earlier, const char *msg, const char *conninfo)
{
    char all[1024], line[512], state[6];
    snprintf(all, sizeof all, "%s%s", earlier,
             *msg ? msg : "could not connect");
    take_sqlstate(all, state);
    pglock__conn_error_message(line, sizeof line, all, conninfo);
    /* A limit reached says which setting to raise, on the same line: the
     * message gives way to the advice if both do not fit. */
    const char *advice = pglock__limit_advice(line, state);
    if (!advice)
        advice = "";
    int room = (int)(sizeof err->message - 1 - strlen(advice));
    pglock__error_set(err, code, state, "%.*s%s", room, line, advice);
    PQfinish(conn);
    return NULL;
}

/* Polls conn's connect until it is done, fails, or a deadline passes:
 * 0 done or failed (PQstatus says which), 1 the host's deadline passed,
 * or PGLOCK_EINTR / PGLOCK_ETIMEDOUT (w's interrupt or deadline). */
static int poll_connect(PGconn *conn, const pglock__wait *w, long host_ms)
{
    PostgresPollingStatusType ps = PGRES_POLLING_WRITING;
    char seen[600] = "", now_at[600];
    int64_t host_deadline = -1;
    while (ps != PGRES_POLLING_OK && ps != PGRES_POLLING_FAILED &&
           PQstatus(conn) != CONNECTION_BAD) {
        int64_t now = pglock_now_ms();
        attempt_of(conn, now_at, sizeof now_at);
        if (strcmp(now_at, seen) != 0) {
            memcpy(seen, now_at, sizeof seen);
            host_deadline = host_ms < 0 ? -1 : now + host_ms;
        }
        if (w->deadline >= 0 && now >= w->deadline)
            return PGLOCK_ETIMEDOUT;
        if (host_deadline >= 0 && now >= host_deadline)
            return 1;
        int64_t until = host_deadline;
        if (w->deadline >= 0 && (until < 0 || w->deadline < until))
            until = w->deadline;
        int ms = until < 0 ? -1 : (int)(until - now);
        struct pollfd p[2] = {
            {PQsocket(conn), ps == PGRES_POLLING_READING ? POLLIN : POLLOUT, 0},
            {w->interrupt_fd, POLLIN, 0}};
        int n = poll(p, 2, ms);
        if (n < 0 && errno != EINTR)
            return 0; /* PQstatus() is not OK: a failure */
        if (n > 0 && p[1].revents)
            return PGLOCK_EINTR;
        if (n > 0)
            ps = PQconnectPoll(conn);
    }
    return 0;
}

PGconn *pglock__connect(const char *const *keywords, const char *const *values,
                        int expand_dbname, const pglock__wait *w,
                        pglock_error *err)
{
    PGconn *conn = PQconnectStartParams(keywords, values, expand_dbname);
    if (!conn) {
        pglock__error_set(err, PGLOCK_ENOMEM, NULL, "out of memory");
        return NULL;
    }
    const char *ci = conninfo_of(keywords, values, expand_dbname);
    if (PQstatus(conn) == CONNECTION_BAD &&
        is_options_error(PQerrorMessage(conn), ci))
        return fail(conn, err, PGLOCK_EINVAL, "", PQerrorMessage(conn), ci);
    long host_ms = host_timeout_ms(conn);
    char earlier[1024] = "";
    for (;;) {
        /* So that a refusal carries its SQLSTATE (take_sqlstate). */
        PQsetErrorVerbosity(conn, PQERRORS_VERBOSE);
        int rc = poll_connect(conn, w, host_ms);
        if (rc == PGLOCK_EINTR)
            return fail(conn, err, rc, "", "interrupted while connecting",
                        NULL);
        if (rc == PGLOCK_ETIMEDOUT)
            return fail(conn, err, rc, "", "could not connect in time", NULL);
        if (rc == 0)
            break;
        /* This address had its connect_timeout: say so as libpq would,
         * and go on with the next host, if any. */
        char line[400];
        const char *h = PQhost(conn), *p = PQport(conn);
        snprintf(line, sizeof line,
                 "connection to server at \"%s\", port %s failed: no "
                 "answer within %ld s (connect_timeout)\n",
                 h ? h : "", p ? p : "", host_ms / 1000);
        PGconn *next = start_after_current(conn);
        if (!next)
            return fail(conn, err, PGLOCK_ECONNECT, earlier, line, ci);
        size_t used = strlen(earlier);
        snprintf(earlier + used, sizeof earlier - used, "%s", line);
        PQfinish(conn);
        conn = next;
    }
    if (PQstatus(conn) != CONNECTION_OK)
        return fail(conn, err, PGLOCK_ECONNECT, earlier, PQerrorMessage(conn),
                    ci);
    PQsetErrorVerbosity(conn, PQERRORS_DEFAULT);
    /* The server's notices (pg_advisory_unlock's "you don't own a lock", a
     * cancelled wait for synchronous replication's warning) are not for
     * the caller's stderr: a library does not write there. */
    PQsetNoticeProcessor(conn, quiet_notices, NULL);
    return conn;
}

PGconn *pglock__connect_params(const char *const *keywords,
                               const char *const *values, int expand_dbname,
                               int64_t deadline, int interrupt_fd,
                               pglock_error *err)
{
    pglock__wait w = {.deadline = deadline,
                      .interrupt_fd = interrupt_fd,
                      .cancel_timeout_ms = -1};
    pglock_error mine = {0};
    pglock__error_begin(err);
    return pglock__connect(keywords, values, expand_dbname, &w,
                           err ? err : &mine);
}
