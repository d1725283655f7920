/*
 * The client: a dedicated lock connection.  Opening it verifies that it
 * reaches the server directly (no pooler) and a primary (no standby), and
 * applies the lock connection's settings; closing it frees every lock
 * before returning.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "internal.h"
#include "conninfo_rules.h"

/* server_version_num as people write it: 130023 is 13.23; before 10,
 * 90624 is 9.6.24. */
static void version_text(char *buf, size_t len, int num)
{
    if (num >= 100000)
        snprintf(buf, len, "%d.%d", num / 10000, num % 10000);
    else
        snprintf(buf, len, "%d.%d.%d", num / 10000, num / 100 % 100, num % 100);
}

/* ------------------------------------------------------------ options */

/* The bytes of the options a version has: a program built against an
 * older header passes a smaller struct. */
static size_t options_size(unsigned int version)
{
    switch (version) {
    case 1:
        return offsetof(pglock_options, connect_timeout_ms);
    case 2:
        return sizeof(pglock_options);
    default:
        return 0;
    }
}

int pglock_options_init(pglock_options *opts, unsigned int version)
{
    size_t size = options_size(version);
    if (!opts || size == 0)
        return PGLOCK_EINVAL;
    memset(opts, 0, size);
    opts->version = version;
    opts->interrupt_fd = -1;
    opts->cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS;
    opts->dead_peer_ms = PGLOCK__DEFAULT_DEAD_PEER_MS;
    /* As pglock run and lead: session locks on a direct connection, a
     * holding transaction through a pooler (never PGLOCK_EPOOLER for the
     * setup docs/deployment.md recommends). */
    opts->lifetime = PGLOCK_LIFETIME_AUTO;
    return PGLOCK_OK;
}

/* One round trip: who is on the other end, and — only when that is a
 * primary reached directly and the client holds session locks — the lock
 * connection's settings.  A plain SET through a pooler would leak to the
 * pool's other clients, so the settings are guarded by the pid comparison
 * inside the statement itself.  (With the xact lifetime they are applied
 * transaction-locally with the first lock; a direct connection in xact
 * lifetime only turns idle_session_timeout off here, so that a default the
 * DBA set does not end the session before its first lock: on a busy
 * machine even the gap before run's first lock passed 100 ms.) */
static int open_sql(char *buf, size_t len, const pglock_options *o, int version)
{
    char settings[2048];
    if (pglock__settings_sql(settings, sizeof settings, o, 0, version) != 0)
        return PGLOCK_EINVAL;
    /* The version is libpq's (the server's ParameterStatus): exact for a
     * direct connection, the only one that runs the settings; tested in
     * the statement only when unknown (pglock__setting_since()). */
    char idle_off[256];
    if (pglock__setting_since(idle_off, sizeof idle_off, version, 140000,
                              "idle_session_timeout", "0", "false") < 0)
        return PGLOCK_EINVAL;
    int n = snprintf(
        buf, len,
        "SELECT pg_backend_pid(), pg_is_in_recovery(), current_database(),"
        " current_setting('server_version_num'),"
        " CASE WHEN pg_backend_pid() = $1::int AND NOT pg_is_in_recovery()"
        "  AND $2::bool THEN %s END,"
        " CASE WHEN pg_backend_pid() = $1::int AND NOT $2::bool"
        "  THEN %s END",
        settings, idle_off);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

/* What the open query's answer means for c, now that c->backend_pid and
 * c->server_version hold it: the lifetime, through a pooler or not, and
 * whether the server can keep this client's locks and lease (standby:
 * it is in recovery; settings_applied: the session's settings were).
 * 0, or a PGLOCK_E* code with the message on c. */
static int judge_open_answer(pglock_client *c, int standby,
                             int settings_applied)
{
    int pooled = PQbackendPID(c->conn) != c->backend_pid;
    c->lifetime = c->opts.lifetime == PGLOCK_LIFETIME_XACT ||
                          (c->opts.lifetime == PGLOCK_LIFETIME_AUTO && pooled)
                      ? PGLOCK_LIFETIME_XACT
                      : PGLOCK_LIFETIME_SESSION;
    if (standby)
        return pglock__fail(
            c, PGLOCK_ESTANDBY,
            "the server is a standby (in recovery): advisory locks are not "
            "replicated, so a lock taken there excludes nobody");
    if (c->lifetime == PGLOCK_LIFETIME_XACT) {
        /* Through a pooler this backend was only lent for one query. */
        c->backend_pid = 0;
        return 0;
    }
    if (pooled)
        return pglock__fail(
            c, PGLOCK_EPOOLER,
            "session locks need a direct connection, but a connection pooler "
            "is in the path (libpq's backend pid %u differs from the "
            "server's pg_backend_pid() %d); hold the locks in a transaction "
            "(xact lifetime mode) through a pooler, or connect to the server "
            "directly",
            (unsigned)PQbackendPID(c->conn), c->backend_pid);
    if (!settings_applied)
        return pglock__fail(c, PGLOCK_ESERVER,
                            "could not apply the lock connection's settings");
    c->lock_timeout_ms = 0; /* the settings set it to 0 */
    /* Only a session lease needs 14: the xact lifetime returned above, and its
     * lease, idle_in_transaction_session_timeout, exists since 9.6. */
    if (c->opts.lease_ms > 0 && c->server_version < 140000) {
        char version[32];
        version_text(version, sizeof version, c->server_version);
        return pglock__fail(
            c, PGLOCK_EVERSION,
            "a lease on session locks needs PostgreSQL 14 or newer "
            "(idle_session_timeout); the server is %s: hold the locks in a "
            "transaction instead (--mode=xact, PGLOCK_LIFETIME_XACT: its lease "
            "is idle_in_transaction_session_timeout)",
            version);
    }
    return 0;
}

static int run_open_query(pglock_client *c)
{
    char sql[2560];
    if (open_sql(sql, sizeof sql, &c->opts, PQserverVersion(c->conn)) < 0)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid options");
    char pid[16];
    snprintf(pid, sizeof pid, "%d", PQbackendPID(c->conn));
    const char *params[2] = {pid, c->opts.lifetime == PGLOCK_LIFETIME_XACT
                                      ? "f"
                                      : "t"};
    /* As long as the connect may take: the connection's connect_timeout
     * (PGLOCK_CONNECT_TIMEOUT_S if unset; -1 for libpq's 0, forever).
     * Through a pooler whose pool is full, this query is the one that
     * waits for a server connection. */
    long timeout_ms = conn_timeout_ms(c->conn);
    if (!PQsendQueryParams(c->conn, sql, 2, NULL, params, NULL, NULL, 0))
        return pglock__fail(c, PGLOCK_ECONNECT,
                            "could not set up the lock connection: %s",
                            PQerrorMessage(c->conn));
    /* Interruptible, as the connect: a stop signal ends it at once. */
    pglock__wait w = {.deadline = timeout_ms < 0
                                      ? -1
                                      : pglock__deadline(timeout_ms, 0),
                      .interrupt_fd = c->opts.interrupt_fd,
                      .cancel_timeout_ms = -1};
    PGresult *all[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(c->conn, &w, all, &nres, &cancelled);
    PGresult *res = nres > 0 ? all[nres - 1] : NULL;
    pglock__clear_results(all, nres > 0 ? nres - 1 : 0);
    if (cancelled == PGLOCK_EINTR) {
        PQclear(res);
        return pglock__fail(c, PGLOCK_EINTR,
                            "interrupted while setting up the lock connection");
    }
    if (cancelled == PGLOCK_ETIMEDOUT) {
        PQclear(res);
        return pglock__fail(
            c, PGLOCK_ECONNECT,
            "connected, but the server did not answer within %ld s "
            "(connect_timeout): through a pooler, its pool may have no free "
            "server connection (raise its pool size: default_pool_size in "
            "PgBouncer)",
            timeout_ms / 1000);
    }
    if (end == PGLOCK__WAIT_DONE && nres == 0)
        end = PGLOCK__WAIT_CONNLOST;
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
    return judge_open_answer(c, standby, settings_applied);
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

/* connect_timeout_ms as libpq's connect_timeout: whole seconds rounded
 * up, at least 2 (libpq's least); "0" (forever) for PGLOCK_WAIT_FOREVER. */
static const char *connect_seconds(char *buf, size_t len, long ms)
{
    long s = ms == PGLOCK_WAIT_FOREVER ? 0 : (ms + 999) / 1000;
    snprintf(buf, len, "%ld", s != 0 && s < 2 ? 2 : s);
    return buf;
}

static int count_params(const char *const *keywords)
{
    int n = 0;
    while (keywords && keywords[n])
        n++;
    return n;
}

/* Copies opts (NULL: the defaults) into c->opts, the fields of its
 * version only, with the defaults of what it leaves 0, and checks them.
 * 0, or PGLOCK_EINVAL with the message on c. */
static int take_options(pglock_client *c, const pglock_options *opts)
{
    /* Only the fields of a version we know are read: an older program's
     * struct is smaller, and what it lacks keeps its default. */
    size_t size = opts ? options_size(opts->version) : 0;
    if (opts && size == 0)
        return pglock__fail(
            c, PGLOCK_EINVAL,
            "invalid options: version %u is not one this library knows (1 to"
            " %u); call pglock_options_init(&opts, PGLOCK_OPTIONS_VERSION) first",
            opts->version, (unsigned)PGLOCK_OPTIONS_VERSION);
    pglock_options_init(&c->opts, PGLOCK_OPTIONS_VERSION);
    if (opts) {
        memcpy(&c->opts, opts, size);
        c->opts.version = PGLOCK_OPTIONS_VERSION;
    }
    if (c->opts.cancel_timeout_ms == 0)
        c->opts.cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS;
    if (c->opts.dead_peer_ms == 0)
        c->opts.dead_peer_ms = PGLOCK__DEFAULT_DEAD_PEER_MS;
    if (c->opts.lease_ms < 0 || c->opts.cancel_timeout_ms < 0 ||
        c->opts.dead_peer_ms < 0 || c->opts.lease_ms > 2147483647L ||
        c->opts.connect_timeout_ms < PGLOCK_WAIT_FOREVER)
        return pglock__fail(c, PGLOCK_EINVAL,
                            "invalid options: negative or too large duration");
    if (c->opts.lifetime != PGLOCK_LIFETIME_SESSION &&
        c->opts.lifetime != PGLOCK_LIFETIME_XACT &&
        c->opts.lifetime != PGLOCK_LIFETIME_AUTO)
        return pglock__fail(c, PGLOCK_EINVAL, "invalid lifetime %d",
                            (int)c->opts.lifetime);
    return 0;
}

int pglock_client_open_params(pglock_client **out, const char *const *keywords,
                              const char *const *values,
                              const pglock_options *opts)
{
    pglock_client *c = calloc(1, sizeof *c);
    *out = c;
    if (!c)
        return PGLOCK_ENOMEM;
    c->owner_pid = (int)getpid();
    int rc = take_options(c, opts);
    if (rc != 0)
        return rc;

    /* Our defaults come first: with expand_dbname, the caller's conninfo
     * (and keywords) that follow override whatever they set themselves. */
    pglock__derived d;
    pglock__settings_derive(&c->opts, &d);
    const char *app = c->opts.application_name ? c->opts.application_name
                                               : "pglock";
    char connect_s[24];
    const char *ours_k[] = {"fallback_application_name",
                            "keepalives",
                            "keepalives_idle",
                            "keepalives_interval",
                            "keepalives_count",
                            "tcp_user_timeout",
                            "connect_timeout"};
    const char *ours_v[] = {app,
                            "1",
                            d.ka_idle,
                            d.ka_interval,
                            d.ka_count,
                            d.user_timeout,
                            connect_seconds(connect_s, sizeof connect_s,
                                            c->opts.connect_timeout_ms)};
    /* without a bound of the caller's, connect_timeout is left out: libpq
     * reads PGCONNECT_TIMEOUT then */
    int nours = (int)(sizeof ours_k / sizeof ours_k[0]) -
                (c->opts.connect_timeout_ms == 0);
    int ntheirs = count_params(keywords);
    const char **k = calloc((size_t)nours + (size_t)ntheirs + 1, sizeof *k);
    const char **v = calloc((size_t)nours + (size_t)ntheirs + 1, sizeof *v);
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
    pglock__wait w = {.deadline = -1,
                      .interrupt_fd = c->opts.interrupt_fd,
                      .cancel_timeout_ms = -1};
    pglock_error err = {0};
    c->conn = kept == 0 ? pglock__connect(k, v, 1, &w, &err) : NULL;
    free(k);
    free(v);
    if (kept != 0)
        return pglock__fail(c, PGLOCK_ENOMEM, "out of memory");
    if (!c->conn) {
        /* EINVAL: libpq refused the options; EINTR: interrupted */
        if (err.code == PGLOCK_ECONNECT || err.code == PGLOCK_ETIMEDOUT)
            err.code = PGLOCK_ECONNECT;
        return pglock__fail_error(c, &err);
    }

    rc = run_open_query(c);
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

/* A forked child's copy of the client: the socket is the parent's too,
 * so nothing may be sent on it (libpq's Terminate would end the parent's
 * session, and so would shutdown()).  /dev/null takes the socket's place
 * in this process only, so that PQfinish() writes its goodbye there and
 * closes no more than the child's copy. */
static void forget_parents(pglock_client *c)
{
    int sock = PQsocket(c->conn);
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    if (sock >= 0 && (null < 0 || dup2(null, sock) < 0)) {
        /* Nothing safe to finish with: leave the connection to the
         * parent, at the cost of its memory in this process. */
        if (null >= 0)
            close(null);
        c->conn = NULL;
        return;
    }
    if (null >= 0)
        close(null);
    PQfinish(c->conn);
    c->conn = NULL;
}

/* Frees the locks now (close's documented promise), within one budget. */
static void release_all(pglock_client *c)
{
    /* One budget for the whole close, so that a caller stopping on a
     * signal knows how long it may take on a dead network. */
    int64_t deadline = pglock__deadline(PGLOCK__CLOSE_TIMEOUT_MS, 0);
    pglock__wait_end end = PGLOCK__WAIT_DONE;
    if (c->heartbeat_busy) {
        /* Let the heartbeat's answer arrive before the next query. */
        pglock__wait w = {.deadline = deadline,
                          .interrupt_fd = -1,
                          .cancel_timeout_ms = -1};
        PGresult *res[PGLOCK__MAX_RESULTS];
        int nres = 0, cancelled = 0;
        end = pglock__await(c->conn, &w, res, &nres, &cancelled);
        pglock__clear_results(res, nres);
        c->heartbeat_busy = 0;
    }
    long left = (long)(deadline - pglock_now_ms());
    if (end != PGLOCK__WAIT_DONE || left <= 0)
        return;
    if (c->lifetime == PGLOCK_LIFETIME_XACT) {
        /* Never unlock_all through a pooler: that would free a
         * stranger's session locks.  Ending the transaction frees
         * ours, now. */
        pglock_error err = {0};
        if (pglock__holding_xact_end(c, left, &err) != 0)
            pglock__client_failed(c, &err);
    } else if (!c->released || c->nlocks != 0) {
        /* A bare PQfinish frees the locks a moment later, when the
         * backend notices; waiting for this answer frees them now.
         * (Not needed when pglock_hold_release() just did so.) */
        PGresult *res = pglock__exec_bounded(c->conn,
                                             "SELECT pg_advisory_unlock_all()",
                                             0, NULL, left, &end);
        PQclear(res);
    }
}

void pglock_client_close(pglock_client *c)
{
    if (!c)
        return;
    if (c->owner_pid != (int)getpid()) {
        /* The hold, if any, is the parent's: its thread is not here. */
        if (c->conn)
            forget_parents(c);
        pglock__client_free(c);
        return;
    }
    struct pglock_hold *hold = c->hold_running ? c->hold : NULL;
    if (hold)
        pglock__hold_client_closing(hold); /* its thread stops first */
    if (c->conn && PQstatus(c->conn) == CONNECTION_OK)
        release_all(c);
    pglock__client_drop(c);
    if (hold)
        c->closed = 1; /* pglock_hold_stop() frees it */
    else
        pglock__client_free(c);
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

pglock_lifetime pglock_client_lifetime(const pglock_client *c)
{
    return c ? c->lifetime : PGLOCK_LIFETIME_SESSION;
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
