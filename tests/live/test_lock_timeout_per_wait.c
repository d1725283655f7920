/*
 * Each wait gets its own lock_timeout, although the library sends
 * set_config('lock_timeout') only when the session needs another value:
 * a timed wait after a forever wait, a forever wait after a timed one, and
 * a timed wait after one that failed (the failed statement rolled the
 * setting back on the server) all behave as asked.
 */
#include "support.h"

#include <pthread.h>
#include <stdlib.h>
#include <time.h>

typedef struct release_later {
    PGconn *holder;
    int64_t key;
    long after_ms;
} release_later;

static void *release_main(void *arg)
{
    release_later *r = arg;
    struct timespec ts = {r->after_ms / 1000, (r->after_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    pt_execf(r->holder, "SELECT pg_advisory_unlock(%lld)", (long long)r->key);
    return NULL;
}

/* A client, a key another session holds (k) and a free one (f). */
typedef struct scene {
    PGconn *holder;
    int64_t held;
    pglock_client *c;
    pglock_key k, f;
} scene;

static int scene_setup(void **state)
{
    static scene s;
    const char *conninfo = getenv("PGLOCK_TEST_PRIMARY");
    if (!conninfo || !*conninfo)
        return 0; /* each test skips, saying why */
    s.held = pt_unique_key();
    s.holder = pt_connect_holding(conninfo, s.held);
    s.c = pt_open_client(conninfo, NULL);
    pglock_key_int64(&s.k, s.held);
    pglock_key_int64(&s.f, pt_unique_key());
    *state = &s;
    return 0;
}

static int scene_teardown(void **state)
{
    scene *s = *state;
    if (s) {
        pglock_client_close(s->c);
        PQfinish(s->holder);
    }
    return 0;
}

static void timed_waits_time_out_each_time(void **state)
{
    pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    scene *s = *state;
    pglock_client *c = s->c;

    assert_int_equal(
        pglock_lock(c, &s->f, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER), 0);
    /* after a forever wait (lock_timeout 0), a timed wait still times out */
    assert_int_equal(pglock_lock(c, &s->k, PGLOCK_EXCLUSIVE, 200),
                     PGLOCK_ETIMEDOUT);
    /* the failed wait rolled its setting back: the next one sets it again */
    assert_int_equal(pglock_lock(c, &s->k, PGLOCK_EXCLUSIVE, 200),
                     PGLOCK_ETIMEDOUT);
    assert_int_equal(pglock_lock(c, &s->k, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_EBUSY);
    assert_int_equal(pglock_lock(c, &s->k, PGLOCK_EXCLUSIVE, 200),
                     PGLOCK_ETIMEDOUT);
    assert_int_equal(pglock_lock_count(c, &s->k, PGLOCK_EXCLUSIVE), 0);
}

static void forever_wait_after_timed_wait_outlasts_it(void **state)
{
    pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    scene *s = *state;
    pglock_client *c = s->c;

    /* a successful timed wait leaves lock_timeout = 200 ms on the session */
    assert_int_equal(pglock_lock(c, &s->f, PGLOCK_EXCLUSIVE, 200), 0);
    /* a forever wait must not inherit it: the holder lets go only after
     * several times that */
    release_later r = {s->holder, s->held, 1000};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, release_main, &r), 0);
    long t0 = pt_now_ms();
    int rc = pglock_lock(c, &s->k, PGLOCK_EXCLUSIVE, PGLOCK_WAIT_FOREVER);
    long waited = pt_now_ms() - t0;
    pthread_join(t, NULL);
    assert_int_equal(rc, 0);
    /* not a timing assertion: proof that the wait outlived 200 ms, i.e.
     * that it really waited for the release */
    assert_true(waited >= 900);
    assert_int_equal(pglock_lock_count(c, &s->k, PGLOCK_EXCLUSIVE), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(timed_waits_time_out_each_time,
                                        scene_setup, scene_teardown),
        cmocka_unit_test_setup_teardown(
            forever_wait_after_timed_wait_outlasts_it, scene_setup,
            scene_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
