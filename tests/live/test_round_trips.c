/*
 * Round trips, counted at the harness's proxy (never inferred from time):
 * a session acquire and a release are one statement each (one PQexecParams:
 * 5 protocol messages, 1 round trip) for every key form and every wait
 * kind, over many calls, so no SET ever travels on its own; a wait that
 * lasts is still one round trip (the server wakes the waiter, nobody
 * polls); lock inside a transaction and begin+lock are one round trip;
 * a heartbeat and unlock-all are one each, and so is a hold's last
 * heartbeat with the release of every lock (pglock_hold_release()).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include "support.h"

static pglock_client *open_through_proxy(void)
{
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    return pt_open_client(proxy, NULL);
}

/* Asserts what the proxy saw since the last reset, then resets. */
static void expect_counts(long roundtrips, long messages, const char *what,
                          int i)
{
    long rt = pt_proxy_roundtrips(), m = pt_proxy_messages();
    if (rt != roundtrips || (messages >= 0 && m != messages))
        fail_msg("%s (call %d): %ld round trips / %ld messages, expected "
                 "%ld / %ld",
                 what, i, rt, m, roundtrips, messages);
    pt_proxy_reset();
}

static void every_session_call_is_one_statement(void **state)
{
    (void)state;
    pglock_client *c = open_through_proxy();
    pglock_key keys[4];
    pglock_key_int64(&keys[0], pt_unique_key());
    pglock_key_pair(&keys[1], 4242, (int32_t)(pt_unique_key() & 0x7fffffff));
    pglock_key_text(&keys[2], "round-trips: ünïcode name");
    pglock_key_hashtextextended(&keys[3], "round-trips", 7);
    const long timeouts[] = {PGLOCK_TRY, 1500, PGLOCK_WAIT_FOREVER};
    pt_proxy_reset();
    for (int i = 0; i < 60; i++) {
        pglock_key *k = &keys[i % 4];
        pglock_mode mode = (i / 4) % 2 ? PGLOCK_SHARED : PGLOCK_EXCLUSIVE;
        assert_int_equal(pglock_lock(c, k, mode, timeouts[i % 3]), 0);
        expect_counts(1, 5, "acquire", i);
        /* re-entrant: a second acquire is a second statement, no more */
        assert_int_equal(pglock_lock(c, k, mode, PGLOCK_TRY), 0);
        expect_counts(1, 5, "re-acquire", i);
        assert_int_equal(pglock_unlock(c, k, mode), 0);
        expect_counts(1, 5, "release", i);
        assert_int_equal(pglock_unlock(c, k, mode), 0);
        expect_counts(1, 5, "release", i);
    }
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    expect_counts(1, -1, "heartbeat", 0);
    assert_int_equal(pglock_lock(c, &keys[0], PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_proxy_reset();
    assert_int_equal(pglock_unlock_all(c), 0);
    expect_counts(1, -1, "unlock-all", 0);
    pglock_client_close(c);
}

/* A busy try is one round trip too: the answer "not granted" needs no
 * check of pg_locks. */
static void a_busy_try_is_one_round_trip(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = open_through_proxy();
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_key k;
    pglock_key_int64(&k, id);
    pt_proxy_reset();
    for (int i = 0; i < 10; i++) {
        assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                         PGLOCK_EBUSY);
        expect_counts(1, 5, "busy try", i);
    }
    pglock_client_close(c);
    PQfinish(holder);
}

typedef struct waiter {
    pglock_client *c;
    pglock_key key;
    int rc;
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    w->rc = pglock_lock(w->c, &w->key, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER);
    return NULL;
}

static void a_long_wait_is_one_round_trip(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    waiter w = {.c = open_through_proxy()};
    pglock_key_int64(&w.key, id);
    pt_proxy_reset();
    pthread_t t;
    pthread_create(&t, NULL, wait_main, &w);
    assert_true(
        pt_wait_backend_waiting(holder, pglock_client_backend_pid(w.c), 10000));
    /* Let the wait last: a polling client would send something meanwhile
     * (not a timing assertion: any wait shorter than lease/8 gives the
     * same; a longer one adds one confirming heartbeat, see pglock_lock). */
    usleep(700 * 1000);
    assert_int_equal(pt_proxy_roundtrips(), 1);
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    expect_counts(1, 5, "woken wait", 0);
    assert_false(pt_key_free(holder, id));
    pglock_client_close(w.c);
    PQfinish(holder);
}

static void transaction_locks_are_one_round_trip_each(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    PGconn *c = pt_connect(proxy);
    pglock_error err = {0};
    pt_proxy_reset();
    for (int i = 0; i < 20; i++) {
        pglock_key k;
        pglock_key_int64(&k, pt_unique_key());
        long timeout = i % 2 ? 1000 : PGLOCK_TRY;
        assert_int_equal(pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE,
                                                timeout, -1, &err),
                         0);
        expect_counts(1, -1, "begin+lock", i);
        pglock_key k2;
        pglock_key_pair(&k2, 77, i);
        assert_int_equal(
            pglock_xact_lock(c, &k2, PGLOCK_SHARED, timeout, -1, &err), 0);
        expect_counts(1, -1, "lock in transaction", i);
        pt_exec_ok(c, "COMMIT");
        pt_proxy_reset();
    }
    PQfinish(c);
}

/* pglock_hold_release(): the last heartbeat and the release of every
 * lock are one round trip, in both lifetimes and both drives; the locks
 * are free when it returns, and closing the client then sends nothing.
 * A heartbeat left in flight by a step is answered first (its own round
 * trip, sent before the call). */
static void a_hold_release_is_one_round_trip(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    PGconn *obs = pt_connect(primary);
    /* 13 has no idle_session_timeout, so no session lease: the session
     * half is for 14 and later. */
    const char *version = getenv("PGLOCK_TEST_SERVER_VERSION_NUM");
    int session_lease = !version || atoi(version) >= 140000;
    const pglock_lifetime modes[] = {PGLOCK_LIFETIME_SESSION,
                                     PGLOCK_LIFETIME_XACT};
    const pglock_hold_drive drives[] = {PGLOCK_HOLD_LOOP, PGLOCK_HOLD_THREAD};
    for (int i = 0; i < 4; i++) {
        if (modes[i % 2] == PGLOCK_LIFETIME_SESSION && !session_lease)
            continue;
        pglock_options o;
        pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
        o.lifetime = modes[i % 2];
        o.lease_ms = 30000; /* a heartbeat every 5 s: none of the hold's
                               own in the count */
        pglock_client *c = pt_open_client(proxy, &o);
        int64_t id = pt_unique_key(), id2 = pt_unique_key();
        pglock_key k, k2;
        pglock_key_int64(&k, id);
        pglock_key_int64(&k2, id2);
        assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
        assert_int_equal(pglock_lock(c, &k2, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
        pglock_hold_options ho;
        pglock_hold_options_init(&ho, PGLOCK_HOLD_OPTIONS_VERSION);
        ho.drive = drives[i / 2];
        pglock_hold *h;
        assert_int_equal(pglock_hold_start(&h, c, &ho), 0);
        assert_false(pt_key_free(obs, id));
        pt_proxy_reset();
        assert_int_equal(pglock_hold_release(h, 5000), 0);
        expect_counts(1, -1, "hold release", i);
        /* free at once, both of them, and nothing left to send */
        assert_true(pt_key_free(obs, id));
        assert_true(pt_key_free(obs, id2));
        assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
        pglock_client_close(c);
        expect_counts(0, -1, "close after the release", i);
    }
    if (!session_lease) {
        PQfinish(obs);
        return;
    }
    /* A lock taken after a release is released by close, as ever. */
    pglock_client *c = pt_open_client(proxy, NULL);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pglock_hold *h;
    assert_int_equal(pglock_hold_start(&h, c, NULL), 0);
    assert_int_equal(pglock_hold_release(h, 5000), 0);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_false(pt_key_free(obs, id));
    pt_proxy_reset();
    pglock_client_close(c);
    expect_counts(1, -1, "close with a lock taken after the release", 0);
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_session_call_is_one_statement),
        cmocka_unit_test(a_busy_try_is_one_round_trip),
        cmocka_unit_test(a_long_wait_is_one_round_trip),
        cmocka_unit_test(transaction_locks_are_one_round_trip_each),
        cmocka_unit_test(a_hold_release_is_one_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
