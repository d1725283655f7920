/*
 * The managed hold across a real network partition, which only the
 * server's kernel can detect (tests/harness/README.md, "The partition").  The holder's connection is
 * opened inside the harness's network namespace (setns(2) for the time of
 * the connect) and reaches the partition server by TCP; the cut drops
 * every packet of that port both ways, so the server's kernel hears
 * nothing from the holder.  A second holder waits on the same server
 * through its Unix socket, which is never cut.
 *
 * The caller uses the stop budget pglock.h promises after the loss notice
 * (T_s/6), less a little: its last step of work ends that long after the
 * notice.  The server must not hand the lock to the second holder before
 * then.  Timestamps of both holders are on pglock_now_ms()'s clock; only
 * their order is asserted, the figures are printed.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include "support.h"

#define LEASE_MS 6000L
/* Works in 20 ms steps until the loss fd is readable, then takes
 * stop_ms to stop (a step that must finish, within the budget).  Returns
 * when the work stopped; bounded at 30 s so that a broken hold fails the
 * test. */
static int64_t work_then_stop(pglock_hold *hold, int64_t *notice_at,
                              long stop_ms)
{
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    int64_t end = pglock_now_ms() + 30000;
    while (poll(&lost, 1, 0) == 0 && pglock_now_ms() < end) {
        struct pollfd none = {.fd = -1};
        poll(&none, 1, 20);
    }
    *notice_at = pglock_now_ms();
    while (pglock_now_ms() < *notice_at + stop_ms) {
        struct pollfd none = {.fd = -1};
        poll(&none, 1, 20);
    }
    return pglock_now_ms();
}

/* The hold over the partition, with lease_ms = lease (0: none, and
 * dead_peer_ms = LEASE_MS instead: the same T_s, the same rule) and the
 * stop budget budget_ms (0: the default, T_s/6); the caller takes that
 * budget less 250 ms to stop. */
static void partitioned_hold(long lease, long budget_ms)
{
    const char *tcp = pt_env_or_skip("PGLOCK_TEST_PARTITION_TCP");
    const char *sock = pt_env_or_skip("PGLOCK_TEST_PARTITION_SOCKET");
    PGconn *obs = pt_connect(sock);
    int64_t id = pt_unique_key();

    pglock_options o;
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    o.lease_ms = lease;
    if (lease == 0)
        o.dead_peer_ms = LEASE_MS;
    o.cancel_timeout_ms = 500;
    pt_partition_enter();
    pglock_client *c = pt_open_client(tcp, &o);
    pt_partition_leave();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    /* The server's socket got the lease's dead-peer settings (SHOW reads
     * them back from the socket): nothing there ends the session before
     * T_s (settings.c). */
    PGconn *own = pglock_client_conn(c);
    long user_timeout = pt_query_int(own, "SELECT current_setting("
                                          "'tcp_user_timeout')::int");
    long keepalives = pt_query_int(
        own, "SELECT current_setting("
             "'tcp_keepalives_idle')::int + current_setting("
             "'tcp_keepalives_count')::int * current_setting("
             "'tcp_keepalives_interval')::int");
    pglock_hold *hold;
    pglock_hold_options ho = PGLOCK_HOLD_OPTIONS_INIT;
    ho.stop_budget_ms = budget_ms;
    assert_int_equal(pglock_hold_start(&hold, c, &ho), 0);
    long stop_ms = (budget_ms ? budget_ms : LEASE_MS / 6) - 250;

    /* static: if the second holder never gets the lock, its thread is
     * left running (it cannot be joined), and must not write into a
     * stack frame that is gone. */
    static pt_waiter b;
    pt_waiter_start(&b, sock, obs, id);

    /* A few heartbeats while the network is up: the lease holds. */
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    assert_int_equal(poll(&lost, 1, (int)(LEASE_MS / 3)), 0);

    int64_t cut_at = pglock_now_ms();
    pt_partition_cut();
    int64_t notice_at;
    int64_t stopped_at = work_then_stop(hold, &notice_at, stop_ms);
    int loss = pglock_hold_loss(hold);
    char why[512];
    snprintf(why, sizeof why, "%s", pglock_hold_error(hold));
    int got = pt_waiter_granted(&b, 3 * LEASE_MS);
    pt_partition_heal();

    printf(
        "# partition, stop budget %ld ms, %s %ld ms: notice at +%lld ms, work stopped at"
        " +%lld ms, second holder got the lock at +%lld ms (%lld ms"
        " after the work stopped) (%s)\n",
        budget_ms ? budget_ms : LEASE_MS / 6,
        lease ? "lease" : "no lease, dead_peer_ms", LEASE_MS,
        (long long)(notice_at - cut_at), (long long)(stopped_at - cut_at),
        (long long)(b.got_at - cut_at), (long long)(b.got_at - stopped_at),
        why);
    assert_true(got);
    assert_int_equal(loss, PGLOCK_ECONNLOST);
    assert_true(stopped_at < b.got_at); /* no overlap */
    assert_int_equal(user_timeout, LEASE_MS);
    assert_true(keepalives * 1000 >= LEASE_MS);
    assert_int_not_equal(pglock_hold_stop(hold), 0);
    pglock_client_close(c);
    PQfinish(b.conn);
    PQfinish(obs);
}

static void a_partitioned_hold_keeps_the_lock_through_the_callers_stop_budget(
    void **s)
{
    (void)s;
    partitioned_hold(LEASE_MS, 0);
}

/* A program that sets no lease (PGLOCK_OPTIONS_INIT's default) is told
 * the same budget, T_s = dead_peer_ms: no kernel may end its session
 * sooner (it did at 2/3 of it, inside the caller's budget). */
static void without_a_lease_a_partitioned_hold_keeps_the_lock_as_long(void **s)
{
    (void)s;
    partitioned_hold(0, 0);
}

/* A stop budget of half the lease (hold options version 2): the notice
 * comes sooner (T_c = T_s/3), and the caller's whole budget still ends
 * before the server can free the lock. */
static void a_hold_with_half_the_lease_as_its_stop_budget_keeps_it_too(void **s)
{
    (void)s;
    partitioned_hold(LEASE_MS, LEASE_MS / 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            a_partitioned_hold_keeps_the_lock_through_the_callers_stop_budget),
        cmocka_unit_test(
            without_a_lease_a_partitioned_hold_keeps_the_lock_as_long),
        cmocka_unit_test(
            a_hold_with_half_the_lease_as_its_stop_budget_keeps_it_too),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
