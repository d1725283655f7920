/*
 * The managed hold is its lease's one clock: pglock_hold_deadline()
 * ("confirmed until") moves on with each confirmed heartbeat, and
 * pglock_hold_stop_by() is that + the stop budget, the one the caller
 * asked for in hold options version 2 (which brings T_c forward) or, with
 * version 1's options, T_s/6.  The expectations are computed here from
 * pglock(1), LEASES: T_c = T_s - budget - T_s/6, never later than 2T_s/3.
 */
#include <poll.h>
#include <stdio.h>
#include "support.h"

#define LEASE_MS 3000L

static pglock_client *holding(const char *conninfo, int64_t id)
{
    pglock_options o = pt_lease_options(LEASE_MS);
    return pt_client_taking(conninfo, &o, id);
}

/* Steps the loop-mode hold until a heartbeat sent after since is
 * confirmed (bounded: 3 T_s). */
static void step_until_confirmed_after(pglock_hold *h, pglock_client *c,
                                       int64_t since)
{
    int64_t end = pglock_now_ms() + 3 * LEASE_MS;
    while (pglock_client_confirmed_at(c) <= since && pglock_now_ms() < end) {
        long t;
        assert_int_equal(pglock_hold_step(h, &t), 0);
        struct pollfd p = {.fd = pglock_hold_fd(h), .events = POLLIN};
        poll(&p, 1, t > 50 ? 50 : (int)t);
    }
    assert_true(pglock_client_confirmed_at(c) > since);
}

static void the_hold_owns_confirmed_until_and_stop_by(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = holding(primary, pt_unique_key());
    pglock_hold_options ho = PGLOCK_HOLD_OPTIONS_INIT;
    ho.drive = PGLOCK_HOLD_LOOP;
    ho.stop_budget_ms = LEASE_MS / 2;
    pglock_hold *h;
    assert_int_equal(pglock_hold_start(&h, c, &ho), 0);
    long tc = LEASE_MS - LEASE_MS / 2 - LEASE_MS / 6; /* 1000 */
    int64_t first = pglock_client_confirmed_at(c);
    assert_true(pglock_hold_deadline(h) == first + tc);
    assert_true(pglock_hold_stop_by(h) == first + tc + LEASE_MS / 2);
    /* the next confirmed heartbeat moves both on */
    step_until_confirmed_after(h, c, first);
    int64_t later = pglock_client_confirmed_at(c);
    assert_true(pglock_hold_deadline(h) == later + tc);
    assert_true(pglock_hold_stop_by(h) == later + tc + LEASE_MS / 2);
    /* and a confirmation asked for does too */
    assert_int_equal(pglock_hold_confirm(h, 2000), 0);
    assert_true(pglock_hold_deadline(h) == pglock_client_confirmed_at(c) + tc);
    assert_int_equal(pglock_hold_stop(h), 0);
    pglock_client_close(c);
    assert_true(pglock_hold_deadline(NULL) == 0);
    assert_true(pglock_hold_stop_by(NULL) == 0);
}

/* A program built against version 1 of the hold options (no
 * stop_budget_ms) gets the defaults: T_c = 2T_s/3, budget T_s/6. */
static void version_1_hold_options_keep_the_default_budget(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = holding(primary, pt_unique_key());
    pglock_hold_options ho;
    assert_int_equal(pglock_hold_options_init(&ho, 1), 0);
    ho.drive = PGLOCK_HOLD_LOOP;
    ho.stop_budget_ms = 123456; /* not version 1's: never read */
    pglock_hold *h;
    assert_int_equal(pglock_hold_start(&h, c, &ho), 0);
    int64_t at = pglock_client_confirmed_at(c);
    assert_true(pglock_hold_deadline(h) == at + 2 * LEASE_MS / 3);
    assert_true(pglock_hold_stop_by(h) == at + 2 * LEASE_MS / 3 + LEASE_MS / 6);
    assert_int_equal(pglock_hold_stop(h), 0);
    pglock_client_close(c);
}

static void a_stop_budget_over_half_the_lease_is_refused(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = holding(primary, pt_unique_key());
    pglock_hold_options ho = PGLOCK_HOLD_OPTIONS_INIT;
    ho.stop_budget_ms = LEASE_MS / 2 + 1;
    pglock_hold *h;
    assert_int_equal(pglock_hold_start(&h, c, &ho), PGLOCK_EINVAL);
    assert_null(h);
    printf("# %s\n", pglock_client_error(c));
    ho.stop_budget_ms = -1;
    assert_int_equal(pglock_hold_start(&h, c, &ho), PGLOCK_EINVAL);
    pglock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_hold_owns_confirmed_until_and_stop_by),
        cmocka_unit_test(version_1_hold_options_keep_the_default_budget),
        cmocka_unit_test(a_stop_budget_over_half_the_lease_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
