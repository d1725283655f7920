/*
 * The lock connection's settings: libpq's keepalives and the server's
 * timeouts, all derived from the lease (or, without one, from
 * dead_peer_ms), and the SQL that applies them.
 */
#include <stdio.h>
#include "internal.h"

/* How long a silent peer may take to be noticed, by both ends. */
static long dead_peer(const pglock_options *o)
{
    return o->lease_ms > 0 ? o->lease_ms : o->dead_peer_ms;
}

void pglock__settings_derive(const pglock_options *o, pglock__derived *d)
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
