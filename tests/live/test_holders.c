/*
 * pglock_holders_list(): a scene of real sessions (an exclusive holder
 * with two waiters, two shared holders of a pair with an exclusive
 * waiter) read by the library, and compared row by row with pg_locks,
 * pg_stat_activity and pg_blocking_pids() as another session sees them;
 * and the session of a role dropped while it lives.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "support.h"

#define MAX_SESSIONS 6

typedef struct scene {
    int64_t big;    /* the bigint key */
    int32_t ns, id; /* the pair key */
    pglock_key keys[2];
    PGconn *s[MAX_SESSIONS]; /* holder, 2 waiters; 2 shared, 1 waiter */
    int n;
    PGconn *obs; /* the observer that asks */
} scene;

/* A session named app (application_name), which runs sql; wait: sql is
 * sent without waiting for it and the session must come to wait for an
 * advisory lock. */
static PGconn *session(scene *sc, const char *app, const char *sql, int wait)
{
    char conninfo[1024];
    snprintf(conninfo, sizeof conninfo, "%s application_name=%s",
             pt_env_or_skip("PGLOCK_TEST_PRIMARY"), app);
    PGconn *c = pt_connect(conninfo);
    sc->s[sc->n++] = c;
    if (!wait) {
        pt_exec_ok(c, sql);
        return c;
    }
    assert_int_equal(PQsendQuery(c, sql), 1);
    assert_true(pt_wait_backend_waiting(sc->obs, PQbackendPID(c), 10000));
    return c;
}

static int setup(void **state)
{
    scene *sc = calloc(1, sizeof *sc);
    sc->obs = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    sc->big = pt_unique_key();
    sc->ns = 7301;
    sc->id = (int32_t)(sc->big & 0x3FFFFFFF);
    pglock_key_int64(&sc->keys[0], sc->big);
    pglock_key_pair(&sc->keys[1], sc->ns, sc->id);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%lld)",
             (long long)sc->big);
    session(sc, "holders_h", sql, 0);
    session(sc, "holders_w1", sql, 1);
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock_shared(%lld)",
             (long long)sc->big);
    session(sc, "holders_w2", sql, 1);
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock_shared(%d, %d)", sc->ns,
             sc->id);
    session(sc, "holders_s1", sql, 0);
    session(sc, "holders_s2", sql, 0);
    snprintf(sql, sizeof sql, "SELECT pg_advisory_lock(%d, %d)", sc->ns,
             sc->id);
    session(sc, "holders_x", sql, 1);
    *state = sc;
    return 0;
}

static int teardown(void **state)
{
    scene *sc = *state;
    if (!sc)
        return 0;
    for (int i = 0; i < sc->n; i++)
        PQfinish(sc->s[i]);
    PQfinish(sc->obs);
    free(sc);
    return 0;
}

/* The pg_locks condition for e's lock, its session and its mode. */
static void where_of(const pglock_holder *e, char *buf, size_t len)
{
    uint32_t classid, objid;
    int objsubid;
    assert_int_equal(pglock_key_locktag(&e->key, &classid, &objid, &objsubid),
                     0);
    snprintf(buf, len,
             "classid = %u and objid = %u and objsubid = %d and pid = %d"
             " and granted = %s and mode = '%s'",
             classid, objid, objsubid, e->pid, e->granted ? "true" : "false",
             e->mode == PGLOCK_EXCLUSIVE ? "ExclusiveLock" : "ShareLock");
}

/* Every entry is one row of pg_locks, with its session's columns, and
 * pg_locks has no row for the keys that the list lacks. */
static void compare_with_pg_locks(scene *sc, const pglock_holders *list)
{
    int n = pglock_holders_count(list);
    assert_int_equal(n, 6);
    for (int i = 0; i < n; i++) {
        const pglock_holder *e = pglock_holders_get(list, i);
        char where[512];
        where_of(e, where, sizeof where);
        assert_int_equal(pt_count_advisory(sc->obs, where), 1);
        assert_string_equal(e->database, PQdb(sc->obs));
        assert_true(e->has_session);
        assert_false(e->hidden);
        assert_string_equal(e->user, PQuser(sc->obs));
        char sql[512];
        snprintf(sql, sizeof sql,
                 "SELECT count(*) FROM pg_stat_activity WHERE pid = %d"
                 " AND application_name = '%s' AND state = '%s'",
                 e->pid, e->application_name, e->state);
        assert_int_equal(pt_query_int(sc->obs, sql), 1);
        if (e->granted) {
            assert_true(e->held_max_s >= 0);
            assert_null(e->blocked_by);
        } else {
            /* pg_blocking_pids(), the same set in the same order */
            assert_true(e->waiting_s >= 0);
            if (PQserverVersion(sc->obs) >= 140000)
                assert_string_equal(e->waiting_source, "waitstart");
            char want[256] = "{", *p = want + 1;
            for (int b = 0; b < e->n_blocked_by; b++)
                p += snprintf(p, sizeof want - (size_t)(p - want), "%s%d",
                              b ? "," : "", e->blocked_by[b]);
            snprintf(p, sizeof want - (size_t)(p - want), "}");
            snprintf(sql, sizeof sql,
                     "SELECT (pg_blocking_pids(%d)::text = '%s')::int", e->pid,
                     want);
            assert_int_equal(pt_query_int(sc->obs, sql), 1);
        }
    }
    char where[256];
    snprintf(where, sizeof where,
             "(objsubid = 1 and classid = %u and objid = %u) or"
             " (objsubid = 2 and classid = %u and objid = %u)",
             (unsigned)((uint64_t)sc->big >> 32),
             (unsigned)(sc->big & 0xFFFFFFFF), (unsigned)sc->ns,
             (unsigned)sc->id);
    assert_int_equal(pt_count_advisory(sc->obs, where), n);
}

static void test_the_list_is_what_pg_locks_shows(void **state)
{
    scene *sc = *state;
    pglock_holders *list = NULL;
    pglock_error err = {0};
    assert_int_equal(
        pglock_holders_list(&list, sc->obs, sc->keys, 2, 0, 10000, &err), 0);
    compare_with_pg_locks(sc, list);
    pglock_holders_free(list);
}

static void test_entries_come_by_key_holders_first_waiters_in_queue_order(
    void **state)
{
    scene *sc = *state;
    pglock_holders *list = NULL;
    assert_int_equal(
        pglock_holders_list(&list, sc->obs, sc->keys, 2, 0, 10000, NULL), 0);
    const pglock_holder *e[6];
    for (int i = 0; i < 6; i++)
        e[i] = pglock_holders_get(list, i);
    assert_null(pglock_holders_get(list, 6));
    assert_null(pglock_holders_get(list, -1));
    /* the bigint: its holder, then w1 (exclusive) and w2 (shared) */
    assert_int_equal(e[0]->key.kind, PGLOCK_KEY_INT64);
    assert_true(e[0]->key.id == sc->big);
    assert_int_equal(e[0]->pid, PQbackendPID(sc->s[0]));
    assert_true(e[0]->granted);
    assert_int_equal(e[0]->mode, PGLOCK_EXCLUSIVE);
    assert_string_equal(e[0]->application_name, "holders_h");
    assert_int_equal(e[1]->pid, PQbackendPID(sc->s[1]));
    assert_false(e[1]->granted);
    assert_int_equal(e[1]->mode, PGLOCK_EXCLUSIVE);
    assert_int_equal(e[2]->pid, PQbackendPID(sc->s[2]));
    assert_int_equal(e[2]->mode, PGLOCK_SHARED);
    /* w1 waits for the holder; w2 for the holder and w1, ahead of it */
    assert_int_equal(e[1]->n_blocked_by, 1);
    assert_int_equal(e[1]->blocked_by[0], e[0]->pid);
    assert_int_equal(e[2]->n_blocked_by, 2);
    /* the pair: two shared holders, then the exclusive waiter */
    for (int i = 3; i < 6; i++) {
        assert_int_equal(e[i]->key.kind, PGLOCK_KEY_PAIR);
        assert_int_equal(e[i]->key.ns, sc->ns);
        assert_int_equal(e[i]->key.nsid, sc->id);
    }
    assert_true(e[3]->granted && e[4]->granted);
    assert_int_equal(e[3]->mode, PGLOCK_SHARED);
    assert_false(e[5]->granted);
    assert_int_equal(e[5]->mode, PGLOCK_EXCLUSIVE);
    assert_int_equal(e[5]->n_blocked_by, 2);
    pglock_holders_free(list);
}

static void test_every_lock_includes_the_scene(void **state)
{
    scene *sc = *state;
    pglock_holders *list = NULL;
    assert_int_equal(pglock_holders_list(&list, sc->obs, NULL, 0,
                                         PGLOCK_HOLDERS_ALL_DATABASES,
                                         PGLOCK_WAIT_FOREVER, NULL),
                     0);
    int ours = 0;
    for (int i = 0; i < pglock_holders_count(list); i++) {
        const pglock_holder *e = pglock_holders_get(list, i);
        for (int k = 0; k < 2; k++) {
            uint32_t c1, o1, c2, o2;
            int s1, s2;
            pglock_key_locktag(&e->key, &c1, &o1, &s1);
            pglock_key_locktag(&sc->keys[k], &c2, &o2, &s2);
            ours += c1 == c2 && o1 == o2 && s1 == s2;
        }
    }
    assert_int_equal(ours, 6);
    /* (other suites' sessions may come and go: not an exact count) */
    assert_true(pglock_holders_count(list) >= 6);
    pglock_holders_free(list);
}

static void test_a_key_nobody_holds_gives_an_empty_list(void **state)
{
    scene *sc = *state;
    pglock_key free_key;
    pglock_key_int64(&free_key, pt_unique_key());
    pglock_holders *list = NULL;
    assert_int_equal(
        pglock_holders_list(&list, sc->obs, &free_key, 1, 0, 10000, NULL), 0);
    assert_non_null(list);
    assert_int_equal(pglock_holders_count(list), 0);
    pglock_holders_free(list);
}

static void test_bad_arguments_are_einval(void **state)
{
    scene *sc = *state;
    pglock_holders *list = (pglock_holders *)1;
    pglock_error err = {0};
    pglock_key legacy;
    pglock_key_hashtext(&legacy, "not resolved");
    assert_int_equal(pglock_holders_list(&list, sc->obs, &legacy, 1, 0, 10000,
                                         &err),
                     PGLOCK_EINVAL);
    assert_null(list);
    assert_int_equal(err.code, PGLOCK_EINVAL);
    assert_int_equal(pglock_holders_list(&list, sc->obs, NULL, 1, 0, 10000,
                                         &err),
                     PGLOCK_EINVAL);
    assert_int_equal(pglock_holders_list(&list, sc->obs, NULL, 0, 0, 0, &err),
                     PGLOCK_EINVAL);
    assert_int_equal(pglock_holders_list(&list, NULL, NULL, 0, 0, 10000, &err),
                     PGLOCK_ECONNLOST);
    assert_int_equal(pglock_holders_count(NULL), 0);
    pglock_holders_free(NULL);
}

static void test_a_standby_is_estandby(void **state)
{
    (void)state;
    PGconn *standby = pt_connect(pt_env_or_skip("PGLOCK_TEST_STANDBY"));
    pglock_holders *list = NULL;
    pglock_error err = {0};
    assert_int_equal(pglock_holders_list(&list, standby, NULL, 0, 0, 10000,
                                         &err),
                     PGLOCK_ESTANDBY);
    assert_null(list);
    assert_non_null(strstr(err.message, "standby"));
    PQfinish(standby);
}

/* A role dropped while its session lives: the session's locks are still
 * listed, with the session, and the user reads as the server names a role
 * it no longer has. */
static void test_a_dropped_roles_session_still_shows(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *admin = pt_connect(primary);
    char role[64], conninfo[1024];
    snprintf(role, sizeof role, "pglock_dropped_%d", (int)getpid());
    pt_execf(admin, "CREATE ROLE %s LOGIN", role);
    snprintf(conninfo, sizeof conninfo,
             "%s user=%s application_name=holders_dropped", primary, role);
    PGconn *s = pt_connect(conninfo);
    int64_t key = pt_unique_key();
    pt_execf(s, "SELECT pg_advisory_lock(%lld)", (long long)key);
    pt_execf(admin, "DROP ROLE %s", role);

    pglock_key k;
    pglock_key_int64(&k, key);
    pglock_holders *list = NULL;
    assert_int_equal(pglock_holders_list(&list, admin, &k, 1, 0, 10000, NULL),
                     0);
    assert_int_equal(pglock_holders_count(list), 1);
    const pglock_holder *e = pglock_holders_get(list, 0);
    assert_int_equal(e->pid, PQbackendPID(s));
    assert_true(e->granted);
    assert_true(e->has_session);
    assert_string_equal(e->application_name, "holders_dropped");
    assert_non_null(e->user);
    assert_non_null(strstr(e->user, "unknown (OID="));
    pglock_holders_free(list);
    PQfinish(s);
    PQfinish(admin);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_the_list_is_what_pg_locks_shows,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_entries_come_by_key_holders_first_waiters_in_queue_order,
            setup, teardown),
        cmocka_unit_test_setup_teardown(test_every_lock_includes_the_scene,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(
            test_a_key_nobody_holds_gives_an_empty_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_arguments_are_einval, setup,
                                        teardown),
        cmocka_unit_test(test_a_standby_is_estandby),
        cmocka_unit_test(test_a_dropped_roles_session_still_shows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
