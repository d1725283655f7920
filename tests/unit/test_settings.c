/* The lock connection's dead-peer settings (settings.c) against the lease
 * arithmetic (run_lease.c): with a lease, no kernel may end a holder's
 * session before T_s, and the client's kill-after ends before that. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdlib.h>
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
        assert_true((idle + count * interval) * 1000 <= ms + interval * 1000 + 2000);
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

static void without_a_lease_a_dead_peer_is_noticed_in_two_thirds(void **state)
{
    (void)state;
    pglock__derived d = derive(0, 9000);
    assert_string_equal(d.user_timeout, "6000");
    assert_string_equal(d.ka_idle, "3");
    assert_string_equal(d.ka_interval, "1");
    assert_string_equal(d.ka_count, "3");
    assert_string_equal(d.check_interval, "3000");
    assert_string_equal(d.lease, "0");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(no_kernel_ends_a_holder_before_the_lease),
        cmocka_unit_test(the_kill_after_ends_before_the_servers_kernel_may_end_it),
        cmocka_unit_test(the_6s_lease_of_the_partition_tests),
        cmocka_unit_test(without_a_lease_a_dead_peer_is_noticed_in_two_thirds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
