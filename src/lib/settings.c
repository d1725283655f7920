/*
 * The lock connection's settings: libpq's keepalives and the server's
 * timeouts, all derived from the lease (or, without one, from
 * dead_peer_ms), and the SQL that applies them.
 */
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
 * idle_session_timeout (idle_in_transaction_session_timeout in xact hold)
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

int pglock__settings_sql(char *buf, size_t len, const pglock_options *o,
                         int local)
{
    pglock__derived d;
    pglock__settings_derive(o, &d);
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
