/* The lease arithmetic of pglock run: derivation and the enforced rule. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <string.h>
#include <cmocka.h>
#include "run.h"

static void derives_30s_as_designed(void **state)
{
    (void)state;
    run_lease l;
    char err[256];
    assert_int_equal(run_lease_derive(&l, 30000, -1, err, sizeof err), 0);
    assert_int_equal(l.client_ms, 20000);
    assert_int_equal(l.heartbeat_ms, 5000);
    assert_int_equal(l.margin_ms, 5000);
    assert_int_equal(l.kill_after_ms, 5000);
    assert_true(l.client_ms + l.kill_after_ms + l.margin_ms <= l.server_ms);
}

static void short_leases_for_tests_work(void **state)
{
    (void)state;
    char err[256];
    for (long ms = 1000; ms <= 4000; ms += 1) {
        run_lease l;
        assert_int_equal(run_lease_derive(&l, ms, -1, err, sizeof err), 0);
        assert_true(l.heartbeat_ms > 0);
        assert_true(l.client_ms >= 4 * l.heartbeat_ms);
        assert_true(l.client_ms + l.kill_after_ms + l.margin_ms <= l.server_ms);
    }
}

static void default_kill_after_is_capped_at_10s(void **state)
{
    (void)state;
    run_lease l;
    char err[256];
    assert_int_equal(run_lease_derive(&l, 3600000, -1, err, sizeof err), 0);
    assert_int_equal(l.kill_after_ms, 10000);
}

static void kill_after_beyond_the_rule_names_the_bound(void **state)
{
    (void)state;
    char err[256];
    run_lease l;
    assert_int_equal(run_lease_derive(&l, 30000, 15001, err, sizeof err), -1);
    assert_non_null(strstr(err, "--kill-after=15001ms"));
    assert_non_null(strstr(err, "more than half of --lease=30s"));
    assert_int_equal(run_lease_derive(&l, 30000, 15000, err, sizeof err), 0);
}

/* A kill-after longer than T_s/6 brings T_c forward: T_c + kill-after +
 * margin <= T_s still, T_c sees four heartbeats or more, and a
 * kill-after up to T_s/6 changes nothing. */
static void a_longer_kill_after_brings_the_client_deadline_forward(void **state)
{
    (void)state;
    char err[256];
    run_lease l, d;
    assert_int_equal(run_lease_derive(&l, 30000, 15000, err, sizeof err), 0);
    assert_int_equal(l.client_ms, 10000);
    assert_int_equal(l.heartbeat_ms, 2500);
    assert_int_equal(l.margin_ms, 5000);
    assert_int_equal(run_lease_derive(&l, 60000, 20000, err, sizeof err), 0);
    assert_int_equal(l.client_ms, 30000);
    assert_int_equal(l.heartbeat_ms, 7500);
    for (long ms = RUN_LEASE_MIN_MS; ms <= 3600000; ms += ms / 37) {
        assert_int_equal(run_lease_derive(&d, ms, -1, err, sizeof err), 0);
        for (long k = 0; k <= ms / 2; k += ms / 23 + 1) {
            assert_int_equal(run_lease_derive(&l, ms, k, err, sizeof err), 0);
            assert_true(l.client_ms + l.kill_after_ms + l.margin_ms <= ms);
            assert_true(l.client_ms >= ms / 3);
            assert_true(l.heartbeat_ms > 0);
            assert_true(l.client_ms >= 4 * l.heartbeat_ms);
            if (k <= ms / 6) {
                assert_int_equal(l.client_ms, d.client_ms);
                assert_int_equal(l.heartbeat_ms, d.heartbeat_ms);
            }
        }
    }
}

static void lease_out_of_range_is_refused(void **state)
{
    (void)state;
    run_lease l;
    char err[256];
    assert_int_equal(run_lease_derive(&l, 999, -1, err, sizeof err), -1);
    assert_non_null(strstr(err, "out of range"));
    assert_int_equal(run_lease_derive(&l, 2147483648L, -1, err, sizeof err),
                     -1);
}

static void formats_durations(void **state)
{
    (void)state;
    char b[32];
    run_format_ms(500, b, sizeof b);
    assert_string_equal(b, "500ms");
    run_format_ms(20000, b, sizeof b);
    assert_string_equal(b, "20s");
    run_format_ms(120000, b, sizeof b);
    assert_string_equal(b, "2m");
    run_format_ms(1333, b, sizeof b);
    assert_string_equal(b, "1333ms");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(derives_30s_as_designed),
        cmocka_unit_test(short_leases_for_tests_work),
        cmocka_unit_test(default_kill_after_is_capped_at_10s),
        cmocka_unit_test(kill_after_beyond_the_rule_names_the_bound),
        cmocka_unit_test(
            a_longer_kill_after_brings_the_client_deadline_forward),
        cmocka_unit_test(lease_out_of_range_is_refused),
        cmocka_unit_test(formats_durations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
