/*
 * pglock_lock_any(): any one free key of a set in one statement, never
 * more than one, counted like pglock_lock(); each effect observed from a
 * second connection.
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
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index), 0);
    assert_int_equal(index, 1);
    assert_int_equal(pt_backend_advisory_granted(obs, pglock_client_backend_pid(a)), 1);
    assert_false(pt_key_free(obs, ids[1]));
    assert_true(pt_key_free(obs, ids[3]));
    assert_int_equal(pglock_held(a, &keys[1], PGLOCK_EXCLUSIVE), 1);

    assert_int_equal(pglock_lock_any(b, keys, NKEYS, PGLOCK_EXCLUSIVE, &index), 0);
    assert_int_equal(index, 3);
    assert_int_equal(pt_backend_advisory_granted(obs, pglock_client_backend_pid(b)), 1);

    /* none left: busy, nothing taken */
    assert_int_equal(pglock_lock_any(c, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_EBUSY);
    assert_int_equal(index, -1);
    assert_int_equal(pt_backend_advisory_granted(obs, pglock_client_backend_pid(c)), 0);

    /* a freed key is the next one's */
    assert_int_equal(pglock_unlock(a, &keys[1], PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pglock_lock_any(c, keys, NKEYS, PGLOCK_EXCLUSIVE, &index), 0);
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
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index), 0);
    assert_int_equal(index, 0);
    assert_int_equal(pglock_heartbeat(a, 5000), 0);
    /* a second call may not count a key it holds again */
    assert_int_equal(pglock_lock_any(a, keys, NKEYS, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_ESTATE);
    assert_int_equal(pt_backend_advisory_granted(obs, pglock_client_backend_pid(a)), 1);
    /* the server ends the session: the next heartbeat says so */
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pglock_client_backend_pid(a));
    assert_int_equal(pt_wait_backend_gone(obs, pglock_client_backend_pid(a), 5000), 1);
    assert_int_equal(pglock_heartbeat(a, 5000), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_held(a, &keys[0], PGLOCK_EXCLUSIVE), 0);
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
                                     PGLOCK_EXCLUSIVE, &index), PGLOCK_EINVAL);
    assert_int_equal(pt_backend_advisory_granted(obs, pglock_client_backend_pid(a)), 0);
    pglock_client_close(a);
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(takes_exactly_one_free_key_or_none),
        cmocka_unit_test(the_key_taken_is_heartbeaten_and_released_like_any),
        cmocka_unit_test(bad_sets_are_einval_and_take_nothing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
