/*
 * Heartbeat and round trips: a heartbeat confirms the same backend still
 * holds the client's locks, and notices when it does not; acquire and
 * release cost one round trip each, counted at the harness's proxy.
 */
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

static void heartbeat_confirms_and_moves_confirmed_at(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    int64_t before = pglock_now_ms();
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_true(pglock_client_confirmed_at(c) >= before);
    assert_true(pglock_client_confirmed_at(c) <= pglock_now_ms());

    /* the non-blocking form, driven by poll() on the client's socket */
    assert_int_equal(pglock_heartbeat_send(c), 0);
    assert_int_equal(pglock_heartbeat_send(c), PGLOCK_ESTATE);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0), PGLOCK_ESTATE);
    int rc;
    int64_t end = pt_now_ms() + 5000;
    while ((rc = pglock_heartbeat_poll(c)) == PGLOCK_EAGAIN &&
           pt_now_ms() < end) {
        struct pollfd p = {.fd = pglock_client_socket(c), .events = POLLIN};
        poll(&p, 1, 100);
    }
    assert_int_equal(rc, 0);
    pglock_client_close(c);
}

static void heartbeat_notices_a_terminated_backend(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    PGconn *obs = pt_connect(primary);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    int pid = pglock_client_backend_pid(c);
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_client_socket(c), -1);
    assert_int_equal(pglock_held(c, &k, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0),
                     PGLOCK_ECONNLOST);
    PQfinish(obs);
    pglock_client_close(c);
}

static void heartbeat_notices_a_lost_lock(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k, other;
    pglock_key_int64(&k, id);
    pglock_key_pair(&other, 7, 7);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(c, &other, PGLOCK_SHARED, PGLOCK_TRY), 0);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    /* Behind the client's back (what a stray query on its connection, or
     * a pooler swapping sessions, would do): the lock goes. */
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_unlock(%lld)",
             (long long)id);
    PQclear(PQexec(pglock_client_conn(c), sql));
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_non_null(strstr(pglock_client_error(c), "no longer holds"));
    /* everything the client had is released with the connection */
    assert_true(pt_wait_backend_gone(obs, pglock_client_backend_pid(c), 10000));
    assert_true(pt_query_intf(obs, "SELECT pg_try_advisory_lock(7, 7)"));
    pt_execf(obs, "SELECT pg_advisory_unlock_all()");
    PQfinish(obs);
    pglock_client_close(c);
}

static void acquire_and_release_are_one_round_trip_each(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    pglock_client *c = pt_open_client(proxy, NULL);
    pglock_key k, h, p;
    pglock_key_int64(&k, pt_unique_key());
    pglock_key_hashtext(&h, "import:rt");
    pglock_key_pair(&p, 1, 2);
    pglock_key *keys[] = {&k, &h, &p};
    long timeouts[] = {PGLOCK_TRY, 1000, PGLOCK_WAIT_FOREVER};
    for (int i = 0; i < 3; i++)
        for (int t = 0; t < 3; t++) {
            pt_proxy_reset();
            assert_int_equal(pglock_lock(c, keys[i], PGLOCK_EXCLUSIVE,
                                         timeouts[t]), 0);
            assert_int_equal(pt_proxy_roundtrips(), 1);
            pt_proxy_reset();
            assert_int_equal(pglock_unlock(c, keys[i], PGLOCK_EXCLUSIVE), 0);
            assert_int_equal(pt_proxy_roundtrips(), 1);
        }
    pt_proxy_reset();
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_int_equal(pt_proxy_roundtrips(), 1);
    pglock_client_close(c);
}

static void a_lease_ends_a_silent_session_on_the_server(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = 1500;
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open(&c, primary, &o), 0);
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    /* the client stays silent: the server frees the lock by itself */
    assert_true(pt_wait_backend_gone(obs, pglock_client_backend_pid(c), 10000));
    assert_true(pt_key_free(obs, id));
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    PQfinish(obs);
    pglock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heartbeat_confirms_and_moves_confirmed_at),
        cmocka_unit_test(heartbeat_notices_a_terminated_backend),
        cmocka_unit_test(heartbeat_notices_a_lost_lock),
        cmocka_unit_test(acquire_and_release_are_one_round_trip_each),
        cmocka_unit_test(a_lease_ends_a_silent_session_on_the_server),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
