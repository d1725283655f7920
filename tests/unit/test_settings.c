/* The lock connection's dead-peer settings (settings.c) against the lease
 * arithmetic (run_lease.c): with a lease, no kernel may end a holder's
 * session before T_s, and the client's kill-after ends before that. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "internal.h"
#include "run.h"

static pglock__derived derive(long lease_ms, long dead_peer_ms)
{
    pglock_options o;
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    o.lease_ms = lease_ms;
    if (dead_peer_ms > 0)
        o.dead_peer_ms = dead_peer_ms;
    pglock__derived d;
    pglock__settings_derive(&o, &d);
    return d;
}

/* Linux ends a connection when its keepalive probes go unanswered for
 * tcp_user_timeout, else after idle + count * interval (seconds). */
static void no_kernel_ends_a_holder_before_the_lease(void **state)
{
    (void)state;
    for (long ms = RUN_LEASE_MIN_MS; ms <= 120000; ms += 7) {
        pglock__derived d = derive(ms, 0);
        long idle = atol(d.ka_idle), interval = atol(d.ka_interval);
        long count = atol(d.ka_count);
        assert_int_equal(atol(d.user_timeout), ms);
        assert_true(idle >= 1 && interval >= 1 && count >= 1);
        assert_true(count <= 127); /* Linux's TCP_KEEPCNT limit */
        assert_true((idle + count * interval) * 1000 >= ms);
        /* and not much later: within one probe interval (rounding up to
         * whole seconds adds at most 2 s) */
        assert_true((idle + count * interval) * 1000 <=
                    ms + interval * 1000 + 2000);
        assert_int_equal(atol(d.lease), ms);
    }
}

static void the_kill_after_ends_before_the_servers_kernel_may_end_it(
    void **state)
{
    (void)state;
    char err[256];
    for (long ms = RUN_LEASE_MIN_MS; ms <= 3600000; ms += ms / 50) {
        run_lease l;
        assert_int_equal(run_lease_derive(&l, ms, -1, err, sizeof err), 0);
        pglock__derived d = derive(ms, 0);
        assert_true(l.client_ms + l.kill_after_ms + l.margin_ms <=
                    atol(d.user_timeout));
    }
}

static void the_6s_lease_of_the_partition_tests(void **state)
{
    (void)state;
    pglock__derived d = derive(6000, 0);
    assert_string_equal(d.user_timeout, "6000");
    assert_string_equal(d.ka_idle, "2");
    assert_string_equal(d.ka_interval, "1");
    assert_string_equal(d.ka_count, "4");
    assert_string_equal(d.check_interval, "2000");
}

/* Without a lease, dead_peer_ms is T_s, by the same rule: no kernel ends
 * a holder's session before it (the managed hold's stop budget counts on
 * that), and a holding transaction's idle bound is T_s, behind a pooler
 * the only thing that frees a dead client's lock. */
static void without_a_lease_dead_peer_ms_is_the_lease_by_the_same_rule(
    void **state)
{
    (void)state;
    for (long ms = 1000; ms <= 120000; ms += 7) {
        pglock__derived with = derive(ms, 0), without = derive(0, ms);
        assert_string_equal(with.user_timeout, without.user_timeout);
        assert_string_equal(with.ka_idle, without.ka_idle);
        assert_string_equal(with.ka_interval, without.ka_interval);
        assert_string_equal(with.ka_count, without.ka_count);
        assert_string_equal(with.check_interval, without.check_interval);
    }
    pglock__derived d = derive(0, 9000);
    assert_string_equal(d.user_timeout, "9000");
    assert_string_equal(d.lease, "9000");
    char sql[2048];
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.dead_peer_ms = 9000;
    assert_int_equal(pglock__settings_sql(sql, sizeof sql, &o, 1, 170000), 0);
    assert_non_null(strstr(sql, "set_config('idle_in_transaction_session_"
                                "timeout', '9000', true)"));
    /* a session keeps the server's idle_session_timeout */
    assert_int_equal(pglock__settings_sql(sql, sizeof sql, &o, 0, 170000), 0);
    assert_null(strstr(sql, "idle_session_timeout"));
}

/* One version rule for every setting that a server may lack (the open
 * query's idle_session_timeout and the lease settings alike): emitted
 * when the version is known and new enough, left out when known and
 * older, tested in SQL when unknown. */
static void a_setting_follows_the_one_version_rule(void **state)
{
    (void)state;
    char b[256];
    assert_int_equal(pglock__setting_since(b, sizeof b, 150000, 140000,
                                           "idle_session_timeout", "0",
                                           "false"),
                     0);
    assert_string_equal(b, "set_config('idle_session_timeout', '0', false)");
    assert_int_equal(pglock__setting_since(b, sizeof b, 130000, 140000,
                                           "idle_session_timeout", "0",
                                           "false"),
                     1);
    assert_string_equal(b, "NULL");
    assert_int_equal(pglock__setting_since(b, sizeof b, 0, 140000,
                                           "idle_session_timeout", "0",
                                           "false"),
                     0);
    assert_string_equal(b, "CASE WHEN current_setting('server_version_num')"
                           "::int >= 140000 THEN set_config("
                           "'idle_session_timeout', '0', false) END");
    /* a setting every version has needs no test, even when unknown */
    assert_int_equal(pglock__setting_since(b, sizeof b, 0, 0, "lock_timeout",
                                           "0", "true"),
                     0);
    assert_string_equal(b, "set_config('lock_timeout', '0', true)");
    assert_int_equal(pglock__setting_since(b, 8, 150000, 0, "lock_timeout", "0",
                                           "true"),
                     -1);
    /* and the settings' statement applies it: none of 14's on a 13 */
    char sql[2048];
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = 30000;
    assert_int_equal(pglock__settings_sql(sql, sizeof sql, &o, 0, 130000), 0);
    assert_null(strstr(sql, "idle_session_timeout"));
    assert_null(strstr(sql, "server_version_num"));
    assert_int_equal(pglock__settings_sql(sql, sizeof sql, &o, 0, 0), 0);
    assert_non_null(strstr(sql, ">= 140000 THEN set_config("
                                "'idle_session_timeout', '30000', false)"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_kernel_ends_a_holder_before_the_lease),
        cmocka_unit_test(
            the_kill_after_ends_before_the_servers_kernel_may_end_it),
        cmocka_unit_test(the_6s_lease_of_the_partition_tests),
        cmocka_unit_test(
            without_a_lease_dead_peer_ms_is_the_lease_by_the_same_rule),
        cmocka_unit_test(a_setting_follows_the_one_version_rule),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
