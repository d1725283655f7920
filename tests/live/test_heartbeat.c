/*
 * Heartbeat and round trips: a heartbeat confirms the client's locks
 * without reading pg_locks (same backend; in xact hold the same open,
 * unfailed transaction that still counts every lock statement), and
 * notices every way they go: terminate, restart, an error in the holding
 * transaction, ROLLBACK TO SAVEPOINT, a pooler restart; acquire and
 * release cost one round trip each, counted at the harness's proxy.  A
 * cancelled heartbeat in session hold is no loss: the session, its locks
 * and its connection stay, and only the client deadline decides.
 */
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "internal.h"
#include "support.h"

static void heartbeat_confirms_and_moves_confirmed_at(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_key k;
    pglock_client *c = pt_client_holding(primary, NULL, &k, NULL, NULL);
    int64_t before = pglock_now_ms();
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_true(pglock_client_confirmed_at(c) >= before);
    assert_true(pglock_client_confirmed_at(c) <= pglock_now_ms());

    /* the managed hold's two halves (internal), driven by poll() on the
     * client's socket */
    assert_int_equal(pglock__heartbeat_send(c), 0);
    assert_int_equal(pglock__heartbeat_send(c), PGLOCK_ESTATE);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0), PGLOCK_ESTATE);
    int rc;
    int64_t end = pt_now_ms() + 5000;
    while ((rc = pglock__heartbeat_poll(c)) == PGLOCK_EAGAIN &&
           pt_now_ms() < end) {
        struct pollfd p = {.fd = pglock_client_socket(c), .events = POLLIN};
        poll(&p, 1, 100);
    }
    assert_int_equal(rc, 0);

    /* one left in flight, as a timed-out pglock_heartbeat() leaves it:
     * the next pglock_heartbeat() takes its answer, then proves the lease
     * with a heartbeat of its own (sent later than the first) */
    assert_int_equal(pglock__heartbeat_send(c), 0);
    int64_t first_sent = pglock_now_ms();
    while (pglock_now_ms() == first_sent)
        ;
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_true(pglock_client_confirmed_at(c) > first_sent);
    pglock_client_close(c);
}

static void heartbeat_notices_a_terminated_backend(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_key k;
    int pid;
    pglock_client *c = pt_client_holding(primary, NULL, &k, NULL, &pid);
    PGconn *obs = pt_connect(primary);
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_client_socket(c), -1);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0), PGLOCK_ECONNLOST);
    PQfinish(obs);
    pglock_client_close(c);
}

typedef struct storm {
    const char *conninfo;
    int pid;
    volatile sig_atomic_t stop; /* the heartbeats saw a cancel */
    volatile sig_atomic_t done; /* 30 s of cancels and none landed */
} storm;

/* A cancel lands only while a heartbeat's query runs, a window a busy
 * machine makes rare: the storm lasts until one has landed, or 30 s. */
static void *storm_main(void *arg)
{
    storm *st = arg;
    long deadline = pt_now_ms() + 30000;
    while (!st->stop && pt_now_ms() < deadline)
        pt_cancel_storm(st->conninfo, st->pid, 300);
    st->done = 1;
    return NULL;
}

/* Heartbeats run while cancels storm the backend; the first one that
 * fails (cancelled) says ESERVER with the server's SQLSTATE, and leaves
 * the connection, the backend and the lock as they were, the lease
 * unconfirmed; once the storm is over the next heartbeat confirms. */
static void a_cancelled_heartbeat_is_no_loss_in_session_hold(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_key k;
    int64_t id;
    int pid;
    pglock_client *c = pt_client_holding(primary, NULL, &k, &id, &pid);
    PGconn *obs = pt_connect(primary);
    storm st = {primary, pid, 0, 0};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, storm_main, &st), 0);
    int rc = 0, beats = 0;
    int64_t confirmed = pglock_client_confirmed_at(c);
    while (rc == 0 && !st.done) {
        confirmed = pglock_client_confirmed_at(c);
        rc = pglock_heartbeat(c, 5000);
        beats++;
    }
    char why[512];
    snprintf(why, sizeof why, "%s", pglock_client_error(c));
    char sqlstate[6];
    snprintf(sqlstate, sizeof sqlstate, "%s", pglock_client_sqlstate(c));
    int sock = pglock_client_socket(c);
    int held = pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE);
    int64_t after = pglock_client_confirmed_at(c);
    int key_free = pt_key_free(obs, id);
    st.stop = 1;
    pthread_join(t, NULL);
    printf("# cancel storm: heartbeat %d failed with %d (%s)\n", beats, rc,
           why);
    assert_int_equal(rc, PGLOCK_ESERVER);
    assert_string_equal(sqlstate, "57014");
    assert_true(sock >= 0);
    assert_int_equal(held, 1);
    assert_true(after == confirmed); /* not confirmed by a failure */
    assert_int_equal(key_free, 0);
    assert_int_equal(pt_query_intf(obs,
                                   "SELECT count(*) FROM "
                                   "pg_stat_activity WHERE pid = %d",
                                   pid),
                     1);
    /* the storm is over: the same backend confirms again */
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_true(pglock_client_confirmed_at(c) > after);
    assert_int_equal(pt_key_free(obs, id), 0);
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    PQfinish(obs);
}

static pglock_options hold_opts(pglock_lifetime hold)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = hold;
    return o;
}

static pglock_client *open_hold(const char *conninfo, pglock_lifetime hold)
{
    pglock_options o = hold_opts(hold);
    return pt_open_client(conninfo, &o);
}

/* The heartbeat never reads pg_locks, whose cost grows with every lock on
 * the server: with pg_locks locked by another session (a reader of the
 * view would wait), it still answers, in both lifetimes. */
static void heartbeat_reads_no_pg_locks(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *s = open_hold(primary, PGLOCK_LIFETIME_SESSION);
    pglock_client *x = open_hold(primary, PGLOCK_LIFETIME_XACT);
    PGconn *blocker = pt_connect(primary), *reader = pt_connect(primary);
    pglock_key k1, k2;
    pglock_key_int64(&k1, pt_unique_key());
    pglock_key_int64(&k2, pt_unique_key());
    assert_int_equal(pglock_lock(s, &k1, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(x, &k2, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_exec_ok(blocker, "BEGIN");
    pt_exec_ok(blocker, "LOCK TABLE pg_catalog.pg_locks IN ACCESS EXCLUSIVE "
                        "MODE");
    /* a reader of pg_locks does wait now */
    pt_exec_ok(reader, "SET lock_timeout = 200");
    PGresult *r = PQexec(reader, "SELECT count(*) FROM pg_locks");
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), "55P03");
    PQclear(r);
    assert_int_equal(pglock_heartbeat(s, 3000), 0);
    assert_int_equal(pglock_heartbeat(x, 3000), 0);
    pt_exec_ok(blocker, "COMMIT");
    PQfinish(reader);
    PQfinish(blocker);
    pglock_client_close(x);
    pglock_client_close(s);
}

/* A server restart ends the session: the heartbeat reports the loss. */
static void heartbeat_notices_a_restart(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pt_env_or_skip("PGLOCK_TEST_HARNESS");
    pglock_client *s = open_hold(primary, PGLOCK_LIFETIME_SESSION);
    pglock_client *x = open_hold(primary, PGLOCK_LIFETIME_XACT);
    pglock_key k1, k2;
    pglock_key_int64(&k1, pt_unique_key());
    pglock_key_int64(&k2, pt_unique_key());
    assert_int_equal(pglock_lock(s, &k1, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(x, &k2, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_harness("restart-primary");
    assert_int_equal(pglock_heartbeat(s, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_heartbeat(x, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_lock_count(s, &k1, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_lock_count(x, &k2, PGLOCK_EXCLUSIVE), 0);
    pglock_client_close(x);
    pglock_client_close(s);
}

/* Xact hold: an error in the holding transaction's heartbeat savepoint
 * (a stray statement) keeps the locks, but the heartbeat cannot tell it
 * from one that aborted the transaction, so it declares the loss and
 * closes the connection; one after the savepoint was released frees the
 * locks at once, before any ROLLBACK, and is a loss too. */
static void heartbeat_notices_an_error_in_the_holding_transaction(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_options o = hold_opts(PGLOCK_LIFETIME_XACT);
    int64_t id;
    pglock_client *c = pt_client_holding(primary, &o, NULL, &id, NULL);
    PGconn *obs = pt_connect(primary);
    assert_false(pt_key_free(obs, id));
    /* a stray statement on the client's connection fails */
    PQclear(PQexec(pglock_client_conn(c), "SELECT 1/0"));
    assert_int_equal(PQtransactionStatus(pglock_client_conn(c)),
                     PQTRANS_INERROR);
    assert_false(pt_key_free(obs, id)); /* only the savepoint failed */
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_non_null(strstr(pglock_client_error(c), "failed"));
    /* the connection is closed: the server frees the lock as its backend
     * exits, a moment later */
    assert_true(pt_wait_key_free(obs, id, 5000));
    pglock_client_close(c);
    c = pt_client_holding(primary, &o, NULL, &id, NULL);
    PQclear(PQexec(pglock_client_conn(c), "RELEASE SAVEPOINT pglock_beat;"
                                          " SELECT 1/0"));
    assert_true(pt_key_free(obs, id)); /* free already, no ROLLBACK yet */
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_non_null(strstr(pglock_client_error(c), "failed"));
    PQfinish(obs);
    pglock_client_close(c);
}

/* Xact hold: ROLLBACK TO a savepoint frees the locks taken after it (even
 * by statements whose own savepoint was released) and keeps the earlier
 * ones; the heartbeat sees it.  A rollback that undoes no lock, and a busy
 * try, are no loss. */
static void heartbeat_notices_a_rollback_to_savepoint(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = open_hold(primary, PGLOCK_LIFETIME_XACT);
    PGconn *obs = pt_connect(primary), *other = pt_connect(primary);
    PGconn *conn = pglock_client_conn(c);
    int64_t id1 = pt_unique_key(), id2 = pt_unique_key();
    int64_t busy_id = pt_unique_key();
    pglock_key k1, k2, busy;
    pglock_key_int64(&k1, id1);
    pglock_key_int64(&k2, id2);
    pglock_key_int64(&busy, busy_id);
    assert_int_equal(pglock_lock(c, &k1, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_execf(other, "SELECT pg_advisory_lock(%lld)", (long long)busy_id);
    assert_int_equal(pglock_lock(c, &busy, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_EBUSY);
    pt_exec_ok(conn, "SAVEPOINT later");
    pt_exec_ok(conn, "ROLLBACK TO SAVEPOINT later");
    assert_int_equal(pglock_heartbeat(c, 5000), 0);

    pt_exec_ok(conn, "SAVEPOINT before_k2");
    assert_int_equal(pglock_lock(c, &k2, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_false(pt_key_free(obs, id2));
    pt_exec_ok(conn, "ROLLBACK TO SAVEPOINT before_k2");
    assert_true(pt_key_free(obs, id2));  /* gone, transaction still open */
    assert_false(pt_key_free(obs, id1)); /* taken before: kept */
    assert_int_equal(PQtransactionStatus(conn), PQTRANS_INTRANS);
    int pid = pglock_client_backend_pid(c);
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_non_null(strstr(pglock_client_error(c), "savepoint"));
    /* the connection was closed, and the rest freed with it */
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_true(pt_key_free(obs, id1));
    PQfinish(other);
    PQfinish(obs);
    pglock_client_close(c);
}

/* Xact hold: a lock undone by ROLLBACK TO SAVEPOINT stays noticed after
 * the client takes another lock in the same transaction (the server
 * counts up from its own count, so it stays one short). */
static void a_rolled_back_lock_stays_noticed_after_a_later_lock(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = open_hold(primary, PGLOCK_LIFETIME_XACT);
    PGconn *obs = pt_connect(primary);
    PGconn *conn = pglock_client_conn(c);
    int64_t id1 = pt_unique_key(), id2 = pt_unique_key(), id3 = pt_unique_key();
    pglock_key k1, k2, k3;
    pglock_key_int64(&k1, id1);
    pglock_key_int64(&k2, id2);
    pglock_key_int64(&k3, id3);
    assert_int_equal(pglock_lock(c, &k1, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_exec_ok(conn, "SAVEPOINT before_k2");
    assert_int_equal(pglock_lock(c, &k2, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pt_exec_ok(conn, "ROLLBACK TO SAVEPOINT before_k2");
    assert_true(pt_key_free(obs, id2));
    assert_int_equal(pglock_lock(c, &k3, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_non_null(strstr(pglock_client_error(c), "savepoint"));
    PQfinish(obs);
    pglock_client_close(c);
}

/* Xact hold through PgBouncer (transaction mode): the pool's RECONNECT
 * cannot take the holding transaction's backend away (PgBouncer closes a
 * server connection only once it is released, at the transaction's end),
 * so the heartbeat confirms and the lock stays; a pooler restart closes
 * the client's connection and the server connection with it: the
 * heartbeat reports the loss and the lock is free. */
static void heartbeat_through_a_pooler_reconnect_and_restart(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    const char *admin = pt_env_or_skip("PGLOCK_TEST_POOLER_ADMIN");
    pt_env_or_skip("PGLOCK_TEST_HARNESS");
    pglock_client *c = open_hold(pooler, PGLOCK_LIFETIME_XACT);
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    int pid = pglock_client_backend_pid(c);
    PGconn *a = pt_connect(admin);
    PQclear(PQexec(a, "RECONNECT"));
    PQfinish(a);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_int_equal(pglock_client_backend_pid(c), pid);
    assert_false(pt_key_free(obs, id));

    pt_harness("restart-pooler");
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_true(pt_key_free(obs, id));
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
            assert_int_equal(
                pglock_lock(c, keys[i], PGLOCK_EXCLUSIVE, timeouts[t]), 0);
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

static void close_client(void *c)
{
    pglock_client_close(c);
}

/* A heartbeat left in flight on a cut network: close gives up on its
 * answer within its budget and returns (it is not timed here: it fails
 * only if close never returns), and the server frees the lock once the
 * session is gone. */
static void close_returns_on_a_cut_network_with_a_heartbeat_in_flight(
    void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(proxy, NULL);
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    int pid = pglock_client_backend_pid(c);
    pt_proxy_cut();
    assert_int_equal(pglock__heartbeat_send(c), 0);
    long took = pt_call_on_cut_network(close_client, c, 30000);
    if (took < 0)
        fail_msg("pglock_client_close() did not return on a cut network");
    printf("# close with a heartbeat in flight on a cut network: %ld ms\n",
           took);
    assert_true(pt_wait_backend_gone(obs, pid, 30000));
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(heartbeat_confirms_and_moves_confirmed_at),
        cmocka_unit_test(heartbeat_notices_a_terminated_backend),
        cmocka_unit_test(a_cancelled_heartbeat_is_no_loss_in_session_hold),
        cmocka_unit_test(heartbeat_reads_no_pg_locks),
        cmocka_unit_test(heartbeat_notices_a_restart),
        cmocka_unit_test(heartbeat_notices_an_error_in_the_holding_transaction),
        cmocka_unit_test(heartbeat_notices_a_rollback_to_savepoint),
        cmocka_unit_test(a_rolled_back_lock_stays_noticed_after_a_later_lock),
        cmocka_unit_test(heartbeat_through_a_pooler_reconnect_and_restart),
        cmocka_unit_test(acquire_and_release_are_one_round_trip_each),
        cmocka_unit_test(a_lease_ends_a_silent_session_on_the_server),
        cmocka_unit_test(
            close_returns_on_a_cut_network_with_a_heartbeat_in_flight),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
