/*
 * Session locks on a client's dedicated connection, each effect observed
 * from a second, independent connection.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

/* What most tests here start from: a client and an observer connection
 * on the primary, and a fresh bigint key (k, id) that nobody holds. */
typedef struct scene {
    pglock_client *c;
    PGconn *obs;
    pglock_key k;
    int64_t id;
} scene;

static scene scene_open(void)
{
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    scene s;
    s.c = pt_open_client(primary, NULL);
    s.obs = pt_connect(primary);
    s.id = pt_unique_key();
    pglock_key_int64(&s.k, s.id);
    return s;
}

static void scene_close(scene *s)
{
    PQfinish(s->obs);
    pglock_client_close(s->c);
}

static void exclusive_lock_blocks_another_session_until_unlocked(void **state)
{
    (void)state;
    scene s = scene_open();

    assert_int_equal(pglock_lock(s.c, &s.k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_false(pt_key_free(s.obs, s.id));
    assert_false(pt_key_shared_free(s.obs, s.id));
    assert_int_equal(
        pt_backend_advisory_granted(s.obs, pglock_client_backend_pid(s.c)), 1);
    assert_int_equal(pglock_unlock(s.c, &s.k, PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_key_free(s.obs, s.id));

    scene_close(&s);
}

static void try_on_a_held_lock_is_busy_and_takes_nothing(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    PGconn *holder = pt_connect(primary);
    pglock_key k;
    int64_t id = pt_unique_key();
    pglock_key_int64(&k, id);
    pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);

    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_EBUSY);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(
        pt_backend_advisory_granted(holder, pglock_client_backend_pid(c)), 0);
    assert_non_null(strstr(pglock_client_error(c), "held by another"));

    PQfinish(holder);
    pglock_client_close(c);
}

static void shared_admits_shared_and_blocks_exclusive(void **state)
{
    (void)state;
    scene s = scene_open();

    assert_int_equal(pglock_lock(s.c, &s.k, PGLOCK_SHARED, 1000), 0);
    assert_true(pt_key_shared_free(s.obs, s.id));
    assert_false(pt_key_free(s.obs, s.id));
    assert_int_equal(pglock_unlock(s.c, &s.k, PGLOCK_SHARED), 0);
    assert_true(pt_key_free(s.obs, s.id));

    scene_close(&s);
}

static void pair_and_text_keys_are_the_sql_locks(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    PGconn *obs = pt_connect(primary);
    pglock_key pair, text;
    pglock_key_pair(&pair, 42, -9);
    pglock_key_text(&text, "nightly-billing");

    assert_int_equal(pglock_lock(c, &pair, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(c, &text, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_false(pt_query_intf(obs, "SELECT pg_try_advisory_lock(42, -9)"));
    assert_false(pt_query_intf(
        obs,
        "SELECT pg_try_advisory_lock(('x' ||"
        " substr(encode(sha256(convert_to('nightly-billing', 'UTF8')), 'hex'),"
        " 1, 16))::bit(64)::bigint)"));
    assert_int_equal(pglock_unlock(c, &pair, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_unlock(c, &text, PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_query_intf(obs, "SELECT pg_try_advisory_lock(42, -9)"));
    pt_execf(obs, "SELECT pg_advisory_unlock_all()");

    PQfinish(obs);
    pglock_client_close(c);
}

static void hashtext_key_locks_what_sql_hashtext_locks(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    PGconn *obs = pt_connect(primary);
    pglock_key k;
    pglock_key_hashtext(&k, "import:acme");

    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 500), 0);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 1);
    assert_false(pt_query_intf(
        obs, "SELECT pg_try_advisory_lock(hashtext('import:acme'))"));
    assert_int_equal(pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_query_intf(
        obs, "SELECT pg_try_advisory_lock(hashtext('import:acme'))"));
    pt_execf(obs, "SELECT pg_advisory_unlock_all()");

    PQfinish(obs);
    pglock_client_close(c);
}

static void reentrant_lock_needs_as_many_unlocks(void **state)
{
    (void)state;
    scene s = scene_open();

    assert_int_equal(pglock_lock(s.c, &s.k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(
        pglock_lock(s.c, &s.k, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER), 0);
    assert_int_equal(pglock_lock_count(s.c, &s.k, PGLOCK_EXCLUSIVE), 2);
    assert_int_equal(pglock_unlock(s.c, &s.k, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_lock_count(s.c, &s.k, PGLOCK_EXCLUSIVE), 1);
    assert_false(pt_key_free(s.obs, s.id));
    assert_int_equal(pglock_unlock(s.c, &s.k, PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_key_free(s.obs, s.id));
    assert_int_equal(pglock_unlock(s.c, &s.k, PGLOCK_EXCLUSIVE),
                     PGLOCK_ENOTHELD);

    scene_close(&s);
}

static void unlock_of_a_lock_not_held_says_why(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());

    assert_int_equal(pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), PGLOCK_ENOTHELD);
    assert_non_null(strstr(pglock_client_error(c), "not held by this session"));
    assert_non_null(strstr(pglock_client_error(c), "connection that took"));
    /* a shared hold is not an exclusive one */
    assert_int_equal(pglock_lock(c, &k, PGLOCK_SHARED, PGLOCK_TRY), 0);
    assert_int_equal(pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), PGLOCK_ENOTHELD);
    assert_int_equal(pglock_unlock(c, &k, PGLOCK_SHARED), 0);
    pglock_client_close(c);
}

static void unlock_all_frees_every_lock(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    PGconn *obs = pt_connect(primary);
    int64_t a = pt_unique_key(), b = pt_unique_key();
    pglock_key ka, kb;
    pglock_key_int64(&ka, a);
    pglock_key_int64(&kb, b);
    assert_int_equal(pglock_lock(c, &ka, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(c, &ka, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(c, &kb, PGLOCK_SHARED, PGLOCK_TRY), 0);
    assert_int_equal(pglock_unlock_all(c), 0);
    assert_true(pt_key_free(obs, a));
    assert_true(pt_key_free(obs, b));
    assert_int_equal(pglock_lock_count(c, &ka, PGLOCK_EXCLUSIVE), 0);
    PQfinish(obs);
    pglock_client_close(c);
}

static void close_frees_every_lock_before_it_returns(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    for (int round = 0; round < 20; round++) {
        pglock_client *c = pt_open_client(primary, NULL);
        int64_t a = pt_unique_key(), b = pt_unique_key();
        pglock_key ka, kb;
        pglock_key_int64(&ka, a);
        pglock_key_int64(&kb, b);
        assert_int_equal(pglock_lock(c, &ka, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
        assert_int_equal(pglock_lock(c, &kb, PGLOCK_SHARED, PGLOCK_TRY), 0);
        pglock_client_close(c);
        /* no sleep, no polling: free right now */
        assert_true(pt_key_free(obs, a));
        assert_true(pt_key_free(obs, b));
    }
    PQfinish(obs);
}

/* 1 if libpq's connection option keyword of conn has the value value. */
static int conn_option_is(PGconn *conn, const char *keyword, const char *value)
{
    PQconninfoOption *opts = PQconninfo(conn);
    int seen = 0;
    for (PQconninfoOption *p = opts; p && p->keyword; p++)
        if (strcmp(p->keyword, keyword) == 0 && p->val &&
            strcmp(p->val, value) == 0)
            seen = 1;
    PQconninfoFree(opts);
    return seen;
}

static void open_sets_the_lock_connection_settings(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = 30000;
    o.application_name = "pglock-test-settings";
    pglock_client *c = NULL;
    int rc = pglock_client_open(&c, primary, &o);
    assert_int_equal(rc, 0);
    PGconn *obs = pt_connect(primary);
    /* Seen from the server's own view of the session. */
    assert_string_equal(PQparameterStatus(pglock_client_conn(c),
                                          "application_name"),
                        "pglock-test-settings");
    PQfinish(obs);
    /* Read back through the client's connection (reading only). */
    PGconn *own = pglock_client_conn(c);
    assert_int_equal(pt_query_intf(own,
                                   "SELECT current_setting("
                                   "'idle_session_timeout')::interval = '30s'"),
                     1);
    assert_int_equal(
        pt_query_intf(own, "SELECT current_setting('statement_timeout') = '0'"),
        1);
    assert_int_equal(
        pt_query_intf(
            own,
            "SELECT current_setting('idle_in_transaction_session_timeout') = '0'"),
        1);
    assert_int_equal(
        pt_query_intf(own,
                      "SELECT current_setting("
                      "'client_connection_check_interval')::interval = '10s'"),
        1);
    assert_string_equal(PQparameterStatus(own, "server_version") ? "x" : "",
                        "x");
    assert_true(pglock_client_server_version(c) >= 140000);
    assert_int_equal(pglock_client_backend_pid(c), PQbackendPID(own));
    assert_true(pglock_client_socket(c) >= 0);
    assert_true(strlen(pglock_client_database(c)) > 0);
    /* libpq's client-side keepalives were added (the caller set none). */
    assert_true(conn_option_is(own, "keepalives_idle", "10"));
    pglock_client_close(c);
}

static void callers_own_keepalive_setting_wins(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s keepalives_idle=77", primary);
    pglock_client *c = NULL;
    int rc = pglock_client_open(&c, conninfo, NULL);
    if (rc != 0 && strstr(primary, "://")) {
        /* a URI: the conninfo form above does not apply */
        pglock_client_close(c);
        skip();
    }
    assert_int_equal(rc, 0);
    assert_true(conn_option_is(pglock_client_conn(c), "keepalives_idle", "77"));
    pglock_client_close(c);
}

static void an_ordinary_role_gets_the_lease_and_locks(void **state)
{
    (void)state;
    const char *ordinary = pt_env_or_skip("PGLOCK_TEST_ORDINARY");
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = 20000;
    pglock_client *c = pt_open_client(ordinary, &o);
    assert_int_equal(pt_query_intf(pglock_client_conn(c),
                                   "SELECT current_setting("
                                   "'idle_session_timeout')::interval = '20s'"),
                     1);
    pglock_key k;
    int64_t id = pt_unique_key();
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    PGconn *obs = pt_connect(primary);
    assert_false(pt_key_free(obs, id));
    pglock_client_close(c);
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
}

static void connect_failure_is_econnect_with_libpqs_reason(void **state)
{
    (void)state;
    pglock_client *c = NULL;
    int rc = pglock_client_open(
        &c, "host=127.0.0.1 port=1 connect_timeout=2 password=s3cret", NULL);
    assert_int_equal(rc, PGLOCK_ECONNECT);
    assert_non_null(c);
    assert_true(strlen(pglock_client_error(c)) > 0);
    assert_null(strchr(pglock_client_error(c), '\n'));
    assert_null(strstr(pglock_client_error(c), "s3cret"));
    assert_int_equal(pglock_client_socket(c), -1);
    pglock_key k;
    pglock_key_int64(&k, 1);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0), PGLOCK_ECONNLOST);
    pglock_client_close(c);
}

static void a_pooler_is_refused_for_session_locks(void **state)
{
    (void)state;
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_SESSION;
    pglock_client *c = NULL;
    int rc = pglock_client_open(&c, pooler, &o);
    assert_int_equal(rc, PGLOCK_EPOOLER);
    assert_non_null(strstr(pglock_client_error(c), "pooler"));
    pglock_key k;
    pglock_key_int64(&k, 1);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0), PGLOCK_ECONNLOST);
    pglock_client_close(c);
}

static void a_pooler_gets_no_session_settings(void **state)
{
    (void)state;
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = 4321;
    o.lifetime = PGLOCK_LIFETIME_SESSION;
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open(&c, pooler, &o), PGLOCK_EPOOLER);
    pglock_client_close(c);
    /* Every server connection behind the pooler: none got our lease. */
    PGconn *p = pt_connect(pooler);
    for (int i = 0; i < 5; i++)
        assert_int_equal(
            pt_query_intf(p, "SELECT current_setting("
                             "'idle_session_timeout')::interval = '4321ms'"),
            0);
    PQfinish(p);
}

static void a_standby_is_refused(void **state)
{
    (void)state;
    const char *standby = pt_env_or_skip("PGLOCK_TEST_STANDBY");
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open(&c, standby, NULL), PGLOCK_ESTANDBY);
    assert_non_null(strstr(pglock_client_error(c), "standby"));
    pglock_client_close(c);
}

static void a_full_lock_table_is_its_own_error(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    /* Open first, so that the lock call (not the open) meets the full
     * table: every run asserts the error. */
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open(&c, primary, NULL), 0);
    PGconn *filler = pt_connect(primary);
    /* Take lock-table slots, one subtransaction each, until the server
     * has none left (out of shared memory), and keep them all. */
    pt_execf(filler, "BEGIN");
    pt_execf(filler,
             "DO $$ DECLARE i int := 0; BEGIN LOOP i := i + 1;"
             " BEGIN PERFORM pg_advisory_xact_lock(800000000 + i);"
             " EXCEPTION WHEN out_of_memory THEN EXIT; END; END LOOP; END $$");
    pglock_key k;
    int64_t id = pt_unique_key();
    pglock_key_int64(&k, id);
    int rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 1000);
    assert_int_equal(rc, PGLOCK_ELOCKTABLE);
    assert_string_equal(pglock_client_sqlstate(c), "53200");
    assert_non_null(strstr(pglock_strerror(rc), "lock table"));
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
    pt_execf(filler, "ROLLBACK");
    /* Not held on the server either, and the client still works. */
    assert_true(pt_key_free(filler, id));
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pglock_client_close(c);
    PQfinish(filler);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exclusive_lock_blocks_another_session_until_unlocked),
        cmocka_unit_test(try_on_a_held_lock_is_busy_and_takes_nothing),
        cmocka_unit_test(shared_admits_shared_and_blocks_exclusive),
        cmocka_unit_test(pair_and_text_keys_are_the_sql_locks),
        cmocka_unit_test(hashtext_key_locks_what_sql_hashtext_locks),
        cmocka_unit_test(reentrant_lock_needs_as_many_unlocks),
        cmocka_unit_test(unlock_of_a_lock_not_held_says_why),
        cmocka_unit_test(unlock_all_frees_every_lock),
        cmocka_unit_test(close_frees_every_lock_before_it_returns),
        cmocka_unit_test(open_sets_the_lock_connection_settings),
        cmocka_unit_test(callers_own_keepalive_setting_wins),
        cmocka_unit_test(an_ordinary_role_gets_the_lease_and_locks),
        cmocka_unit_test(connect_failure_is_econnect_with_libpqs_reason),
        cmocka_unit_test(a_pooler_is_refused_for_session_locks),
        cmocka_unit_test(a_pooler_gets_no_session_settings),
        cmocka_unit_test(a_standby_is_refused),
        cmocka_unit_test(a_full_lock_table_is_its_own_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
