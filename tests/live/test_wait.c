/*
 * Waiting: the server waits, the timeout is kept, an interrupt or a
 * deadline cancels the server-side wait and leaves no waiter queued, and a
 * lock granted in the instant a wait fails is reported as held.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

typedef struct waiter {
    pglock_client *c;
    pglock_key key;
    pglock_mode mode;
    long timeout_ms;
    int rc;
    int64_t took_ms;
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    int64_t t0 = pt_now_ms();
    w->rc = pglock_lock(w->c, &w->key, w->mode, w->timeout_ms);
    w->took_ms = pt_now_ms() - t0;
    return NULL;
}

/* Starts w waiting for the bigint id in a thread (to be joined) and
 * returns once the server, seen from obs, shows its backend waiting. */
static pthread_t start_waiting(waiter *w, int64_t id, PGconn *obs)
{
    int pid = pglock_client_backend_pid(w->c); /* before w->c is busy */
    pglock_key_int64(&w->key, id);
    pthread_t t;
    pthread_create(&t, NULL, wait_main, w);
    assert_true(pt_wait_backend_waiting(obs, pid, 10000));
    return t;
}

static void a_waiter_is_woken_when_the_holder_releases(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    waiter w = {.c = pt_open_client(primary, NULL), .mode = PGLOCK_EXCLUSIVE,
                .timeout_ms = PGLOCK_WAIT_FOREVER};
    pthread_t t = start_waiting(&w, id, holder);
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_false(pt_key_free(holder, id));
    pglock_client_close(w.c);
    assert_true(pt_key_free(holder, id));
    PQfinish(holder);
}

static void a_timeout_returns_and_leaves_no_waiter(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_client *c = pt_open_client(primary, NULL);
    pglock_key k;
    pglock_key_int64(&k, id);

    int64_t t0 = pt_now_ms();
    int rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 300);
    int64_t took = pt_now_ms() - t0;
    assert_int_equal(rc, PGLOCK_ETIMEDOUT);
    /* The server's lock_timeout ended it (not the client's deadline). */
    assert_string_equal(pglock_client_sqlstate(c), "55P03");
    assert_true(took < 300 + 2000); /* within its deadline, generously */
    int pid = pglock_client_backend_pid(c);
    assert_int_equal(pt_backend_waiting_on_advisory(holder, pid), 0);
    assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
    /* The client is still usable, and lock_timeout was for that wait only. */
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 300), 0);
    pglock_client_close(c);
    PQfinish(holder);
}

/* The one interrupt: a readable interrupt_fd (a self-pipe, say) ends the
 * wait at once; the library never reads it, and once the caller drains
 * it the client waits again. */
static void an_interrupt_fd_ends_the_wait_leaving_nothing_behind(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.interrupt_fd = p[0];
    waiter w = {.c = pt_open_client(primary, &o), .mode = PGLOCK_EXCLUSIVE,
                .timeout_ms = PGLOCK_WAIT_FOREVER};
    int pid = pglock_client_backend_pid(w.c);
    pthread_t t = start_waiting(&w, id, holder);
    assert_int_equal(write(p[1], "x", 1), 1);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, PGLOCK_EINTR);
    assert_int_equal(pt_backend_waiting_on_advisory(holder, pid), 0);
    assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    assert_non_null(strstr(pglock_client_error(w.c), "interrupted"));
    /* the byte is still there: the library never reads the fd */
    char b;
    assert_int_equal(read(p[0], &b, 1), 1);
    /* drained: the client still works */
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    assert_int_equal(pglock_lock(w.c, &w.key, PGLOCK_EXCLUSIVE, 1000), 0);
    pglock_client_close(w.c);
    close(p[0]);
    close(p[1]);
    PQfinish(holder);
}

/* The holder releases and cancels the waiter in one statement: the server
 * grants the lock and then delivers the cancel, so the waiter may get an
 * error for a lock it holds.  It must be reported as held, every time. */
static void a_grant_at_cancel_is_reported_as_held(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    PGconn *obs = pt_connect(primary);
    pglock_client *c = pt_open_client(primary, NULL);
    int pid = pglock_client_backend_pid(c);
    int tries = getenv("PGLOCK_TEST_RACE_TRIES")
                    ? atoi(getenv("PGLOCK_TEST_RACE_TRIES")) : 200;
    for (int i = 0; i < tries; i++) {
        int64_t id = pt_unique_key();
        pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);
        waiter w = {.c = c, .mode = PGLOCK_EXCLUSIVE, .timeout_ms = 30000};
        pthread_t t = start_waiting(&w, id, obs);
        pt_execf(holder, "SELECT pg_advisory_unlock(%lld),"
                 " pg_cancel_backend(%d)", (long long)id, pid);
        pthread_join(t, NULL);
        if (w.rc != 0)
            fail_msg("try %d: %s (%s)", i, pglock_strerror(w.rc),
                     pglock_client_error(c));
        assert_false(pt_key_free(obs, id));
        assert_int_equal(pglock_unlock(c, &w.key, PGLOCK_EXCLUSIVE), 0);
        assert_true(pt_key_free(obs, id));
    }
    pglock_client_close(c);
    PQfinish(obs);
    PQfinish(holder);
}

/* The other side of the race: the cancel wins and the lock is not held. */
static void a_cancel_before_the_grant_is_not_held(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_client *c = pt_open_client(primary, NULL);
    int pid = pglock_client_backend_pid(c);
    waiter w = {.c = c, .mode = PGLOCK_EXCLUSIVE, .timeout_ms = 30000};
    pthread_t t = start_waiting(&w, id, holder);
    pt_execf(holder, "SELECT pg_cancel_backend(%d)", pid);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, PGLOCK_EINTR); /* someone cancelled it */
    assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    pglock_client_close(c);
    PQfinish(holder);
}

/* Through the harness's proxy, cut the network during a wait: the wait
 * returns by its deadline (timeout + cancel timeout), the connection is
 * given up, and the server does not keep the waiter. */
static void a_cut_network_wait_returns_by_its_deadline(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.cancel_timeout_ms = 500;
    o.lease_ms = 3000;
    pglock_client *c = pt_open_client(proxy, &o);
    int pid = pglock_client_backend_pid(c);
    pglock_key k;
    pglock_key_int64(&k, id);

    /* Cut first: neither the server's lock_timeout error nor the cancel
     * can get through. */
    pt_proxy_cut();
    int64_t t0 = pt_now_ms();
    int rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 800);
    int64_t took = pt_now_ms() - t0;
    pt_proxy_heal();
    print_message("cut network: %s after %lld ms\n", pglock_err_name(rc),
                  (long long)took);
    assert_int_equal(rc, PGLOCK_ECONNLOST);
    assert_true(took < 800 + 250 + 500 + 1500);
    assert_int_equal(pglock_client_socket(c), -1);
    pglock_client_close(c);
    /* The server ends the silent session by itself (the lease). */
    assert_true(pt_wait_backend_gone(holder, pid, 10000));
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    PQfinish(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_waiter_is_woken_when_the_holder_releases),
        cmocka_unit_test(a_timeout_returns_and_leaves_no_waiter),
        cmocka_unit_test(an_interrupt_fd_ends_the_wait_leaving_nothing_behind),
        cmocka_unit_test(a_grant_at_cancel_is_reported_as_held),
        cmocka_unit_test(a_cancel_before_the_grant_is_not_held),
        cmocka_unit_test(a_cut_network_wait_returns_by_its_deadline),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
