/*
 * The lock connection's settings: libpq's keepalives and the server's
 * timeouts, all derived from the lease (or, without one, from
 * dead_peer_ms), and the SQL that applies them.
 */
#include <stdarg.h>
#include <stdio.h>
#include "internal.h"
#include "lease_rules.h"

/*
 * A session that holds a lock may be ended by the kernels' dead-peer
 * detection only after T_s, never before: the arithmetic and its reasons
 * are lease_rules.h's (lease_tcp_*).  T_s is the lease, or without one
 * dead_peer_ms (lease_of()): the managed hold counts its client deadline
 * and the caller's stop budget from that T_s, so no kernel may end the
 * session sooner there either.
 *
 * idle_session_timeout (idle_in_transaction_session_timeout with the xact
 * lifetime) = T_s frees a silent holder's lock at T_s anyway; the
 * kernels' bound is for a session in a statement, a waiter above all: it
 * ends too, at T_s of silence, and client_connection_check_interval then
 * ends its wait, so a dead waiter is not granted a lock.  A waiter whose
 * client closed its socket is ended sooner, at the next check.
 *
 * Without a lease, a session keeps the server's idle_session_timeout (a
 * dead peer's session is ended by the kernels, after T_s); but a holding
 * transaction gets idle_in_transaction_session_timeout = T_s all the
 * same: behind a pooler the server's socket is the pooler's, which stays
 * alive when the client is gone, so only that timeout frees a dead
 * client's lock in a bounded time.
 */
void pglock__settings_derive(const pglock_options *o, pglock__derived *d)
{
    long ts = lease_of(o->lease_ms, o->dead_peer_ms);
    snprintf(d->ka_idle, sizeof d->ka_idle, "%ld", lease_keepalive_idle_s(ts));
    snprintf(d->ka_interval, sizeof d->ka_interval, "%ld",
             lease_keepalive_interval_s(ts));
    snprintf(d->ka_count, sizeof d->ka_count, "%ld", lease_keepalive_count(ts));
    snprintf(d->user_timeout, sizeof d->user_timeout, "%ld",
             lease_tcp_user_timeout_ms(ts));
    snprintf(d->check_interval, sizeof d->check_interval, "%ld",
             lease_check_interval_ms(ts));
    snprintf(d->lease, sizeof d->lease, "%ld", ts);
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
        n = snprintf(buf, len,
                     "CASE WHEN current_setting("
                     "'server_version_num')::int >= %d THEN set_config('%s',"
                     " '%s', %s) END",
                     since, name, value, local);
    if (n < 0 || (size_t)n >= len)
        return -1;
    return version > 0 && version < since;
}

/* Appends ", <the setting>" unless the server lacks it. */
static void set_since(char *buf, size_t len, size_t *at, int version, int since,
                      const char *name, const char *value, const char *local)
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
    set_since(buf, len, &at, version, 0, "idle_in_transaction_session_timeout",
              local ? d.lease : "0", l);
    set_since(buf, len, &at, version, 0, "lock_timeout", "0", l);
    set_since(buf, len, &at, version, 0, "tcp_keepalives_idle", d.ka_idle, l);
    set_since(buf, len, &at, version, 0, "tcp_keepalives_interval",
              d.ka_interval, l);
    set_since(buf, len, &at, version, 0, "tcp_keepalives_count", d.ka_count, l);
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
