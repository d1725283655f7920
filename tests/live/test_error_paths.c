/*
 * The library's error paths on the real server: a full lock table (53200)
 * and a cancel from another session (57014) come back as their own codes
 * with their SQLSTATE, a failed try or wait inside the caller's
 * transaction leaves that transaction usable (it still commits), and a
 * legacy key's server round trip is bounded on a cut network.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "support.h"

/* A table of this process's own, for a row that proves a commit. */
static void make_table(PGconn *c, char *name, size_t len)
{
    snprintf(name, len, "pglock_err_%ld", (long)getpid());
    pt_execf(c, "SET client_min_messages = warning");
    pt_execf(c, "DROP TABLE IF EXISTS %s", name);
    pt_execf(c, "CREATE TABLE %s (x int)", name);
}

/* The try fails with 53200 inside the caller's transaction: the code says
 * so, and the transaction (with the row it wrote) still commits. */
static void a_try_on_a_full_lock_table_leaves_the_transaction_usable(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *obs = pt_connect(primary);
    PGconn *filler = pt_connect(primary);
    char table[64];
    make_table(c, table, sizeof table);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    pglock_error err = {0};

    pt_execf(c, "BEGIN");
    pt_execf(c, "INSERT INTO %s VALUES (1)", table);
    pt_lock_table_fill(filler);
    int rc = pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY, -1, &err);
    pt_lock_table_release(filler);
    if (rc != PGLOCK_ELOCKTABLE)
        fail_msg("try on a full lock table: %s (%s), expected "
                 "PGLOCK_ELOCKTABLE",
                 pglock_err_name(rc), err.message);
    assert_int_equal(err.code, PGLOCK_ELOCKTABLE);
    assert_string_equal(err.sqlstate, "53200");
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    assert_int_equal(pt_query_intf(c, "SELECT count(*) FROM %s", table), 1);
    /* usable: the lock can be taken now, and the commit keeps the row */
    assert_int_equal(
        pglock_xact_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY, -1, &err), 0);
    pt_execf(c, "COMMIT");
    assert_int_equal(pt_query_intf(obs, "SELECT count(*) FROM %s", table), 1);
    pt_execf(c, "DROP TABLE %s", table);
    PQfinish(filler);
    PQfinish(obs);
    PQfinish(c);
}

/* begin+lock on a full lock table: the code, and no transaction left. */
static void a_begin_lock_on_a_full_lock_table_rolls_back(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *filler = pt_connect(primary);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    pglock_error err = {0};
    pt_lock_table_fill(filler);
    int try = pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY, -1,
                                     &err);
    int wait = pglock_xact_begin_lock(c, &k, PGLOCK_EXCLUSIVE, 1000, -1, &err);
    pt_lock_table_release(filler);
    assert_int_equal(try, PGLOCK_ELOCKTABLE);
    assert_int_equal(wait, PGLOCK_ELOCKTABLE);
    assert_string_equal(err.sqlstate, "53200");
    assert_int_equal(PQtransactionStatus(c), PQTRANS_IDLE);
    PQfinish(filler);
    PQfinish(c);
}

/* In xact hold a later try that hits the full table fails alone: the
 * holding transaction and the lock it holds are kept. */
static void xact_hold_keeps_its_locks_after_a_full_lock_table(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_XACT;
    pglock_client *c = pt_open_client(primary, &o);
    PGconn *obs = pt_connect(primary), *filler = pt_connect(primary);
    int64_t held = pt_unique_key();
    pglock_key a, b;
    pglock_key_int64(&a, held);
    pglock_key_int64(&b, pt_unique_key());
    assert_int_equal(pglock_lock(c, &a, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_lock_table_fill(filler);
    int rc = pglock_lock(c, &b, PGLOCK_EXCLUSIVE, PGLOCK_TRY);
    pt_lock_table_release(filler);
    if (rc != PGLOCK_ELOCKTABLE)
        fail_msg("xact hold try on a full lock table: %s (%s)",
                 pglock_err_name(rc), pglock_client_error(c));
    assert_string_equal(pglock_client_sqlstate(c), "53200");
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_int_equal(pglock_lock_count(c, &a, PGLOCK_EXCLUSIVE), 1);
    assert_false(pt_key_free(obs, held));
    assert_int_equal(pglock_lock(c, &b, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pglock_client_close(c);
    assert_true(pt_key_free(obs, held));
    PQfinish(filler);
    PQfinish(obs);
}

typedef struct xwaiter {
    PGconn *c;
    pglock_key key;
    pglock_error err;
    int rc;
    volatile int done;
} xwaiter;

static void *xwait_main(void *arg)
{
    xwaiter *w = arg;
    w->rc = pglock_xact_lock(w->c, &w->key, PGLOCK_EXCLUSIVE,
                             PGLOCK_WAIT_FOREVER, -1, &w->err);
    w->done = 1;
    return NULL;
}

/* Another session cancels the wait (pg_cancel_backend): PGLOCK_EINTR with
 * SQLSTATE 57014, nothing left waiting, and the transaction commits. */
static void a_wait_cancelled_by_another_session_is_eintr(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *c = pt_connect(primary), *holder = pt_connect(primary);
    char table[64];
    make_table(c, table, sizeof table);
    int64_t id = pt_unique_key();
    pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);
    pt_execf(c, "BEGIN");
    pt_execf(c, "INSERT INTO %s VALUES (1)", table);
    xwaiter w = {.c = c, .err = {0}};
    pglock_key_int64(&w.key, id);
    pthread_t t;
    pthread_create(&t, NULL, xwait_main, &w);
    assert_true(pt_wait_backend_waiting(holder, PQbackendPID(c), 10000));
    assert_int_equal(pt_query_intf(holder, "SELECT pg_cancel_backend(%d)",
                                   PQbackendPID(c)),
                     1);
    pthread_join(t, NULL);
    if (w.rc != PGLOCK_EINTR)
        fail_msg("cancelled wait: %s (%s)", pglock_err_name(w.rc),
                 w.err.message);
    assert_string_equal(w.err.sqlstate, "57014");
    assert_false(pt_backend_waiting_on_advisory(holder, PQbackendPID(c)));
    assert_int_equal(PQtransactionStatus(c), PQTRANS_INTRANS);
    pt_execf(c, "COMMIT");
    assert_int_equal(pt_query_intf(holder, "SELECT count(*) FROM %s", table),
                     1);
    pt_execf(c, "DROP TABLE %s", table);
    PQfinish(holder);
    PQfinish(c);
}

typedef struct resolver {
    PGconn *c;
    pglock_key key;
    pglock_error err;
    int rc;
    volatile int done;
} resolver;

static void resolve(void *arg)
{
    resolver *r = arg;
    r->rc = pglock_key_resolve(&r->key, r->c, &r->err);
    r->done = 1;
}

static void *resolve_main(void *arg)
{
    resolve(arg);
    return NULL;
}

/* A cancel from another session while the server computes a legacy key
 * (held up by a lock on pg_proc, which a fresh session reads to find
 * hashtext): PGLOCK_EINTR with SQLSTATE 57014, not PGLOCK_ESERVER. */
static void a_cancelled_key_resolve_is_eintr(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *locker = pt_connect(primary);
    resolver r = {.c = pt_connect(primary), .err = {0}};
    pglock_key_hashtext(&r.key, "error-paths");
    int pid = PQbackendPID(r.c);
    pt_execf(locker, "BEGIN");
    pt_execf(locker, "LOCK TABLE pg_catalog.pg_proc IN ACCESS EXCLUSIVE MODE");
    pthread_t t;
    pthread_create(&t, NULL, resolve_main, &r);
    /* The locker holds pg_proc, so its own look at pg_locks never waits. */
    long waiting = 0;
    for (int i = 0; i < 500 && !waiting && !r.done; i++) {
        waiting = pt_query_intf(locker,
                                "SELECT count(*) FROM pg_locks"
                                " WHERE pid = %d AND NOT granted",
                                pid);
        usleep(10000);
    }
    if (waiting)
        pt_query_intf(locker, "SELECT pg_cancel_backend(%d)", pid);
    pthread_join(t, NULL);
    pt_execf(locker, "ROLLBACK");
    assert_true(waiting);
    if (r.rc != PGLOCK_EINTR)
        fail_msg("cancelled resolve: %s (%s)", pglock_err_name(r.rc),
                 r.err.message);
    assert_string_equal(r.err.sqlstate, "57014");
    /* the connection is still usable, and so is the key afterwards */
    assert_int_equal(pglock_key_resolve(&r.key, r.c, &r.err), 0);
    assert_int_equal(r.key.id, pt_query_int(r.c, "SELECT hashtext("
                                                 "'error-paths')::bigint"));
    PQfinish(r.c);
    PQfinish(locker);
}

/* On a cut network the resolve gives up on its own (it used to wait in
 * PQexecParams for as long as the kernel kept the socket). */
static void a_key_resolve_on_a_cut_network_returns(void **s)
{
    (void)s;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    resolver r = {.c = pt_connect(proxy), .err = {0}};
    pglock_key_hashtext(&r.key, "error-paths-cut");
    pt_proxy_cut();
    if (pt_call_on_cut_network(resolve, &r, 30000) < 0)
        fail_msg("pglock_key_resolve() did not return on a cut network");
    assert_int_equal(r.rc, PGLOCK_ECONNLOST);
    assert_non_null(strstr(r.err.message, "PQfinish"));
    assert_false(r.key.resolved);
    PQfinish(r.c);
}

typedef struct locker {
    pglock_client *c;
    pglock_key key;
    int rc;
} locker;

static void lock_briefly(void *arg)
{
    locker *l = arg;
    l->rc = pglock_lock(l->c, &l->key, PGLOCK_EXCLUSIVE, 500);
}

/* In xact hold a legacy key's value comes with the lock, in its round
 * trip and under its deadline: on a cut network pglock_lock() returns. */
static void an_xact_hold_legacy_lock_on_a_cut_network_returns(void **s)
{
    (void)s;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_XACT;
    o.cancel_timeout_ms = 500;
    locker l = {.c = pt_open_client(proxy, &o)};
    pglock_key_hashtext(&l.key, "error-paths-xact-cut");
    pt_proxy_cut();
    if (pt_call_on_cut_network(lock_briefly, &l, 30000) < 0)
        fail_msg("pglock_lock() did not return on a cut network");
    assert_int_equal(l.rc, PGLOCK_ECONNLOST);
    assert_int_equal(pglock_lock_count(l.c, &l.key, PGLOCK_EXCLUSIVE), 0);
    pglock_client_close(l.c);
}

/* The same lock, healthy: one round trip, resolved, and the heartbeat
 * finds it in pg_locks by the value that came back with it. */
static void an_xact_hold_legacy_lock_is_one_round_trip(void **s)
{
    (void)s;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_XACT;
    pglock_client *c = pt_open_client(proxy, &o);
    PGconn *obs = pt_connect(primary);
    pglock_key k;
    pglock_key_hashtextextended(&k, "error-paths-o'brien", -3);
    pt_proxy_reset();
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_int_equal(pt_proxy_roundtrips(), 1);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_false(pt_query_int(obs,
                              "SELECT pg_try_advisory_lock("
                              "hashtextextended('error-paths-o''brien', -3))"));
    pglock_client_close(c);
    assert_true(pt_query_int(obs,
                             "SELECT pg_try_advisory_lock("
                             "hashtextextended('error-paths-o''brien', -3))"));
    pt_exec_ok(obs, "SELECT pg_advisory_unlock_all()");
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            a_try_on_a_full_lock_table_leaves_the_transaction_usable),
        cmocka_unit_test(a_begin_lock_on_a_full_lock_table_rolls_back),
        cmocka_unit_test(xact_hold_keeps_its_locks_after_a_full_lock_table),
        cmocka_unit_test(a_wait_cancelled_by_another_session_is_eintr),
        cmocka_unit_test(a_cancelled_key_resolve_is_eintr),
        cmocka_unit_test(a_key_resolve_on_a_cut_network_returns),
        cmocka_unit_test(an_xact_hold_legacy_lock_on_a_cut_network_returns),
        cmocka_unit_test(an_xact_hold_legacy_lock_is_one_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
