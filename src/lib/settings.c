/*
 * The lock connection's settings: libpq's keepalives and the server's
 * timeouts, all derived from the lease (or, without one, from
 * dead_peer_ms), and the SQL that applies them.
 */
#include <stdarg.h>
#include <stdio.h>
#include "internal.h"
#include "lease_rules.h"

/* How long a silent peer may take to be noticed, by both ends. */
static long dead_peer(const pglock_options *o)
{
    return o->lease_ms > 0 ? o->lease_ms : o->dead_peer_ms;
}

/*
 * With a lease T_s, a session that holds a lock may be ended by the
 * kernels' dead-peer detection only after T_s, never before: the
 * arithmetic and its reasons are lease_rules.h's (lease_tcp_*).
 *
 * idle_session_timeout (idle_in_transaction_session_timeout with the xact lifetime)
 * = T_s frees a silent holder's lock at T_s anyway; the kernels' bound is
 * for a session in a statement, a waiter above all: it ends too, at T_s
 * of silence, and client_connection_check_interval then ends its wait, so
 * a dead waiter is not granted a lock.  A waiter whose client closed its
 * socket is ended sooner, at the next check.
 *
 * Without a lease there is no T_s to keep: a dead peer is noticed within
 * about 2D/3 (D = dead_peer_ms), keepalives D/3 then 3 probes D/9 apart,
 * tcp_user_timeout 2D/3.
 */
void pglock__settings_derive(const pglock_options *o, pglock__derived *d)
{
    long D = dead_peer(o);
    long idle, interval, count, user_timeout;
    if (o->lease_ms > 0) {
        idle = lease_keepalive_idle_s(D);
        interval = lease_keepalive_interval_s(D);
        count = lease_keepalive_count(D);
        user_timeout = lease_tcp_user_timeout_ms(D);
    } else {
        idle = D / 3000 < 1 ? 1 : D / 3000;
        interval = D / 9000 < 1 ? 1 : D / 9000;
        count = 3;
        user_timeout = D * 2 / 3;
    }
    snprintf(d->ka_idle, sizeof d->ka_idle, "%ld", idle);
    snprintf(d->ka_interval, sizeof d->ka_interval, "%ld", interval);
    snprintf(d->ka_count, sizeof d->ka_count, "%ld", count);
    snprintf(d->user_timeout, sizeof d->user_timeout, "%ld", user_timeout);
    long check = D / 3 < 1000 ? 1000 : D / 3;
    snprintf(d->check_interval, sizeof d->check_interval, "%ld", check);
    snprintf(d->lease, sizeof d->lease, "%ld", o->lease_ms);
}

/* Appends to buf at *at; keeps *at at len once the text did not fit. */
static void append(char *buf, size_t len, size_t *at, const char *fmt, ...)
{
    if (*at >= len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf + *at, len - *at, fmt, ap);
    va_end(ap);
    *at = n < 0 || (size_t)n >= len - *at ? len : *at + (size_t)n;
}

/* The version rule: the version is the client's when it has one (a
 * setting the server lacks is left out, not tested in the statement: a
 * version test in SQL costs the server an operator lookup and a cast on
 * every statement, about a third of the open query's time on a new
 * backend); when it has none (0), the statement tests it. */
int pglock__setting_since(char *buf, size_t len, int version, int since,
                          const char *name, const char *value,
                          const char *local)
{
    int n;
    if (version > 0 && version < since)
        n = snprintf(buf, len, "NULL");
    else if (version > 0 || since == 0)
        n = snprintf(buf, len, "set_config('%s', '%s', %s)", name, value,
                     local);
    else
        n = snprintf(buf, len, "CASE WHEN current_setting("
                     "'server_version_num')::int >= %d THEN set_config('%s',"
                     " '%s', %s) END", since, name, value, local);
    if (n < 0 || (size_t)n >= len)
        return -1;
    return version > 0 && version < since;
}

/* Appends ", <the setting>" unless the server lacks it. */
static void set_since(char *buf, size_t len, size_t *at, int version,
                      int since, const char *name, const char *value,
                      const char *local)
{
    char expr[256];
    int rc = pglock__setting_since(expr, sizeof expr, version, since, name,
                                   value, local);
    if (rc < 0)
        *at = len; /* too long: the whole statement is */
    else if (rc == 0)
        append(buf, len, at, ", %s", expr);
}

int pglock__settings_sql(char *buf, size_t len, const pglock_options *o,
                         int local, int version)
{
    pglock__derived d;
    pglock__settings_derive(o, &d);
    const char *l = local ? "true" : "false";
    /* In a transaction the lease is idle_in_transaction_session_timeout;
     * in a session it is idle_session_timeout (and the other one is off). */
    size_t at = 0;
    append(buf, len, &at, "concat_ws(','");
    set_since(buf, len, &at, version, 0, "statement_timeout", "0", l);
    set_since(buf, len, &at, version, 0,
              "idle_in_transaction_session_timeout", local ? d.lease : "0", l);
    set_since(buf, len, &at, version, 0, "lock_timeout", "0", l);
    set_since(buf, len, &at, version, 0, "tcp_keepalives_idle", d.ka_idle, l);
    set_since(buf, len, &at, version, 0, "tcp_keepalives_interval",
              d.ka_interval, l);
    set_since(buf, len, &at, version, 0, "tcp_keepalives_count", d.ka_count,
              l);
    set_since(buf, len, &at, version, 120000, "tcp_user_timeout",
              d.user_timeout, l);
    set_since(buf, len, &at, version, 140000,
              "client_connection_check_interval", d.check_interval, l);
    /* A session's lease (with none, a DBA's own value stays) */
    if (!local && o->lease_ms > 0)
        set_since(buf, len, &at, version, 140000, "idle_session_timeout",
                  d.lease, "false");
    set_since(buf, len, &at, version, 170000, "transaction_timeout", "0", l);
    append(buf, len, &at, ")");
    return at >= len ? PGLOCK_EINVAL : 0;
}
