/*
 * The client: a dedicated lock connection.  Opening it verifies that it
 * reaches the server directly (no pooler) and a primary (no standby), and
 * applies the lock connection's settings; closing it frees every lock
 * before returning.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include "internal.h"

/* ------------------------------------------------------------- errors */

static void version_text(char *buf, size_t len, int num)
{
    /* server_version_num: 130023 is 13.23; before 10, 90624 is 9.6.24. */
    if (num >= 100000)
        snprintf(buf, len, "%d.%d", num / 10000, num % 10000);
    else
        snprintf(buf, len, "%d.%d.%d", num / 10000, num / 100 % 100, num % 100);
}

void pglock__first_line(char *buf, size_t len, const char *msg)
{
    if (!msg)
        msg = "";
    /* libpq prefixes some messages with "ERROR:  " or "FATAL:  "; the
     * primary message is what we keep. */
    size_t n = strcspn(msg, "\n");
    if (n >= len)
        n = len - 1;
    memcpy(buf, msg, n);
    buf[n] = '\0';
}

int pglock__fail(pglock_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->message, sizeof c->message, fmt, ap);
    va_end(ap);
    c->sqlstate[0] = '\0';
    return code;
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

static const char *result_sqlstate(const PGresult *res)
{
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

static void result_message(char *buf, size_t len, const PGresult *res,
                           PGconn *conn)
{
    const char *primary =
        res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (primary && *primary)
        pglock__first_line(buf, len, primary);
    else if (res && *PQresultErrorMessage(res))
        pglock__first_line(buf, len, PQresultErrorMessage(res));
    else
        pglock__first_line(buf, len, conn ? PQerrorMessage(conn) : "");
    if (!*buf)
        snprintf(buf, len, "connection to the server was lost");
}

int pglock__fail_result(pglock_client *c, const PGresult *res,
                        const char *what)
{
    char msg[400];
    result_message(msg, sizeof msg, res, c->conn);
    const char *state = result_sqlstate(res);
    snprintf(c->message, sizeof c->message, "%s: %s%s%s%s", what, msg,
             *state ? " (SQLSTATE " : "", state, *state ? ")" : "");
    snprintf(c->sqlstate, sizeof c->sqlstate, "%s", state);
    int code = pglock__code_for_sqlstate(state);
    if (!*state || (c->conn && PQstatus(c->conn) != CONNECTION_OK))
        code = PGLOCK_ECONNLOST;
    return code;
}

int pglock__err_set(pglock_error *err, int code, const char *sqlstate,
                    const char *fmt, ...)
{
    if (!err)
        return code;
    err->code = code;
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s",
             sqlstate ? sqlstate : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    return code;
}

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
    pglock__holds_clear(c);
    c->heartbeat_busy = 0;
    c->in_xact = 0;
}

int pglock__client_ready(pglock_client *c)
{
    if (!c->conn)
        return pglock__fail(c, PGLOCK_ECONNLOST,
                            "the lock connection is closed: it was lost "
                            "earlier, with every lock it held");
    if (c->heartbeat_busy)
        return pglock__fail(c, PGLOCK_ESTATE,
                            "a heartbeat is in progress on this client");
    return 0;
}

void pglock__holds_clear(pglock_client *c)
{
    for (size_t i = 0; i < c->nholds; i++)
        free(c->holds[i].name);
    c->nholds = 0;
}

/* ------------------------------------------------------------ options */

void pglock_options_init(pglock_options *opts)
{
    memset(opts, 0, sizeof *opts);
    opts->interrupt_fd = -1;
    opts->cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS;
    opts->dead_peer_ms = PGLOCK__DEFAULT_DEAD_PEER_MS;
}

/* How long a silent peer may take to be noticed, by both ends. */
static long dead_peer(const pglock_options *o)
{
    return o->lease_ms > 0 ? o->lease_ms : o->dead_peer_ms;
}

/* Keepalives: idle D/3, then 3 probes D/9 apart, so a dead peer is noticed
 * within about 2D/3; unacknowledged data gives up after 2D/3 too. */
typedef struct derived {
    char ka_idle[24], ka_interval[24], ka_count[24], user_timeout[24];
    char check_interval[24], lease[24];
} derived;

static void derive(const pglock_options *o, derived *d)
{
    long D = dead_peer(o);
    long idle = D / 3000, interval = D / 9000;
    snprintf(d->ka_idle, sizeof d->ka_idle, "%ld", idle < 1 ? 1 : idle);
    snprintf(d->ka_interval, sizeof d->ka_interval, "%ld",
             interval < 1 ? 1 : interval);
    snprintf(d->ka_count, sizeof d->ka_count, "3");
    snprintf(d->user_timeout, sizeof d->user_timeout, "%ld", D * 2 / 3);
    long check = D / 3 < 1000 ? 1000 : D / 3;
    snprintf(d->check_interval, sizeof d->check_interval, "%ld", check);
    snprintf(d->lease, sizeof d->lease, "%ld", o->lease_ms);
}

/* --------------------------------------------------------------- open */

int pglock__settings_sql(char *buf, size_t len, const pglock_options *o,
                         int local)
{
    derived d;
    derive(o, &d);
    const char *l = local ? "true" : "false";
    const char *ver = "current_setting('server_version_num')::int";
    /* In a transaction the lease is idle_in_transaction_session_timeout;
     * in a session it is idle_session_timeout (and the other one is off). */
    const char *in_xact_idle = local ? d.lease : "0";
    int n = snprintf(buf, len,
        "concat_ws(',',"
        " set_config('statement_timeout', '0', %s),"
        " set_config('idle_in_transaction_session_timeout', '%s', %s),"
        " set_config('lock_timeout', '0', %s),"
        " set_config('tcp_keepalives_idle', '%s', %s),"
        " set_config('tcp_keepalives_interval', '%s', %s),"
        " set_config('tcp_keepalives_count', '%s', %s),"
        " CASE WHEN %s >= 120000"
        "  THEN set_config('tcp_user_timeout', '%s', %s) END,"
        " CASE WHEN %s >= 140000"
        "  THEN set_config('client_connection_check_interval', '%s', %s) END,"
        " CASE WHEN %s >= 140000 AND %s AND '%s' <> '0'"
        "  THEN set_config('idle_session_timeout', '%s', false) END,"
        " CASE WHEN %s >= 170000"
        "  THEN set_config('transaction_timeout', '0', %s) END)",
        l, in_xact_idle, l, l, d.ka_idle, l, d.ka_interval, l, d.ka_count, l,
        ver, d.user_timeout, l, ver, d.check_interval, l,
        ver, local ? "false" : "true", d.lease, d.lease, ver, l);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

/* One round trip: who is on the other end, and — only when that is a
 * primary reached directly and the client holds session locks — the lock
 * connection's settings.  A plain SET through a pooler would leak to the
 * pool's other clients, so the settings are guarded by the pid comparison
 * inside the statement itself.  (In xact hold they are applied
 * transaction-locally with the first lock.) */
static int open_sql(char *buf, size_t len, const pglock_options *o)
{
    char settings[2048];
    if (pglock__settings_sql(settings, sizeof settings, o, 0) != 0)
        return PGLOCK_EINVAL;
    int n = snprintf(buf, len,
        "SELECT pg_backend_pid(), pg_is_in_recovery(), current_database(),"
        " current_setting('server_version_num')::int,"
        " CASE WHEN pg_backend_pid() = $1::int AND NOT pg_is_in_recovery()"
        "  AND $2::bool THEN %s END", settings);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

static void quiet_notices(void *arg, const char *message)
{
    (void)arg;
    (void)message; /* e.g. pg_advisory_unlock's "you don't own a lock" */
}

static int run_open_query(pglock_client *c)
{
    char sql[2560];
    if (open_sql(sql, sizeof sql, &c->opts) != 0)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid options");
    char pid[16];
    snprintf(pid, sizeof pid, "%d", PQbackendPID(c->conn));
    const char *params[2] = {pid,
                             c->opts.hold == PGLOCK_HOLD_XACT ? "f" : "t"};
    pglock__wait_end end;
    PGresult *res = pglock__exec_bounded(c->conn, sql, 2, params,
                                         PGLOCK__CLOSE_TIMEOUT_MS, &end);
    if (end != PGLOCK__WAIT_DONE || PQresultStatus(res) != PGRES_TUPLES_OK ||
        PQntuples(res) != 1) {
        int code = pglock__fail_result(c, res,
                                       "could not set up the lock connection");
        if (code == PGLOCK_ECONNLOST)
            code = PGLOCK_ECONNECT;
        PQclear(res);
        return code;
    }
    c->backend_pid = atoi(PQgetvalue(res, 0, 0));
    int standby = PQgetvalue(res, 0, 1)[0] == 't';
    c->database = strdup(PQgetvalue(res, 0, 2));
    c->server_version = atoi(PQgetvalue(res, 0, 3));
    int settings_applied = !PQgetisnull(res, 0, 4);
    PQclear(res);
    if (!c->database)
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");

    int pooled = PQbackendPID(c->conn) != c->backend_pid;
    c->hold = c->opts.hold == PGLOCK_HOLD_XACT ||
                      (c->opts.hold == PGLOCK_HOLD_AUTO && pooled)
                  ? PGLOCK_HOLD_XACT
                  : PGLOCK_HOLD_SESSION;
    if (standby)
        return pglock__fail(c, PGLOCK_ESTANDBY,
            "the server is a standby (in recovery): advisory locks are not "
            "replicated, so a lock taken there excludes nobody");
    if (c->hold == PGLOCK_HOLD_XACT) {
        /* Through a pooler this backend was only lent for one query. */
        c->backend_pid = 0;
        return 0;
    }
    if (pooled)
        return pglock__fail(c, PGLOCK_EPOOLER,
            "session locks need a direct connection, but a connection pooler "
            "is in the path (libpq's backend pid %d differs from the "
            "server's pg_backend_pid() %d); hold the locks in a transaction "
            "(xact hold mode) through a pooler, or connect to the server "
            "directly",
            PQbackendPID(c->conn), c->backend_pid);
    if (!settings_applied)
        return pglock__fail(c, PGLOCK_ESERVER,
                            "could not apply the lock connection's settings");
    c->lock_timeout_ms = 0; /* the settings set it to 0 */
    /* Only a session lease needs 14: the xact hold returned above, and its
     * lease, idle_in_transaction_session_timeout, exists since 9.6. */
    if (c->opts.lease_ms > 0 && c->server_version < 140000) {
        char version[32];
        version_text(version, sizeof version, c->server_version);
        return pglock__fail(c, PGLOCK_EVERSION,
            "a lease on session locks needs PostgreSQL 14 or newer "
            "(idle_session_timeout); the server is %s: hold the locks in a "
            "transaction instead (--mode=xact, PGLOCK_HOLD_XACT: its lease "
            "is idle_in_transaction_session_timeout)",
            version);
    }
    return 0;
}

/* Copies the NULL-terminated keyword/value arrays into the client (a NULL
 * value stays NULL: libpq ignores it), for later connections. */
static int keep_params(pglock_client *c, const char **k, const char **v)
{
    int n = 0;
    while (k[n])
        n++;
    c->conn_keywords = calloc((size_t)n + 1, sizeof *c->conn_keywords);
    c->conn_values = calloc((size_t)n + 1, sizeof *c->conn_values);
    if (!c->conn_keywords || !c->conn_values)
        return PGLOCK_ENOMEM;
    for (int i = 0; i < n; i++) {
        c->conn_keywords[i] = strdup(k[i]);
        c->conn_values[i] = v[i] ? strdup(v[i]) : NULL;
        if (!c->conn_keywords[i] || (v[i] && !c->conn_values[i]))
            return PGLOCK_ENOMEM;
    }
    return 0;
}

static void free_params(char **p)
{
    for (size_t i = 0; p && p[i]; i++)
        free(p[i]);
    free(p);
}

static int count_params(const char *const *keywords)
{
    int n = 0;
    while (keywords && keywords[n])
        n++;
    return n;
}

int pglock_client_open_params(pglock_client **out, const char *const *keywords,
                              const char *const *values,
                              const pglock_options *opts)
{
    pglock_client *c = calloc(1, sizeof *c);
    *out = c;
    if (!c)
        return PGLOCK_ENOMEM;
    if (opts)
        c->opts = *opts;
    else
        pglock_options_init(&c->opts);
    if (c->opts.cancel_timeout_ms == 0)
        c->opts.cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS;
    if (c->opts.dead_peer_ms == 0)
        c->opts.dead_peer_ms = PGLOCK__DEFAULT_DEAD_PEER_MS;
    if (c->opts.lease_ms < 0 || c->opts.cancel_timeout_ms < 0 ||
        c->opts.dead_peer_ms < 0 || c->opts.lease_ms > 2147483647L)
        return pglock__fail(c, PGLOCK_EINVAL,
                            "invalid options: negative or too large duration");
    if (c->opts.hold != PGLOCK_HOLD_SESSION &&
        c->opts.hold != PGLOCK_HOLD_XACT && c->opts.hold != PGLOCK_HOLD_AUTO)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid hold mode %d",
                            (int)c->opts.hold);

    /* Our defaults come first: with expand_dbname, the caller's conninfo
     * (and keywords) that follow override whatever they set themselves. */
    derived d;
    derive(&c->opts, &d);
    const char *app = c->opts.application_name ? c->opts.application_name
                                               : "pglock";
    const char *ours_k[] = {"fallback_application_name", "keepalives",
                            "keepalives_idle", "keepalives_interval",
                            "keepalives_count", "tcp_user_timeout"};
    const char *ours_v[] = {app, "1", d.ka_idle, d.ka_interval, d.ka_count,
                            d.user_timeout};
    int nours = (int)(sizeof ours_k / sizeof ours_k[0]);
    int ntheirs = count_params(keywords);
    const char **k = calloc((size_t)(nours + ntheirs + 1), sizeof *k);
    const char **v = calloc((size_t)(nours + ntheirs + 1), sizeof *v);
    if (!k || !v) {
        free(k);
        free(v);
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    }
    for (int i = 0; i < nours; i++) {
        k[i] = ours_k[i];
        v[i] = ours_v[i];
    }
    for (int i = 0; i < ntheirs; i++) {
        k[nours + i] = keywords[i];
        v[nours + i] = values[i];
    }
    int kept = keep_params(c, k, v);
    c->conn = kept == 0 ? PQconnectdbParams(k, v, 1) : NULL;
    free(k);
    free(v);
    if (!c->conn)
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    if (PQstatus(c->conn) != CONNECTION_OK) {
        char line[400];
        /* libpq's own message: it never contains the password. */
        pglock__first_line(line, sizeof line, PQerrorMessage(c->conn));
        pglock__fail(c, PGLOCK_ECONNECT, "%s", line);
        PQfinish(c->conn);
        c->conn = NULL;
        return PGLOCK_ECONNECT;
    }
    PQsetNoticeProcessor(c->conn, quiet_notices, NULL);

    int rc = run_open_query(c);
    if (rc != 0) {
        /* Not ours to use: never send pg_advisory_unlock_all() through a
         * pooler (it would free a stranger's locks). */
        PQfinish(c->conn);
        c->conn = NULL;
        return rc;
    }
    c->confirmed_at = pglock_now_ms();
    c->message[0] = '\0';
    return 0;
}

int pglock_client_open(pglock_client **out, const char *conninfo,
                       const pglock_options *opts)
{
    const char *k[2] = {NULL, NULL}, *v[2] = {NULL, NULL};
    if (conninfo && *conninfo) {
        k[0] = "dbname";
        v[0] = conninfo;
    }
    return pglock_client_open_params(out, k, v, opts);
}

/* -------------------------------------------------------------- close */

void pglock_client_close(pglock_client *c)
{
    if (!c)
        return;
    if (c->conn && PQstatus(c->conn) == CONNECTION_OK) {
        pglock__wait_end end = PGLOCK__WAIT_DONE;
        if (c->heartbeat_busy) {
            /* Let the heartbeat's answer arrive before the next query. */
            pglock__wait w = {.deadline = pglock__deadline(
                                  PGLOCK__CLOSE_TIMEOUT_MS, 0),
                              .interrupt = NULL, .interrupt_fd = -1,
                              .cancel_timeout_ms = -1};
            PGresult *res[PGLOCK__MAX_RESULTS];
            int nres = 0, cancelled = 0;
            end = pglock__await(c->conn, &w, res, &nres, &cancelled);
            pglock__clear_results(res, nres);
            c->heartbeat_busy = 0;
        }
        if (end == PGLOCK__WAIT_DONE && c->hold == PGLOCK_HOLD_XACT) {
            /* Never unlock_all through a pooler: that would free a
             * stranger's session locks.  Ending the transaction frees
             * ours, now. */
            pglock__xact_hold_end(c, PGLOCK__CLOSE_TIMEOUT_MS);
        } else if (end == PGLOCK__WAIT_DONE) {
            /* A bare PQfinish frees the locks a moment later, when the
             * backend notices; waiting for this answer frees them now. */
            PGresult *res = pglock__exec_bounded(
                c->conn, "SELECT pg_advisory_unlock_all()", 0, NULL,
                PGLOCK__CLOSE_TIMEOUT_MS, &end);
            PQclear(res);
        }
    }
    pglock__client_drop(c);
    free(c->holds);
    free(c->database);
    free_params(c->conn_keywords);
    free_params(c->conn_values);
    free(c);
}

/* ---------------------------------------------------------- accessors */

const char *pglock_client_error(const pglock_client *c)
{
    return c ? c->message : "";
}

const char *pglock_client_sqlstate(const pglock_client *c)
{
    return c ? c->sqlstate : "";
}

pglock_hold_mode pglock_client_hold_mode(const pglock_client *c)
{
    return c ? c->hold : PGLOCK_HOLD_SESSION;
}

int pglock_client_backend_pid(const pglock_client *c)
{
    return c ? c->backend_pid : 0;
}

const char *pglock_client_database(const pglock_client *c)
{
    return c && c->database ? c->database : "";
}

int pglock_client_server_version(const pglock_client *c)
{
    return c ? c->server_version : 0;
}

int pglock_client_socket(const pglock_client *c)
{
    return c && c->conn ? PQsocket(c->conn) : -1;
}

PGconn *pglock_client_conn(const pglock_client *c)
{
    return c ? c->conn : NULL;
}

int64_t pglock_client_confirmed_at(const pglock_client *c)
{
    return c ? c->confirmed_at : 0;
}
