/*
 * pglock_lock_any(): any one free key of a set in one statement, never
 * more than one, counted like pglock_lock(); each effect observed from a
 * second connection.  In xact hold through PgBouncer (transaction mode)
 * too: the key is a transaction lock of the holding transaction, which
 * the heartbeat vouches for, and nothing outlives the client.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

#define NKEYS 4

static void make_keys(pglock_key *keys, int64_t *ids)
{
    for (int i = 0; i < NKEYS; i++) {
        ids[i] = pt_unique_key();
        pglock_key_int64(&keys[i], ids[i]);
    }
}

static void takes_exactly_one_free_key_or_none(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    pglock_key keys[NKEYS];
    int64_t ids[NKEYS];
    make_keys(keys, ids);
    pt_execf(obs, "SELECT pg_advisory_lock(%lld), pg_advisory_lock(%lld)",
             (long long)ids[0], (long long)ids[2]);

    pglock_client *a = pt_open_client(primary, NULL);
    pglock_client *b = pt_open_client(primary, NULL);
    pglock_client *c = pt_open_client(primary, NULL);
    int index = 99;
    /* every other key is free: the first free one, and only it */
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 1);
    assert_int_equal(
        pt_backend_advisory_granted(obs, pglock_client_backend_pid(a)), 1);
    assert_false(pt_key_free(obs, ids[1]));
    assert_true(pt_key_free(obs, ids[3]));
    assert_int_equal(pglock_lock_count(a, &keys[1], PGLOCK_EXCLUSIVE), 1);

    assert_int_equal(pglock_lock_any(b, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 3);
    assert_int_equal(
        pt_backend_advisory_granted(obs, pglock_client_backend_pid(b)), 1);

    /* none left: busy, nothing taken */
    assert_int_equal(pglock_lock_any(c, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_EBUSY);
    assert_int_equal(index, -1);
    assert_int_equal(
        pt_backend_advisory_granted(obs, pglock_client_backend_pid(c)), 0);

    /* a freed key is the next one's */
    assert_int_equal(pglock_unlock(a, &keys[1], PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_lock_any(c, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 1);

    pglock_client_close(a);
    pglock_client_close(b);
    pglock_client_close(c);
    PQfinish(obs);
}

static void the_key_taken_is_heartbeaten_and_released_like_any(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    pglock_key keys[NKEYS];
    int64_t ids[NKEYS];
    make_keys(keys, ids);
    pglock_client *a = pt_open_client(primary, NULL);
    int index = -1;
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 0);
    assert_int_equal(pglock_heartbeat(a, 5000), 0);
    /* a second call may not count a key it holds again */
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_ESTATE);
    assert_int_equal(
        pt_backend_advisory_granted(obs, pglock_client_backend_pid(a)), 1);
    /* the server ends the session: the next heartbeat says so */
    pt_execf(obs, "SELECT pg_terminate_backend(%d)",
             pglock_client_backend_pid(a));
    assert_int_equal(
        pt_wait_backend_gone(obs, pglock_client_backend_pid(a), 5000), 1);
    assert_int_equal(pglock_heartbeat(a, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_lock_count(a, &keys[0], PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_key_free(obs, ids[0]));
    pglock_client_close(a);
    PQfinish(obs);
}

static void bad_sets_are_einval_and_take_nothing(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    pglock_client *a = pt_open_client(primary, NULL);
    pglock_key keys[2];
    int index = 0;
    pglock_key_int64(&keys[0], pt_unique_key());
    pglock_key_pair(&keys[1], 7, 9);
    assert_int_equal(pglock_lock_any(a, keys, 2, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_EINVAL);
    assert_int_equal(pglock_lock_any(a, keys, 0, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_EINVAL);
    assert_int_equal(pglock_lock_any(a, keys, 1, PGLOCK_EXCLUSIVE, NULL),
                     PGLOCK_EINVAL);
    assert_int_equal(pglock_lock_any(a, keys, PGLOCK_LOCK_ANY_MAX + 1,
                                     PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_EINVAL);
    assert_int_equal(
        pt_backend_advisory_granted(obs, pglock_client_backend_pid(a)), 0);
    pglock_client_close(a);
    PQfinish(obs);
}

/* Sessions of the server idle in an open transaction. */
static long idle_in_xact(PGconn *obs)
{
    return pt_query_int(obs, "SELECT count(*) FROM pg_stat_activity WHERE"
                             " state LIKE 'idle in transaction%'");
}

static pglock_client *pooled_client(const char *pooler)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_AUTO; /* what pglock run does */
    pglock_client *c = pt_open_client(pooler, &o);
    assert_int_equal(pglock_client_lifetime(c), PGLOCK_LIFETIME_XACT);
    return c;
}

/* For pt_wait_until: no advisory lock granted on the server.  Waited for,
 * boundedly, after a test closes its clients: a backend whose client has
 * gone (a pooled one's, or an earlier test's) lets go of its locks when it
 * gets round to it, not when close() returns. */
static int no_advisory_lock_granted(void *obs)
{
    return pt_count_advisory(obs, "granted") == 0;
}

static void through_a_pooler_it_takes_one_key_in_the_holding_transaction(
    void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    pglock_key keys[NKEYS], more[NKEYS];
    int64_t ids[NKEYS], more_ids[NKEYS];
    make_keys(keys, ids);
    make_keys(more, more_ids);
    pt_execf(obs, "SELECT pg_advisory_lock(%lld), pg_advisory_lock(%lld)",
             (long long)ids[0], (long long)ids[2]);
    long idle_before = idle_in_xact(obs);

    /* two pooled clients: two server connections of the pool's three */
    pglock_client *a = pooled_client(pooler);
    pglock_client *b = pooled_client(pooler);
    int index = 99;
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 1);
    int pid_a = pglock_client_backend_pid(a);
    assert_true(pid_a > 0);
    assert_int_equal(pt_backend_advisory_granted(obs, pid_a), 1);
    assert_false(pt_key_free(obs, ids[1]));
    assert_true(pt_key_free(obs, ids[3]));
    assert_int_equal(pglock_lock_count(a, &keys[1], PGLOCK_EXCLUSIVE), 1);
    assert_int_equal(pglock_heartbeat(a, 5000), 0);

    /* the other free key goes to the second; then none is left, and a
     * busy first statement leaves no transaction open */
    assert_int_equal(pglock_lock_any(b, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 3);
    int pid_b = pglock_client_backend_pid(b);
    assert_int_equal(pt_backend_advisory_granted(obs, pid_b), 1);
    pglock_client *c = pooled_client(pooler);
    assert_int_equal(pglock_lock_any(c, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_EBUSY);
    assert_int_equal(index, -1);
    assert_int_equal(pglock_client_backend_pid(c), 0);
    assert_int_equal(idle_in_xact(obs), idle_before + 2);
    pglock_client_close(c);

    /* inside the transaction: a second set, then a busy one; each
     * statement counted, so the heartbeat still vouches for all */
    assert_int_equal(pglock_lock_any(a, more, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 0);
    assert_int_equal(pglock_client_backend_pid(a), pid_a);
    assert_int_equal(pt_backend_advisory_granted(obs, pid_a), 2);
    pt_execf(obs,
             "SELECT pg_advisory_lock(%lld), pg_advisory_lock(%lld),"
             " pg_advisory_lock(%lld)",
             (long long)more_ids[1], (long long)more_ids[2],
             (long long)more_ids[3]);
    assert_int_equal(pglock_lock_any(a, more + 1, NKEYS - 1, PGLOCK_EXCLUSIVE,
                                     &index),
                     PGLOCK_EBUSY);
    assert_int_equal(pglock_heartbeat(a, 5000), 0);
    assert_int_equal(pt_backend_advisory_granted(obs, pid_a), 2);

    /* the set's keys go with the transaction */
    assert_int_equal(pglock_unlock_all(a), 0);
    assert_true(pt_key_free(obs, ids[1]));
    assert_true(pt_key_free(obs, more_ids[0]));

    /* the server ends the holding backend: a lost lock, freed */
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid_b);
    assert_int_equal(pt_wait_backend_gone(obs, pid_b, 5000), 1);
    assert_int_equal(pglock_heartbeat(b, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_lock_count(b, &keys[3], PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_key_free(obs, ids[3]));

    pglock_client_close(a);
    pglock_client_close(b);
    pt_exec_ok(obs, "SELECT pg_advisory_unlock_all()");
    assert_true(pt_wait_until(no_advisory_lock_granted, obs, 5000));
    assert_int_equal(idle_in_xact(obs), idle_before);
    PQfinish(obs);
}

/* A statement that fails inside the transaction (the server's lock table
 * full: 53200) is rolled back to its savepoint: nothing of it stays, the
 * transaction and its first lock do, and the heartbeat agrees. */
static void through_a_pooler_a_failed_statement_keeps_the_transaction(
    void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    /* Filling the lock table is ours alone: a backend of a test before
     * this one that still holds locks while it ends would leave the table
     * full after our filler lets go (CI's valgrind pass saw a heartbeat
     * fail with 53200 so).  Wait it out first, 10 s at most. */
    assert_true(pt_wait_until(no_advisory_lock_granted, obs, 10000));
    PGconn *filler = pt_connect(primary);
    pglock_key keys[NKEYS], more[NKEYS];
    int64_t ids[NKEYS], more_ids[NKEYS];
    make_keys(keys, ids);
    make_keys(more, more_ids);
    pglock_client *a = pooled_client(pooler);
    int index = -1;
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(index, 0);
    int pid = pglock_client_backend_pid(a);

    pt_lock_table_fill(filler);
    int rc = pglock_lock_any(a, more, NKEYS, PGLOCK_EXCLUSIVE, &index);
    pt_lock_table_release(filler);
    assert_int_equal(rc, PGLOCK_ELOCKTABLE);
    assert_int_equal(index, -1);
    assert_int_equal(pglock_client_backend_pid(a), pid);
    assert_int_equal(pglock_heartbeat(a, 5000), 0);
    assert_int_equal(pt_backend_advisory_granted(obs, pid), 1);
    assert_false(pt_key_free(obs, ids[0]));
    for (int i = 0; i < NKEYS; i++)
        assert_true(pt_key_free(obs, more_ids[i]));
    /* and the transaction takes more */
    assert_int_equal(pglock_lock_any(a, more, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     0);
    assert_int_equal(pglock_heartbeat(a, 5000), 0);
    pglock_client_close(a);
    assert_true(pt_key_free(obs, ids[0]));
    assert_true(pt_key_free(obs, more_ids[0]));
    PQfinish(filler);
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(takes_exactly_one_free_key_or_none),
        cmocka_unit_test(the_key_taken_is_heartbeaten_and_released_like_any),
        cmocka_unit_test(bad_sets_are_einval_and_take_nothing),
        cmocka_unit_test(
            through_a_pooler_it_takes_one_key_in_the_holding_transaction),
        cmocka_unit_test(
            through_a_pooler_a_failed_statement_keeps_the_transaction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
