/*
 * Fencing tokens: pglock_fencing_token() on the caller's own connection
 * gives strictly increasing tokens, across connections too, and refuses a
 * connection inside a transaction; a client's tokens strictly increase
 * over successive acquisitions, also across an immediate-mode crash of
 * the server, and in xact hold they are taken outside the holding
 * transaction (which keeps no transaction id).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

static pglock_client *open_hold(const char *conninfo, pglock_lifetime hold)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = hold;
    return pt_open_client(conninfo, &o);
}

/* One acquisition of key k: lock, token, close.  Returns the token. */
static int64_t acquire_token(const char *conninfo, pglock_lifetime hold,
                             int64_t k)
{
    pglock_client *c = open_hold(conninfo, hold);
    pglock_key key;
    pglock_key_int64(&key, k);
    assert_int_equal(pglock_lock(c, &key, PGLOCK_EXCLUSIVE, 5000), 0);
    int64_t token = 0;
    int rc = pglock_client_fencing_token(c, &token, PGLOCK_WAIT_FOREVER);
    if (rc != 0)
        fail_msg("fencing token: %s", pglock_client_error(c));
    assert_int_equal(pglock_lock_count(c, &key, PGLOCK_EXCLUSIVE), 1);
    pglock_client_close(c);
    return token;
}

static void tokens_increase_across_an_immediate_crash(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pt_env_or_skip("PGLOCK_TEST_HARNESS");
    int64_t k = pt_unique_key();
    int64_t t1 = acquire_token(primary, PGLOCK_LIFETIME_SESSION, k);
    int64_t t2 = acquire_token(primary, PGLOCK_LIFETIME_SESSION, k);
    assert_true(t2 > t1);
    pt_harness("stop-primary immediate");
    pt_harness("start-primary");
    /* PgBouncer keeps its dead server connections until it next checks
     * them: have it drop them, so that later tests get live ones. */
    const char *admin = getenv("PGLOCK_TEST_POOLER_ADMIN");
    if (admin && *admin) {
        PGconn *a = PQconnectdb(admin);
        PQclear(PQexec(a, "RECONNECT"));
        PQfinish(a);
    }
    int64_t t3 = acquire_token(primary, PGLOCK_LIFETIME_SESSION, k);
    if (t3 <= t2)
        fail_msg("token %lld after the crash is not above %lld", (long long)t3,
                 (long long)t2);
    /* through the pooler too (it reconnects to the restarted server) */
    const char *pooler = getenv("PGLOCK_TEST_POOLER");
    if (pooler && *pooler) {
        int64_t t4 = acquire_token(pooler, PGLOCK_LIFETIME_XACT, k);
        assert_true(t4 > t3);
    }
}

static int64_t token_on(PGconn *conn)
{
    pglock_error err = {0};
    int64_t t = 0;
    int rc = pglock_fencing_token(conn, &t, 5000, -1, &err);
    if (rc != 0)
        fail_msg("pglock_fencing_token: %s: %s", pglock_err_name(rc),
                 err.message);
    assert_int_equal(PQtransactionStatus(conn), PQTRANS_IDLE);
    return t;
}

static void tokens_on_the_callers_connection_increase(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *a = pt_connect(primary), *b = pt_connect(primary);
    int64_t t1 = token_on(a), t2 = token_on(a), t3 = token_on(b),
            t4 = token_on(a);
    if (!(t1 < t2 && t2 < t3 && t3 < t4))
        fail_msg("tokens %lld %lld %lld %lld do not strictly increase",
                 (long long)t1, (long long)t2, (long long)t3, (long long)t4);
    /* committed: the server's next transaction id is past the token's
     * (its low 48 bits; the high ones are the timeline) */
    assert_true(pt_query_intf(b, "SELECT txid_current() > %lld",
                              (long long)(t4 & ((INT64_C(1) << 48) - 1))));
    assert_true(pt_query_intf(b,
                              "SELECT %lld >> 48 = ('x' || substr("
                              "pg_walfile_name(pg_current_wal_lsn()), 1, 8))"
                              "::bit(32)::bigint",
                              (long long)t4));
    /* never inside the caller's transaction, which it leaves alone */
    pglock_error err = {0};
    int64_t t = 0;
    pt_execf(a, "BEGIN");
    assert_int_equal(pglock_fencing_token(a, &t, 5000, -1, &err),
                     PGLOCK_ESTATE);
    assert_int_equal(err.code, PGLOCK_ESTATE);
    assert_int_equal(t, 0);
    assert_int_equal(PQtransactionStatus(a), PQTRANS_INTRANS);
    pt_execf(a, "COMMIT");
    assert_int_equal(pglock_fencing_token(NULL, &t, 5000, -1, &err),
                     PGLOCK_EINVAL);
    PQfinish(b);
    PQfinish(a);
}

static void xact_hold_tokens_leave_the_holding_transaction_without_xid(
    void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    pglock_client *c = open_hold(pooler, PGLOCK_LIFETIME_XACT);
    pglock_key key;
    pglock_key_int64(&key, pt_unique_key());
    assert_int_equal(pglock_lock(c, &key, PGLOCK_EXCLUSIVE, 5000), 0);
    int pid = pglock_client_backend_pid(c);
    int64_t a = 0, b = 0;
    assert_int_equal(pglock_client_fencing_token(c, &a, 5000), 0);
    assert_int_equal(pglock_client_fencing_token(c, &b, 5000), 0);
    assert_true(b > a);
    assert_int_equal(pt_backend_holds_no_xid(obs, pid), 1);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_false(pt_key_free(obs, key.id));
    pglock_client_close(c);
    assert_true(pt_key_free(obs, key.id));
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(tokens_on_the_callers_connection_increase),
        cmocka_unit_test(
            xact_hold_tokens_leave_the_holding_transaction_without_xid),
        cmocka_unit_test(tokens_increase_across_an_immediate_crash),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
