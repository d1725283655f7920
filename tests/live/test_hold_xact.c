/*
 * The client's xact hold: locks held inside one open transaction, so that
 * they pass PgBouncer in transaction mode.  Proves: auto picks the hold by
 * the pooler test; the lock really excludes a direct connection while the
 * pool is busy with other clients; nothing (lock or setting) leaks to the
 * pool's other clients; the transaction keeps no xid and no snapshot, so
 * VACUUM removes rows deleted meanwhile; a failed first acquire leaves no
 * transaction; the server's idle_in_transaction_session_timeout is the
 * lease; a DBA's idle_session_timeout does not end a direct client before
 * its first lock.
 */
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

static pglock_client *open_hold(const char *conninfo, pglock_lifetime hold,
                                long lease_ms)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = hold;
    o.lease_ms = lease_ms;
    return pt_open_client(conninfo, &o);
}

/* A client in xact hold (lease_ms, 0 for the default) on conninfo that
 * has taken the exclusive lock on bigint id (within 1 s); k is its key. */
static pglock_client *xact_holder(const char *conninfo, long lease_ms,
                                  int64_t id, pglock_key *k)
{
    pglock_client *c = open_hold(conninfo, PGLOCK_LIFETIME_XACT, lease_ms);
    pglock_key_int64(k, id);
    assert_int_equal(pglock_lock(c, k, PGLOCK_EXCLUSIVE, 1000), 0);
    return c;
}

/* Advisory locks on key k held by any backend of the server.  The key is
 * cast to int8: a literal below 2^31 is an int4, and an int4 shifted by 32
 * (the C shift of int4shr, which x86 takes modulo 32) is the key itself,
 * not 0, so such a key's classid would never match. */
static long holders_of(PGconn *obs, int64_t k)
{
    return pt_query_intf(obs,
                         "SELECT count(*) FROM pg_locks WHERE locktype ="
                         " 'advisory' AND classid = (((%lld)::int8 >> 32) &"
                         " 4294967295)::oid"
                         " AND objid = ((%lld)::int8 & 4294967295)::oid"
                         " AND objsubid = 1",
                         (long long)k, (long long)k);
}

/* pt_unique_key()s on both sides of 2^31, so that every run checks keys
 * that fit an int4 and keys with a high half (pt_unique_key() alone gives
 * the first only when this process's pid is below 2048). */
static int64_t small_unique_key(void)
{
    return pt_unique_key() & 0x7fffffff;
}

static int64_t big_unique_key(void)
{
    return pt_unique_key() | ((int64_t)1 << 40);
}

static void auto_hold_is_session_direct_and_xact_behind_a_pooler(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    pglock_client *d = open_hold(primary, PGLOCK_LIFETIME_AUTO, 0);
    assert_int_equal(pglock_client_lifetime(d), PGLOCK_LIFETIME_SESSION);
    assert_true(pglock_client_backend_pid(d) > 0);
    pglock_client_close(d);

    pglock_client *p = open_hold(pooler, PGLOCK_LIFETIME_AUTO, 0);
    assert_int_equal(pglock_client_lifetime(p), PGLOCK_LIFETIME_XACT);
    assert_int_equal(pglock_client_backend_pid(p), 0);
    pglock_client_close(p);

    /* the default is auto, as in the CLI; session insists */
    pglock_client *dflt = NULL;
    assert_int_equal(pglock_client_open(&dflt, pooler, NULL), 0);
    assert_int_equal(pglock_client_lifetime(dflt), PGLOCK_LIFETIME_XACT);
    pglock_client_close(dflt);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_SESSION;
    pglock_client *s = NULL;
    assert_int_equal(pglock_client_open(&s, pooler, &o), PGLOCK_EPOOLER);
    assert_non_null(strstr(pglock_client_error(s), "pooler"));
    pglock_client_close(s);
}

/* Other clients of the pool, busy all along, watching for our settings. */
typedef struct busy {
    const char *pooler;
    volatile int stop;
    volatile int queries;
    int leaks;
    char leaked[256];
} busy;

/* The settings pglock changes in its transaction, as another client sees
 * them: all must be the server's defaults (0). */
static const char seen_sql[] =
    "SELECT concat_ws(',', current_setting('idle_in_transaction_session_"
    "timeout'), current_setting('lock_timeout'),"
    " current_setting('statement_timeout'),"
    " current_setting('tcp_keepalives_idle'),"
    " current_setting('client_connection_check_interval'))";

static int seen_leak(PGconn *c, char *out, size_t len)
{
    PGresult *r = PQexec(c, seen_sql);
    int leak = 0;
    if (PQresultStatus(r) == PGRES_TUPLES_OK) {
        leak = strcmp(PQgetvalue(r, 0, 0), "0,0,0,0,0") != 0;
        if (leak)
            snprintf(out, len, "%s", PQgetvalue(r, 0, 0));
    }
    PQclear(r);
    return leak;
}

static void *busy_main(void *arg)
{
    busy *b = arg;
    PGconn *c[2] = {PQconnectdb(b->pooler), PQconnectdb(b->pooler)};
    while (!b->stop) {
        for (int i = 0; i < 2; i++) {
            PQclear(PQexec(c[i], "SELECT pg_sleep(0.002)"));
            b->leaks += seen_leak(c[i], b->leaked, sizeof b->leaked);
            b->queries++;
        }
    }
    PQfinish(c[0]);
    PQfinish(c[1]);
    return NULL;
}

/* The busy pool test's thread, client and observer, in its cmocka state:
 * a failed assertion leaves the test at once, and its teardown must still
 * stop the thread (which would go on writing into the test's dead stack
 * frame) and close the client (whose open transaction the next tests
 * would find). */
typedef struct pool_test {
    busy b;
    pthread_t thread;
    int running;
    pglock_client *c;
    PGconn *obs;
} pool_test;

static void stop_busy(pool_test *p)
{
    if (p->running) {
        p->b.stop = 1;
        pthread_join(p->thread, NULL);
        p->running = 0;
    }
}

static int pool_test_teardown(void **state)
{
    pool_test *p = *state;
    if (p) {
        stop_busy(p);
        pglock_client_close(p->c);
        PQfinish(p->obs);
        free(p);
    }
    *state = NULL;
    return 0;
}

static void xact_hold_through_a_busy_pooler_excludes_and_leaks_nothing(
    void **state)
{
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    pool_test *p = calloc(1, sizeof *p);
    assert_non_null(p);
    *state = p;
    PGconn *obs = p->obs = pt_connect(primary);
    busy *b = &p->b;
    b->pooler = pooler;
    assert_int_equal(pthread_create(&p->thread, NULL, busy_main, b), 0);
    p->running = 1;
    int64_t until = pt_now_ms() + 10000;
    while (b->queries < 4 && pt_now_ms() < until)
        usleep(2000);
    assert_true(b->queries >= 4);

    int64_t k1 = small_unique_key(), k2 = big_unique_key();
    pglock_key a, bk;
    pglock_key_int64(&a, k1);
    pglock_key_int64(&bk, k2);
    pglock_client *c = p->c = open_hold(pooler, PGLOCK_LIFETIME_XACT, 4000);
    assert_int_equal(pglock_lock(c, &a, PGLOCK_EXCLUSIVE, 5000), 0);
    int pid = pglock_client_backend_pid(c);
    assert_true(pid > 0);
    /* a direct connection cannot take it */
    assert_false(pt_key_free(obs, k1));
    assert_int_equal(holders_of(obs, k1), 1);
    assert_int_equal(pt_query_intf(obs,
                                   "SELECT count(*) FROM pg_locks WHERE"
                                   " pid = %d AND locktype = 'advisory'"
                                   " AND granted",
                                   pid),
                     1);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);

    /* a second lock inside the transaction; re-entrant counts */
    assert_int_equal(pglock_lock(c, &bk, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_lock(c, &a, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_int_equal(pglock_lock_count(c, &a, PGLOCK_EXCLUSIVE), 2);
    assert_int_equal(pglock_client_backend_pid(c), pid);
    assert_false(pt_key_free(obs, k2));
    assert_int_equal(pglock_unlock(c, &a, PGLOCK_EXCLUSIVE), 0);
    assert_false(pt_key_free(obs, k1));
    /* the last hold of one of two locks cannot go alone */
    assert_int_equal(pglock_unlock(c, &a, PGLOCK_EXCLUSIVE), PGLOCK_ESTATE);
    assert_non_null(strstr(pglock_client_error(c), "pglock_unlock_all"));
    assert_int_equal(pglock_lock_count(c, &a, PGLOCK_EXCLUSIVE), 1);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_int_equal(pglock_unlock_all(c), 0);
    assert_true(pt_key_free(obs, k1));
    assert_true(pt_key_free(obs, k2));
    assert_int_equal(pglock_client_backend_pid(c), 0);

    /* the unlock of the only lock ends the transaction */
    assert_int_equal(pglock_lock(c, &a, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_false(pt_key_free(obs, k1));
    assert_int_equal(pglock_unlock(c, &a, PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_key_free(obs, k1));

    /* close frees them at once, on every server backend */
    assert_int_equal(pglock_lock(c, &a, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_int_equal(pglock_lock(c, &bk, PGLOCK_SHARED, 1000), 0);
    assert_int_equal(holders_of(obs, k1), 1);
    assert_int_equal(holders_of(obs, k2), 1);
    pglock_client_close(c);
    p->c = NULL;
    assert_int_equal(holders_of(obs, k1), 0);
    assert_int_equal(holders_of(obs, k2), 0);

    stop_busy(p);
    assert_true(b->queries > 0);
    if (b->leaks)
        fail_msg("another client of the pool saw pglock's settings: %s",
                 b->leaked);
    /* and afterwards, on whichever server connection the pool lends */
    char leaked[256] = "";
    for (int i = 0; i < 12; i++) {
        PGconn *lent = pt_connect(pooler);
        if (seen_leak(lent, leaked, sizeof leaked))
            fail_msg("a setting leaked to the pool: %s", leaked);
        PQfinish(lent);
    }
}

/* VACUUM (VERBOSE)'s "tuples: N removed, M remain, K are dead but not yet
 * removable" line, from its INFO message (PostgreSQL 15 and newer); before
 * 15, "found N removable, M nonremovable row versions" and, in the DETAIL,
 * "K dead row versions cannot be removed yet". */
static void vacuum_notice(void *arg, const PGresult *res)
{
    long *out = arg;
    const char *m = PQresultErrorMessage(res);
    const char *t = strstr(m, "tuples: ");
    const char *old = strstr(m, "found ");
    const char *detail = PQresultErrorField(res, PG_DIAG_MESSAGE_DETAIL);
    long removed, remain, dead;
    if (t && sscanf(t, "tuples: %ld removed, %ld remain, %ld are dead",
                    &removed, &remain, &dead) == 3) {
        out[0] = removed;
        out[1] = dead;
    } else if (old && detail &&
               sscanf(old, "found %ld removable, %ld nonremovable", &removed,
                      &remain) == 2 &&
               sscanf(detail, "%ld dead row versions cannot be removed yet",
                      &dead) == 1) {
        out[0] = removed;
        out[1] = dead;
    }
}

/* Inserts 1000 rows, deletes them, vacuums: how many dead rows VACUUM
 * removed, and how many it had to keep (dead but not yet removable). */
static void vacuum_deleted_rows(PGconn *obs, long *removed, long *kept)
{
    /* static: a failed exec below leaves the receiver set, never pointing
     * into a dead stack frame */
    static long seen[2];
    seen[0] = seen[1] = -1;
    pt_execf(obs, "INSERT INTO pglock_vac SELECT generate_series(1, 1000)");
    pt_execf(obs, "DELETE FROM pglock_vac");
    PQnoticeReceiver old = PQsetNoticeReceiver(obs, vacuum_notice, seen);
    pt_execf(obs, "VACUUM (VERBOSE) pglock_vac");
    PQsetNoticeReceiver(obs, old, NULL);
    *removed = seen[0];
    *kept = seen[1];
}

/* Into out: the backends of the server with an xid or a snapshot, other
 * than obs's own ("pid state type xmin N xid N query", separated by
 * "; "), for a failure's message. */
static void xmin_holders(PGconn *obs, char *out, size_t len)
{
    PGresult *r = PQexec(obs, "SELECT string_agg(pid || ' ' || coalesce(state,"
                              " '') || ' ' || coalesce(backend_type, '') ||"
                              " ' xmin ' || coalesce(backend_xmin::text, '-')"
                              " || ' xid ' || coalesce(backend_xid::text, '-')"
                              " || ' ' || left(query, 60), '; ')"
                              " FROM pg_stat_activity WHERE pid <>"
                              " pg_backend_pid() AND (backend_xmin IS NOT NULL"
                              " OR backend_xid IS NOT NULL)");
    snprintf(out, len, "%s",
             PQresultStatus(r) == PGRES_TUPLES_OK && !PQgetisnull(r, 0, 0)
                 ? PQgetvalue(r, 0, 0)
                 : "none");
    PQclear(r);
}

static void xact_hold_keeps_no_xid_or_snapshot_and_vacuum_cleans(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    pglock_key k;
    pglock_client *c = xact_holder(pooler, 0, pt_unique_key(), &k);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    int pid = pglock_client_backend_pid(c);
    assert_int_equal(pt_query_intf(obs,
                                   "SELECT count(*) FROM pg_stat_activity"
                                   " WHERE pid = %d AND state = 'idle in"
                                   " transaction' AND backend_xid IS NULL"
                                   " AND backend_xmin IS NULL",
                                   pid),
                     1);

    /* rows deleted while the lock is held are removable: VACUUM removes
     * them all within 10 s.  Not at the first try: any snapshot of another
     * backend of this database holds them back too (an autovacuum worker's
     * ANALYZE of another suite's table, a backend of a suite before this
     * one still ending), and must be waited out; a snapshot of the hold's
     * own would hold them back for good. */
    pt_execf(obs, "DROP TABLE IF EXISTS pglock_vac");
    pt_execf(obs, "CREATE TABLE pglock_vac (x int) WITH"
                  " (autovacuum_enabled = off)");
    long removed = -1, kept = -1;
    char others[512] = "";
    int64_t until = pt_now_ms() + 10000;
    for (;;) {
        vacuum_deleted_rows(obs, &removed, &kept);
        /* a try that had to keep rows leaves them to the next */
        if ((removed >= 1000 && kept == 0) || pt_now_ms() > until)
            break;
        xmin_holders(obs, others, sizeof others);
        poll(NULL, 0, 100);
    }
    if (removed < 1000 || kept != 0) {
        pglock_client_close(c);
        fail_msg("VACUUM kept dead rows for 10 s (%ld removed, %ld kept);"
                 " the hold's backend %d; snapshots seen: %s",
                 removed, kept, pid, others);
    }
    assert_int_equal(pt_backend_holds_no_xid(obs, pid), 1);
    assert_false(pt_key_free(obs, k.id));

    /* control: an ordinary open snapshot does hold them back */
    PGconn *snap = pt_connect(primary);
    pt_execf(snap, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    pt_execf(snap, "SELECT 1");
    vacuum_deleted_rows(obs, &removed, &kept);
    assert_int_equal(removed, 0);
    assert_int_equal(kept, 1000);
    pt_execf(snap, "COMMIT");
    PQfinish(snap);
    pt_execf(obs, "DROP TABLE pglock_vac");
    pglock_client_close(c);
    PQfinish(obs);
}

static int no_backend_in_transaction(void *obs)
{
    return pt_query_intf(obs, "SELECT count(*) FROM pg_stat_activity WHERE"
                              " state LIKE 'idle in transaction%%'") == 0;
}

static void a_failed_first_acquire_leaves_no_transaction(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_key k;
    pglock_key_int64(&k, id);
    pglock_client *c = open_hold(pooler, PGLOCK_LIFETIME_XACT, 0);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_EBUSY);
    assert_int_equal(PQtransactionStatus(pglock_client_conn(c)), PQTRANS_IDLE);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 200),
                     PGLOCK_ETIMEDOUT);
    assert_int_equal(PQtransactionStatus(pglock_client_conn(c)), PQTRANS_IDLE);
    assert_int_equal(pglock_client_backend_pid(c), 0);
    /* no server backend of the pool is left in a transaction (within 5 s:
     * a backend of a suite before this one may still be ending; one that
     * pglock left would stay as long as the client is open) */
    assert_true(pt_wait_until(no_backend_in_transaction, holder, 5000));
    assert_int_equal(pt_query_intf(holder, "SELECT count(*) FROM pg_locks"
                                           " WHERE NOT granted"),
                     0);
    /* the client is still usable: once free, it takes the lock */
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_false(pt_key_free(holder, id));
    pglock_client_close(c);
    assert_true(pt_key_free(holder, id));
    PQfinish(holder);
}

static void the_servers_idle_in_transaction_timeout_is_the_lease(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_client *c = xact_holder(pooler, 1500, id, &k);
    int pid = pglock_client_backend_pid(c);
    assert_false(pt_key_free(obs, id));
    /* a silent client: the server ends the session, the lock is free */
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_true(pt_key_free(obs, id));
    /* and the client finds out */
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
    pglock_client_close(c);
    PQfinish(obs);
}

static void a_terminated_holder_backend_is_a_lost_lock(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    pglock_key k;
    pglock_client *c = xact_holder(pooler, 0, pt_unique_key(), &k);
    int pid = pglock_client_backend_pid(c);
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_int_equal(pglock_heartbeat(c, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 0), PGLOCK_ECONNLOST);
    pglock_client_close(c);
    PQfinish(obs);
}

/* A direct connection in xact hold: an idle_session_timeout the DBA set
 * (here 100 ms, through the startup options) no longer ends the session
 * between the open and the first lock: the client turned it off, and a
 * lock taken well after 100 ms is held.  (13 has no idle_session_timeout:
 * there the lock is taken without it.) */
static void a_dbas_idle_session_timeout_spares_the_xact_client(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int v14 = atoi(pt_env_or_skip("PGLOCK_TEST_SERVER_VERSION_NUM")) >= 140000;
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s%s", primary,
             v14 ? " options='-c idle_session_timeout=100'" : "");
    PGconn *obs = pt_connect(primary);
    pglock_client *c = open_hold(conninfo, PGLOCK_LIFETIME_XACT, 0);
    int pid = PQbackendPID(pglock_client_conn(c));
    if (v14)
        assert_int_equal(
            pt_query_intf(
                pglock_client_conn(c),
                "SELECT current_setting('idle_session_timeout')::interval = '0'"),
            1);
    /* Three times the DBA's timeout, idle: the session is still there. */
    int64_t idle_from = pglock_now_ms();
    while (pglock_now_ms() - idle_from < 300)
        poll(NULL, 0, 20);
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 1000), 0);
    assert_false(pt_key_free(obs, id));
    assert_int_equal(pglock_client_backend_pid(c), pid); /* the same one */
    pglock_client_close(c);
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(auto_hold_is_session_direct_and_xact_behind_a_pooler),
        cmocka_unit_test_teardown(
            xact_hold_through_a_busy_pooler_excludes_and_leaks_nothing,
            pool_test_teardown),
        cmocka_unit_test(xact_hold_keeps_no_xid_or_snapshot_and_vacuum_cleans),
        cmocka_unit_test(a_failed_first_acquire_leaves_no_transaction),
        cmocka_unit_test(the_servers_idle_in_transaction_timeout_is_the_lease),
        cmocka_unit_test(a_terminated_holder_backend_is_a_lost_lock),
        cmocka_unit_test(a_dbas_idle_session_timeout_spares_the_xact_client),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
