/*
 * The forced grant-at-cancel race (DESIGN.md): the holder runs
 * SELECT pg_advisory_unlock(k), pg_cancel_backend(<waiter>) so that the
 * server may grant the lock in the same instant the waiter's statement is
 * cancelled.  Whatever the outcome, what the library reports must be what
 * the server has — over many tries, for transaction locks (inside the
 * caller's transaction and begin+lock) and for a client holding its locks
 * in a transaction (xact hold, as `pglock run` does behind a pooler).
 * (test_wait.c covers session locks: there a grant is always "held".)
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include "support.h"

static int tries(void)
{
    const char *t = getenv("PGLOCK_TEST_RACE_TRIES");
    return t ? atoi(t) : 100;
}

typedef struct racer {
    PGconn *conn;            /* xact forms */
    pglock_client *client;   /* xact hold */
    int begin;               /* pglock_xact_begin_lock */
    pglock_key key;
    int rc;
} racer;

static void *race_main(void *arg)
{
    racer *r = arg;
    pglock_error err;
    pglock_error_init(&err, PGLOCK_ERROR_VERSION);
    if (r->client)
        r->rc = pglock_lock(r->client, &r->key, PGLOCK_EXCLUSIVE, 30000);
    else if (r->begin)
        r->rc = pglock_xact_begin_lock(r->conn, &r->key, PGLOCK_EXCLUSIVE,
                                       30000, NULL, &err);
    else
        r->rc = pglock_xact_lock(r->conn, &r->key, PGLOCK_EXCLUSIVE, 30000,
                                 NULL, &err);
    return NULL;
}

/* One forced race; returns 1 if the waiter reported the lock held. */
static int race_once(PGconn *holder, racer *r, int pid, int64_t id, int i)
{
    pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);
    pglock_key_int64(&r->key, id);
    pthread_t t;
    pthread_create(&t, NULL, race_main, r);
    if (!pt_wait_backend_waiting(holder, pid, 10000)) {
        pthread_join(t, NULL);
        fail_msg("try %d: backend %d never waited; the lock call returned "
                 "%s", i, pid, pglock_err_name(r->rc));
    }
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld), pg_cancel_backend(%d)",
             (long long)id, pid);
    pthread_join(t, NULL);
    int free_now = pt_key_free(holder, id);
    if ((r->rc == 0) == free_now)
        fail_msg("try %d: the library said %s but the lock is %s on the "
                 "server", i, r->rc == 0 ? "held" : pglock_err_name(r->rc),
                 free_now ? "free" : "held");
    if (r->rc != 0 && r->rc != PGLOCK_EINTR)
        fail_msg("try %d: unexpected %s", i, pglock_err_name(r->rc));
    return r->rc == 0;
}

static void xact_lock_reports_what_the_server_has(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    racer r = {.conn = pt_connect(primary)};
    int pid = PQbackendPID(r.conn), held = 0, n = tries();
    for (int i = 0; i < n; i++) {
        pt_exec_ok(r.conn, "BEGIN");
        held += race_once(holder, &r, pid, pt_unique_key(), i);
        /* held or not, the caller's transaction is usable */
        assert_int_equal(pt_query_int(r.conn, "SELECT 1"), 1);
        assert_int_equal(PQtransactionStatus(r.conn), PQTRANS_INTRANS);
        pt_exec_ok(r.conn, "COMMIT");
    }
    print_message("xact lock: %d of %d reported held\n", held, n);
    PQfinish(r.conn);
    PQfinish(holder);
}

static void begin_lock_reports_what_the_server_has(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    racer r = {.conn = pt_connect(primary), .begin = 1};
    int pid = PQbackendPID(r.conn), held = 0, n = tries();
    for (int i = 0; i < n; i++) {
        int got = race_once(holder, &r, pid, pt_unique_key(), i);
        held += got;
        /* held: inside the transaction; not: rolled back, idle */
        assert_int_equal(PQtransactionStatus(r.conn),
                         got ? PQTRANS_INTRANS : PQTRANS_IDLE);
        if (got)
            pt_exec_ok(r.conn, "COMMIT");
    }
    print_message("begin+lock: %d of %d reported held\n", held, n);
    PQfinish(r.conn);
    PQfinish(holder);
}

static void xact_hold_client_reports_what_the_server_has(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.hold = PGLOCK_HOLD_XACT;
    racer r = {.client = pt_open_client(primary, &o)};
    /* A direct connection: libpq's backend pid is the server's (the
     * client reports its backend only while it holds a lock). */
    int pid = PQbackendPID(pglock_client_conn(r.client)), held = 0;
    int n = tries();
    for (int i = 0; i < n; i++) {
        int got = race_once(holder, &r, pid, pt_unique_key(), i);
        held += got;
        assert_int_equal(pglock_held(r.client, &r.key, PGLOCK_EXCLUSIVE), got);
        if (got)
            assert_int_equal(pglock_unlock(r.client, &r.key, PGLOCK_EXCLUSIVE), 0);
        /* the client still holds nothing, and still works */
        assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    }
    print_message("xact hold: %d of %d reported held\n", held, n);
    pglock_client_close(r.client);
    PQfinish(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xact_lock_reports_what_the_server_has),
        cmocka_unit_test(begin_lock_reports_what_the_server_has),
        cmocka_unit_test(xact_hold_client_reports_what_the_server_has),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
