/*
 * The forced grant-at-cancel race (pglock(3), "Session locks"): the holder runs
 * SELECT pg_advisory_unlock(k), pg_cancel_backend(<waiter>) so that the
 * server may grant the lock in the same instant the waiter's statement is
 * cancelled.  Whatever the outcome, what the library reports must be what
 * the server has — over many tries, for transaction locks (inside the
 * caller's transaction and begin+lock) and for a client holding its locks
 * in a transaction (xact hold, as `pglock run` does behind a pooler).
 * (test_wait.c covers session locks: there a grant is always "held".)
 *
 * For session locks, the check after a failed wait (pg_locks, lock.c)
 * for every key form and mode: a timeout takes nothing and says so; a
 * grant at cancel is reported held, counted under the key's own
 * coordinates (a legacy key resolved by the check) and released by
 * pglock_unlock().
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

static int tries(void)
{
    const char *t = getenv("PGLOCK_TEST_RACE_TRIES");
    return t ? atoi(t) : 100;
}

typedef struct racer {
    PGconn *conn;          /* xact forms */
    pglock_client *client; /* xact hold */
    int begin;             /* pglock_xact_begin_lock */
    pglock_key key;
    int rc;
} racer;

static void *race_main(void *arg)
{
    racer *r = arg;
    pglock_error err = {0};
    if (r->client)
        r->rc = pglock_lock(r->client, &r->key, PGLOCK_EXCLUSIVE, 30000);
    else if (r->begin)
        r->rc = pglock_xact_begin_lock(r->conn, &r->key, PGLOCK_EXCLUSIVE,
                                       30000, -1, &err);
    else
        r->rc = pglock_xact_lock(r->conn, &r->key, PGLOCK_EXCLUSIVE, 30000, -1,
                                 &err);
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
                 "%s",
                 i, pid, pglock_err_name(r->rc));
    }
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld), pg_cancel_backend(%d)",
             (long long)id, pid);
    pthread_join(t, NULL);
    int free_now = pt_key_free(holder, id);
    if ((r->rc == 0) == free_now)
        fail_msg("try %d: the library said %s but the lock is %s on the "
                 "server",
                 i, r->rc == 0 ? "held" : pglock_err_name(r->rc),
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
    o.lifetime = PGLOCK_LIFETIME_XACT;
    racer r = {.client = pt_open_client(primary, &o)};
    /* A direct connection: libpq's backend pid is the server's (the
     * client reports its backend only while it holds a lock). */
    int pid = PQbackendPID(pglock_client_conn(r.client)), held = 0;
    int n = tries();
    for (int i = 0; i < n; i++) {
        int got = race_once(holder, &r, pid, pt_unique_key(), i);
        held += got;
        assert_int_equal(pglock_lock_count(r.client, &r.key, PGLOCK_EXCLUSIVE),
                         got);
        if (got)
            assert_int_equal(pglock_unlock(r.client, &r.key, PGLOCK_EXCLUSIVE),
                             0);
        /* the client still holds nothing, and still works */
        assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    }
    print_message("xact hold: %d of %d reported held\n", held, n);
    pglock_client_close(r.client);
    PQfinish(holder);
}

/* A session-lock key form: the client's key and the same lock's argument
 * in SQL, for the holder. */
typedef struct key_form {
    pglock_key key;
    pglock_mode mode;
    char sql[96];
} key_form;

/* The forms, each on a fresh lock: a negative pair (its classid above
 * 2^31), hashtext and hashtextextended (legacy: the check resolves them),
 * a text key and a shared bigint. */
static int key_forms(key_form *f, char names[][40])
{
    int64_t u = pt_unique_key();
    int32_t ns = -(int32_t)(u % 1000000) - 1;
    memset(f, 0, 5 * sizeof *f);
    pglock_key_pair(&f[0].key, ns, 9);
    snprintf(f[0].sql, sizeof f[0].sql, "%d, 9", ns);
    snprintf(names[1], 40, "grant-race:%lld", (long long)u);
    pglock_key_hashtext(&f[1].key, names[1]);
    snprintf(f[1].sql, sizeof f[1].sql, "hashtext('%s')", names[1]);
    snprintf(names[2], 40, "grant-race-x:%lld", (long long)u);
    pglock_key_hashtextextended(&f[2].key, names[2], -7);
    snprintf(f[2].sql, sizeof f[2].sql, "hashtextextended('%s', -7)", names[2]);
    snprintf(names[3], 40, "grant-race-t:%lld", (long long)u);
    pglock_key_text(&f[3].key, names[3]);
    snprintf(f[3].sql, sizeof f[3].sql, "%lld", (long long)f[3].key.id);
    int64_t id = pt_unique_key();
    pglock_key_int64(&f[4].key, id);
    snprintf(f[4].sql, sizeof f[4].sql, "%lld", (long long)id);
    f[4].mode = PGLOCK_SHARED;
    return 5;
}

typedef struct session_waiter {
    pglock_client *c;
    key_form *form;
    long timeout_ms;
    int rc;
} session_waiter;

static void *session_wait_main(void *arg)
{
    session_waiter *w = arg;
    w->rc = pglock_lock(w->c, &w->form->key, w->form->mode, w->timeout_ms);
    return NULL;
}

static void a_timed_out_session_wait_takes_nothing_in_any_form(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    pglock_client *c = pt_open_client(primary, NULL);
    int pid = pglock_client_backend_pid(c);
    key_form f[5];
    char names[5][40];
    int n = key_forms(f, names);
    for (int i = 0; i < n; i++) {
        pt_execf(holder, "SELECT pg_advisory_lock(%s)", f[i].sql);
        int rc = pglock_lock(c, &f[i].key, f[i].mode, 200);
        if (rc != PGLOCK_ETIMEDOUT)
            fail_msg("form %d: %s (%s)", i, pglock_err_name(rc),
                     pglock_client_error(c));
        assert_string_equal(pglock_client_sqlstate(c), "55P03");
        assert_non_null(strstr(pglock_client_error(c), "timed out"));
        assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
        assert_int_equal(pglock_lock_count(c, &f[i].key, f[i].mode), 0);
        /* the client still works, on the same lock */
        pt_execf(holder, "SELECT pg_advisory_unlock(%s)", f[i].sql);
        assert_int_equal(pglock_lock(c, &f[i].key, f[i].mode, 1000), 0);
        assert_int_equal(pt_backend_advisory_granted(holder, pid), 1);
        assert_int_equal(pglock_unlock(c, &f[i].key, f[i].mode), 0);
        assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    }
    pglock_client_close(c);
    PQfinish(holder);
}

static void a_session_grant_at_cancel_is_held_in_any_form(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    PGconn *obs = pt_connect(primary);
    pglock_client *c = pt_open_client(primary, NULL);
    int pid = pglock_client_backend_pid(c), n = tries() / 4 + 1;
    for (int t = 0; t < n; t++) {
        key_form f[5];
        char names[5][40];
        int forms = key_forms(f, names);
        for (int i = 0; i < forms; i++) {
            pt_execf(holder, "SELECT pg_advisory_lock(%s)", f[i].sql);
            session_waiter w = {.c = c, .form = &f[i], .timeout_ms = 30000};
            pthread_t th;
            pthread_create(&th, NULL, session_wait_main, &w);
            if (!pt_wait_backend_waiting(obs, pid, 10000)) {
                pthread_join(th, NULL);
                fail_msg("try %d form %d: never waited (%s)", t, i,
                         pglock_err_name(w.rc));
            }
            pt_execf(holder,
                     "SELECT pg_advisory_unlock(%s),"
                     " pg_cancel_backend(%d)",
                     f[i].sql, pid);
            pthread_join(th, NULL);
            /* the grant came first: held, whatever error the cancel made */
            if (w.rc != 0)
                fail_msg("try %d form %d: %s (%s)", t, i, pglock_err_name(w.rc),
                         pglock_client_error(c));
            assert_int_equal(pt_backend_advisory_granted(obs, pid), 1);
            assert_int_equal(pglock_lock_count(c, &f[i].key, f[i].mode), 1);
            assert_int_equal(pglock_unlock(c, &f[i].key, f[i].mode), 0);
            assert_int_equal(pt_backend_advisory_granted(obs, pid), 0);
        }
    }
    pglock_client_close(c);
    PQfinish(obs);
    PQfinish(holder);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(xact_lock_reports_what_the_server_has),
        cmocka_unit_test(begin_lock_reports_what_the_server_has),
        cmocka_unit_test(xact_hold_client_reports_what_the_server_has),
        cmocka_unit_test(a_timed_out_session_wait_takes_nothing_in_any_form),
        cmocka_unit_test(a_session_grant_at_cancel_is_held_in_any_form),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
