/*
 * Transaction locks on the caller's own PGconn: held until COMMIT or
 * ROLLBACK, a failed wait leaves the transaction usable, "begin and lock"
 * is one round trip, and all of it works through a transaction pooler.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

static void xact_lock_holds_until_commit(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    pglock_error err = {0};

    pt_execf(c, "BEGIN");
    assert_int_equal(pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, 1000, -1, &err),
                     0);
    assert_false(pt_key_free(obs, id));
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    /* lock_timeout was for the wait only */
    assert_int_equal(pt_query_intf(c, "SELECT current_setting('lock_timeout')"
                                      " = '0'"),
                     1);
    pt_execf(c, "COMMIT");
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
    PQfinish(c);
}

static void xact_lock_outside_a_transaction_is_a_state_error(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    pglock_error err = {0};
    assert_int_equal(pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, 0, -1, &err),
                     PGLOCK_ESTATE);
    assert_int_equal(err.code, PGLOCK_ESTATE);
    assert_non_null(strstr(err.message, "transaction"));
    pt_execf(c, "BEGIN");
    assert_int_equal(pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, 0, -1,
                                            &err),
                     PGLOCK_ESTATE);
    pt_execf(c, "ROLLBACK");
    PQfinish(c);
}

static void a_timed_out_xact_lock_leaves_the_transaction_usable(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *holder = pt_connect(primary);
    int64_t id = pt_unique_key();
    pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);
    pglock_key k;
    pglock_key_int64(&k, id);
    pglock_error err = {0};

    pt_execf(c, "BEGIN");
    pt_execf(c, "CREATE TEMP TABLE pglock_t(x int) ON COMMIT DROP");
    pt_execf(c, "INSERT INTO pglock_t VALUES (1)");
    assert_int_equal(pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, 200, -1, &err),
                     PGLOCK_ETIMEDOUT);
    assert_string_equal(err.sqlstate, "55P03");
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    assert_int_equal(pt_query_intf(c, "SELECT count(*) FROM pglock_t"), 1);
    assert_int_equal(pt_query_intf(c, "SELECT current_setting('lock_timeout')"
                                      " = '0'"),
                     1);
    assert_false(pt_backend_waiting_on_advisory(holder, PQbackendPID(c)));
    /* a try on a held lock: busy, transaction still fine */
    assert_int_equal(pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY, -1,
                                      &err),
                     PGLOCK_EBUSY);
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    pt_execf(c, "COMMIT");
    PQfinish(holder);
    PQfinish(c);
}

static void begin_lock_opens_a_transaction_holding_the_lock(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *obs = pt_connect(primary);
    pglock_key k;
    pglock_key_pair(&k, 42, 9);
    pglock_error err = {0};
    assert_int_equal(pglock_xact_begin_lock(c, &k, PGLOCK_SHARED,
                                            PGLOCK_WAIT_FOREVER, -1, &err),
                     0);
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    assert_false(pt_query_intf(obs, "SELECT pg_try_advisory_lock(42, 9)"));
    assert_true(
        pt_query_intf(obs, "SELECT pg_try_advisory_lock_shared(42, 9)"));
    pt_execf(obs, "SELECT pg_advisory_unlock_all()");
    pt_execf(c, "ROLLBACK");
    assert_true(pt_query_intf(obs, "SELECT pg_try_advisory_lock(42, 9)"));
    pt_execf(obs, "SELECT pg_advisory_unlock_all()");
    PQfinish(obs);
    PQfinish(c);
}

static void begin_lock_busy_rolls_back(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *holder = pt_connect(primary);
    pglock_key k;
    pglock_key_hashtext(&k, "import:o'brien");
    pt_execf(holder, "SELECT pg_advisory_lock(hashtext('import:o''brien'))");
    pglock_error err = {0};
    assert_int_equal(pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                                            -1, &err),
                     PGLOCK_EBUSY);
    assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);
    assert_int_equal(pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, 100, -1,
                                            &err),
                     PGLOCK_ETIMEDOUT);
    assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);
    pt_execf(holder, "SELECT pg_advisory_unlock_all()");
    assert_int_equal(pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY,
                                            -1, &err),
                     0);
    assert_false(pt_query_intf(
        holder, "SELECT pg_try_advisory_lock(hashtext('import:o''brien'))"));
    pt_execf(c, "COMMIT");
    PQfinish(holder);
    PQfinish(c);
}

typedef struct xwaiter {
    PGconn *c;
    pglock_key key;
    int interrupt_fd;
    int rc;
} xwaiter;

static void *xwait_main(void *arg)
{
    xwaiter *w = arg;
    pglock_error err = {0};
    w->rc = pglock_xact_lock(w->c, &w->key, PGLOCK_EXCLUSIVE,
                             PGLOCK_WAIT_FOREVER, w->interrupt_fd, &err);
    return NULL;
}

static void an_interrupted_xact_wait_leaves_the_transaction_usable(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *holder = pt_connect(primary);
    int64_t id = pt_unique_key();
    pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);
    pt_execf(c, "BEGIN");
    int p[2];
    assert_int_equal(pipe(p), 0);
    xwaiter w = {.c = c, .interrupt_fd = p[0]};
    pglock_key_int64(&w.key, id);
    pthread_t t;
    pthread_create(&t, NULL, xwait_main, &w);
    assert_true(pt_wait_backend_waiting(holder, PQbackendPID(c), 10000));
    assert_int_equal(write(p[1], "x", 1), 1);
    pthread_join(t, NULL);
    close(p[0]);
    close(p[1]);
    assert_int_equal(w.rc, PGLOCK_EINTR);
    assert_false(pt_backend_waiting_on_advisory(holder, PQbackendPID(c)));
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    assert_int_equal(pt_query_intf(c, "SELECT 1"), 1);
    pt_execf(c, "COMMIT");
    PQfinish(holder);
    PQfinish(c);
}

static void xact_locks_work_through_a_transaction_pooler(void **state)
{
    (void)state;
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(pooler), *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    pglock_error err = {0};
    for (int i = 0; i < 20; i++) {
        assert_int_equal(
            pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, 1000, -1, &err), 0);
        assert_false(pt_key_free(obs, id));
        assert_int_equal(
            pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, 1000, -1, &err), 0);
        pt_execf(c, "COMMIT");
        assert_true(pt_key_free(obs, id));
    }
    /* a failed wait through the pooler leaves the transaction usable */
    pt_execf(obs, "SELECT pg_advisory_lock(%lld)", (long long)id);
    pt_execf(c, "BEGIN");
    assert_int_equal(pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, 100, -1, &err),
                     PGLOCK_ETIMEDOUT);
    assert_int_equal(pt_query_intf(c, "SELECT 1"), 1);
    pt_execf(c, "COMMIT");
    pt_execf(obs, "SELECT pg_advisory_unlock_all()");
    PQfinish(obs);
    PQfinish(c);
}

static void begin_lock_is_one_round_trip(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    PGconn *c = pt_connect(proxy);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    pglock_error err = {0};
    pt_proxy_reset();
    assert_int_equal(
        pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, 1000, -1, &err), 0);
    assert_int_equal(pt_proxy_roundtrips(), 1);
    pt_proxy_reset();
    assert_int_equal(pglock_xact_lock(c, &k, PGLOCK_SHARED, 1000, -1, &err), 0);
    assert_int_equal(pt_proxy_roundtrips(), 1);
    pt_execf(c, "COMMIT");
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xact_lock_holds_until_commit),
        cmocka_unit_test(xact_lock_outside_a_transaction_is_a_state_error),
        cmocka_unit_test(a_timed_out_xact_lock_leaves_the_transaction_usable),
        cmocka_unit_test(begin_lock_opens_a_transaction_holding_the_lock),
        cmocka_unit_test(begin_lock_busy_rolls_back),
        cmocka_unit_test(
            an_interrupted_xact_wait_leaves_the_transaction_usable),
        cmocka_unit_test(xact_locks_work_through_a_transaction_pooler),
        cmocka_unit_test(begin_lock_is_one_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
