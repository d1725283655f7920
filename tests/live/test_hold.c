/*
 * The managed hold (hold.c): work done the README's way (steps, checking
 * the loss fd between them) stops before a second holder, a real second
 * connection waiting on the server, gets the lock — when the network is
 * cut (the harness proxy) and when the backend is terminated; the loop
 * mode notices a loss too; stop and close return on a dead network.
 * The lock stays held from a client-side loss notice until the caller
 * stops; query cancels on the lock's backend are no loss, in session
 * hold and in xact hold (its heartbeat runs under a savepoint); a second hold on one client is
 * refused; the loop mode's confirmation on demand proves the lease past
 * T_c.
 * Timestamps of both holders are on pglock_now_ms()'s clock; the figures
 * are printed ("# ...") for the record, only their order is asserted.
 */
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include "support.h"

#define LEASE_MS 3000L

/* ------------------------------------------------- the first holder */

typedef struct notice {
    volatile sig_atomic_t calls;
    int64_t at;
    int code;
    char message[512];
} notice;

static void on_lost(void *arg, int code, const char *message)
{
    notice *n = arg;
    n->at = pglock_now_ms();
    n->code = code;
    snprintf(n->message, sizeof n->message, "%s", message);
    n->calls++;
}

/* The README's loop: work in short steps while the loss fd is quiet.
 * Returns when the work stopped, on pglock_now_ms()'s clock.  A step is
 * 20 ms of "work"; bounded at 30 s so that a broken hold fails the test
 * instead of hanging it. */
static int64_t work_until_lost(pglock_hold *hold)
{
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    int64_t end = pglock_now_ms() + 30000;
    while (poll(&lost, 1, 0) == 0 && pglock_now_ms() < end) {
        struct pollfd none = {.fd = -1};
        poll(&none, 1, 20); /* one step of work */
    }
    return pglock_now_ms();
}

/* A holds key through conninfo with a lease of lease_ms and a hold in
 * thread mode that reports to n. */
static pglock_client *first_holds_lease(const char *conninfo, int64_t id,
                                        long lease_ms, pglock_hold **hold,
                                        notice *n)
{
    pglock_options o = pt_lease_options(lease_ms);
    o.cancel_timeout_ms = 500;
    pglock_client *c = pt_client_taking(conninfo, &o, id);
    pt_hold_start(hold, c, PGLOCK_HOLD_THREAD, on_lost, n);
    return c;
}

/* The same with a LEASE_MS lease. */
static pglock_client *first_holds(const char *conninfo, int64_t id,
                                  pglock_hold **hold, notice *n)
{
    return first_holds_lease(conninfo, id, LEASE_MS, hold, n);
}

/* A LEASE_MS hold in loop mode on a new client that holds key id. */
static pglock_client *loop_holds(const char *conninfo, int64_t id,
                                 pglock_hold **hold, notice *n)
{
    pglock_options o = pt_lease_options(LEASE_MS);
    pglock_client *c = pt_client_taking(conninfo, &o, id);
    pt_hold_start(hold, c, PGLOCK_HOLD_LOOP, on_lost, n);
    return c;
}

static int noticed(void *arg)
{
    return ((notice *)arg)->calls > 0;
}

/* The holder's backend, resumed at the server's clock resumed_ms (ms since
 * the epoch), has read what the client sent while it was stopped: it is
 * gone, or idle again since then. */
typedef struct settled {
    PGconn *obs;
    int pid;
    long resumed_ms;
} settled;

static int backend_settled(void *arg)
{
    settled *b = arg;
    return pt_query_intf(b->obs,
                         "SELECT count(*) FROM pg_stat_activity WHERE pid = %d"
                         " AND (state <> 'idle' OR state_change < "
                         "to_timestamp(%ld / 1000.0))",
                         b->pid, b->resumed_ms) == 0;
}

/* ------------------------------------------------------------ tests */

static void a_cut_network_stops_the_work_before_a_second_holder_starts(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds(proxy, id, &hold, &n);
    pt_waiter b;
    pt_waiter_start(&b, primary, obs, id);

    /* Several heartbeats pass while the network is up: the lease holds. */
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    assert_int_equal(poll(&lost, 1, (int)LEASE_MS), 0);
    assert_int_equal(b.done, 0);

    int64_t cut_at = pglock_now_ms();
    pt_proxy_cut();
    int64_t stopped_at = work_until_lost(hold);
    assert_int_equal(pglock_hold_loss(hold), PGLOCK_ECONNLOST);
    const char *why = pglock_hold_error(hold);
    assert_true(pt_waiter_granted(&b, 3 * LEASE_MS));
    pt_proxy_heal();

    printf("# cut network, lease %ld ms: loss notice %lld ms after the cut,"
           " work stopped at %lld ms, second holder got the lock at %lld ms;"
           " overlap %lld ms (%s)\n",
           LEASE_MS, (long long)(n.at - cut_at),
           (long long)(stopped_at - cut_at), (long long)(b.got_at - cut_at),
           (long long)(stopped_at > b.got_at ? stopped_at - b.got_at : 0), why);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.code, PGLOCK_ECONNLOST);
    /* the loss's message, on the hold, is the one on_lost was given */
    assert_string_equal(why, n.message);
    assert_true(stopped_at < b.got_at); /* no overlap */
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_client_socket(c), -1);
    pglock_client_close(c);
    PQfinish(b.conn);
    PQfinish(obs);
}

static void a_terminated_backend_stops_the_work_at_once(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds(primary, id, &hold, &n);
    int pid = pglock_client_backend_pid(c);
    pt_waiter b;
    pt_waiter_start(&b, primary, obs, id);

    int64_t kill_at = pglock_now_ms();
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
    int64_t stopped_at = work_until_lost(hold);
    assert_true(pt_waiter_granted(&b, 3 * LEASE_MS));
    /* The server frees the lock at once, so the two may overlap, by the
     * time the socket's close takes to reach the hold (pglock.h, "The
     * caller's budget": told at once; measured, here printed). */
    printf("# pg_terminate_backend, lease %ld ms: loss notice %lld ms after,"
           " work stopped at %lld ms, second holder got the lock at %lld ms;"
           " overlap %lld ms (%s)\n",
           LEASE_MS, (long long)(n.at - kill_at),
           (long long)(stopped_at - kill_at), (long long)(b.got_at - kill_at),
           (long long)(stopped_at > b.got_at ? stopped_at - b.got_at : 0),
           n.message);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.code, PGLOCK_ECONNLOST);
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_client_socket(c), -1);
    pglock_client_close(c);
    PQfinish(b.conn);
    PQfinish(obs);
}

typedef struct stopper {
    pglock_hold *hold;
    pglock_client *c;
    int rc;
} stopper;

static void stop_and_close(void *arg)
{
    stopper *st = arg;
    st->rc = pglock_hold_stop(st->hold);
    pglock_client_close(st->c);
}

static void stop_and_close_return_on_a_dead_network(void **s)
{
    (void)s;
    pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    notice n = {0};
    stopper st = {0};
    st.c = first_holds(proxy, pt_unique_key(), &st.hold, &n);
    pt_proxy_cut();
    /* The bound is cancel_timeout_ms (500 here); give it ten times. */
    long took = pt_call_on_cut_network(stop_and_close, &st, 5000);
    printf("# stop + close on a cut network: %ld ms (bound: "
           "cancel_timeout_ms 500)\n",
           took);
    assert_true(took >= 0);
    /* The last heartbeat went unanswered: the lock cannot be vouched for. */
    assert_int_equal(st.rc, PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 0);
}

static void stop_on_a_healthy_lease_confirms_and_keeps_the_lock(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds(primary, id, &hold, &n);
    int64_t started = pglock_client_confirmed_at(c);
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    assert_int_equal(poll(&lost, 1, (int)(LEASE_MS / 2)), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    /* heartbeats ran, and the client is the caller's again, still holding */
    assert_true(pglock_client_confirmed_at(c) > started);
    assert_int_equal(pt_key_free(obs, id), 0);
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pt_key_free(obs, id), 1);
    assert_int_equal(n.calls, 0);
    pglock_client_close(c);
    PQfinish(obs);
}

static void the_loop_mode_notices_a_terminated_backend(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = loop_holds(primary, pt_unique_key(), &hold, &n);
    int pid = pglock_client_backend_pid(c);

    /* The caller's loop: poll the hold's fd with the step's timeout. */
    int64_t confirmed = pglock_client_confirmed_at(c),
            end = pglock_now_ms() + 30000;
    int rc = 0, killed = 0;
    long wait_ms = 0;
    while (rc == 0 && pglock_now_ms() < end) {
        if (!killed && pglock_now_ms() - confirmed > LEASE_MS / 2) {
            pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
            killed = 1;
        }
        struct pollfd p = {.fd = pglock_hold_fd(hold), .events = POLLIN};
        poll(&p, 1, wait_ms > 100 ? 100 : (int)wait_ms);
        rc = pglock_hold_step(hold, &wait_ms);
    }
    assert_true(killed);
    assert_int_equal(rc, PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 1);
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    assert_int_equal(poll(&lost, 1, 0), 1);
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    pglock_client_close(c);
    PQfinish(obs);
}

/* Loop mode: pglock_hold_confirm() proves the lease with a heartbeat of
 * its own even past T_c (a caller that was stopped asks it before going
 * on), the hold goes on, and a stop right after needs no round trip;
 * after a terminated backend it is the loss, with the notice. */
static void the_loop_mode_confirms_on_demand_even_past_the_deadline(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = loop_holds(primary, id, &hold, &n);

    /* No step for longer than T_c (2 s of 3 s), as a stopped caller: the
     * session is idle for less than T_s, so the lock is still held. */
    int64_t before = pglock_client_confirmed_at(c);
    struct timespec pause = {2, 300000000};
    nanosleep(&pause, NULL);
    int64_t asked = pglock_now_ms();
    assert_int_equal(pglock_hold_confirm(hold, 1000), 0);
    assert_true(pglock_client_confirmed_at(c) >= asked);
    assert_true(pglock_client_confirmed_at(c) > before);
    long wait_ms = -1;
    assert_int_equal(pglock_hold_step(hold, &wait_ms), 0);
    assert_true(wait_ms > 0);
    assert_int_equal(pglock_hold_confirm(hold, 1000), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(pt_key_free(obs, id), 0);
    assert_int_equal(n.calls, 0);
    pglock_client_close(c);

    /* Again, then the backend is terminated: a loss, told once. */
    c = loop_holds(primary, pt_unique_key(), &hold, &n);
    int pid = pglock_client_backend_pid(c);
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
    assert_true(pt_wait_backend_gone(obs, pid, 10000));
    assert_int_equal(pglock_hold_confirm(hold, 1000), PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 1);
    assert_int_equal(pglock_hold_confirm(hold, 1000), PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 1);
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    pglock_client_close(c);

    /* Thread mode has no confirm of the caller's. */
    c = first_holds(primary, pt_unique_key(), &hold, &n);
    assert_int_equal(pglock_hold_confirm(hold, 1000), PGLOCK_ESTATE);
    assert_int_equal(pglock_hold_stop(hold), 0);
    pglock_client_close(c);
    PQfinish(obs);
}

/* Through PgBouncer (xact hold, the default AUTO there): the hold keeps
 * the holding transaction's lease, and a second connection stays out. */
static void a_hold_through_a_pooler_keeps_the_transaction_lock(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds(pooler, id, &hold, &n);
    assert_int_equal(pglock_client_lifetime(c), PGLOCK_LIFETIME_XACT);
    /* longer than the lease: only the hold's heartbeats keep it */
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    assert_int_equal(poll(&lost, 1, (int)(LEASE_MS * 3 / 2)), 0);
    assert_int_equal(pt_key_free(obs, id), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(n.calls, 0);
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    PQfinish(obs);
}

/* A loss seen by the client: its notice comes first, and
 * the lock stays held — the connection open — until the caller stops (or
 * the server's lease ends).  The holder's backend is frozen (SIGSTOP)
 * past T_c, then resumed after the notice: it answers the heartbeat that
 * waited, and the lock is still held, by the same backend, until
 * pglock_hold_stop(); only then does the queued second holder get it. */
static void a_loss_notice_comes_while_the_lock_is_still_held(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    /* A 6 s lease: the notice comes at T_c (4 s after the freeze), the
     * server's lease ends at 6 s; the checks below fit in that 2 s margin
     * on a loaded machine (a 3 s lease left 1 s). */
    pglock_client *c = first_holds_lease(primary, id, 6000, &hold, &n);
    int pid = pglock_client_backend_pid(c);
    pt_waiter b;
    pt_waiter_start(&b, primary, obs, id);

    int64_t froze_at = pglock_now_ms();
    assert_int_equal(kill((pid_t)pid, SIGSTOP), 0);
    int got_notice = pt_wait_until(noticed, &n, 3 * 6000);
    /* The wall clock before the resume, from this host (the server's):
     * no query, which could fail the test with the backend still stopped
     * and the server's shutdown then hung. */
    struct timespec wall;
    clock_gettime(CLOCK_REALTIME, &wall);
    long resumed = (long)wall.tv_sec * 1000 + wall.tv_nsec / 1000000;
    assert_int_equal(kill((pid_t)pid, SIGCONT), 0);
    assert_true(got_notice);
    int64_t resumed_at = pglock_now_ms();
    settled set = {obs, pid, resumed};
    assert_true(pt_wait_until(backend_settled, &set, 5000));
    int64_t checked_at = pglock_now_ms();
    int still_held = pt_backend_advisory_granted(obs, pid) == 1;
    int backend_alive = pt_query_intf(obs,
                                      "SELECT count(*) FROM "
                                      "pg_stat_activity WHERE pid = %d",
                                      pid) == 1;
    int second_early = b.done;
    int64_t stop_at = pglock_now_ms();
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    assert_true(pt_waiter_granted(&b, 3 * 6000));
    printf("# backend frozen, lease %ld ms: loss notice %lld ms after the "
           "freeze; resumed at %lld ms, lock %s at %lld ms; stop at %lld ms;"
           " second holder got the lock at %lld ms (%s)\n",
           6000L, (long long)(n.at - froze_at),
           (long long)(resumed_at - froze_at),
           still_held ? "still held" : "FREE",
           (long long)(checked_at - froze_at), (long long)(stop_at - froze_at),
           (long long)(b.got_at - froze_at), n.message);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.code, PGLOCK_ECONNLOST);
    assert_true(backend_alive);
    assert_true(still_held);
    assert_false(second_early);
    assert_true(b.got_at >= stop_at); /* not before the caller said so */
    pglock_client_close(c);
    PQfinish(b.conn);
    PQfinish(obs);
}

#define CANCEL "canceling statement due to user request"
#define DENIED "permission denied for function pg_backend_pid"

/* Session hold: a statement error on a session that
 * goes on — a cancel, which ends the statement, not the session — is no
 * loss: a session advisory lock stays.  A cancel storm on this machine
 * hits only some heartbeats, so for a window shorter than T_c - T_h every
 * heartbeat fails for sure (pg_backend_pid() revoked from the holder's
 * ordinary role) while cancels storm the backend.  No loss is declared,
 * a second connection never gets the lock, stop confirms the lease; the
 * server's log counts the heartbeats that failed. */
static void statement_errors_on_the_session_are_no_loss(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *ordinary = pt_env_or_skip("PGLOCK_TEST_ORDINARY");
    const long lease = 6000; /* T_h 1 s, T_c 4 s */
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds_lease(ordinary, id, lease, &hold, &n);
    int pid = pglock_client_backend_pid(c);
    long cancels = pt_logged(pid, CANCEL), denied = pt_logged(pid, DENIED);
    pt_exec_ok(obs, "REVOKE EXECUTE ON FUNCTION pg_backend_pid() FROM public");
    pt_cancel_storm(primary, pid, lease / 4);
    int free_during = pt_key_free(obs, id);
    pt_exec_ok(obs, "GRANT EXECUTE ON FUNCTION pg_backend_pid() TO public");
    cancels = pt_logged(pid, CANCEL) - cancels;
    denied = pt_logged(pid, DENIED) - denied;
    int code = pglock_hold_loss(hold);
    const char *why = pglock_hold_error(hold);
    printf("# %ld ms of failing heartbeats on a session hold (lease %ld "
           "ms): %ld cancelled, %ld refused; lock %s; loss: %s\n",
           lease / 4, lease, cancels, denied, free_during ? "FREE" : "held",
           code ? why : "none");
    assert_true(cancels + denied >= 1);
    assert_false(free_during);
    assert_int_equal(code, 0);
    struct pollfd lost = {.fd = pglock_hold_loss_fd(hold), .events = POLLIN};
    assert_int_equal(poll(&lost, 1, 0), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(n.calls, 0);
    assert_int_equal(pt_key_free(obs, id), 0);
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    PQfinish(obs);
}

/* Xact hold (through the pooler): a cancel that lands on a heartbeat
 * aborts only the heartbeat's savepoint; the holding transaction and its
 * lock live on, the next heartbeat recovers (ROLLBACK TO SAVEPOINT) and
 * confirms, and a real second contender stays blocked throughout.  Two
 * heartbeats in a row are cancelled, each for sure: a cancel counts only
 * while a statement runs and a heartbeat runs for microseconds, so the
 * signal is sent from inside the statement (tests/support/
 * cancel_statements.sh).  Margin: with a 6 s lease (T_h 1 s, T_c 4 s),
 * two failed heartbeats leave the last confirmed one about 3 s old when
 * the third confirms, 1 s before T_c.  A revoked function cannot stand
 * in here, as it does for the session hold: inside the open holding
 * transaction, which takes no relation lock, the backend reads no
 * invalidation, so the revoke is not seen. */
static void a_cancel_storm_in_xact_hold_is_no_loss(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    const long lease = 6000, beat = lease / 6;
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds_lease(pooler, id, lease, &hold, &n);
    assert_int_equal(pglock_client_lifetime(c), PGLOCK_LIFETIME_XACT);
    pid_t pid = (pid_t)pglock_client_backend_pid(c);
    static pt_waiter w; /* a real second contender, blocked all along */
    pt_waiter_start(&w, primary, obs, id);
    int64_t storm_at = pglock_now_ms();
    long cancelled = pt_cancel_statements(primary, pid, 2, 30);
    printf("# cancels from inside an xact hold's heartbeats (lease %ld ms): "
           "%ld statements cancelled in %lld ms; notices: %d (%s)\n",
           lease, cancelled, (long long)(pglock_now_ms() - storm_at),
           (int)n.calls, n.calls ? n.message : "none");
    assert_true(cancelled >= 2);
    /* heartbeats confirm again after the storm, on the same transaction */
    poll(NULL, 0, (int)(2 * beat));
    assert_int_equal(n.calls, 0);
    assert_int_equal(pglock_hold_loss(hold), 0);
    assert_int_equal(w.done, 0);
    assert_int_equal(pt_query_intf(obs,
                                   "SELECT count(*) FROM pg_locks WHERE"
                                   " pid = %d AND locktype = 'advisory'"
                                   " AND granted",
                                   (int)pid),
                     1);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(w.done, 0);
    pglock_client_close(c);
    assert_int_equal(pt_waiter_granted(&w, 10000), 1);
    PQfinish(w.conn);
    PQfinish(obs);
}

/* One hold to a client: a second hold on a client that a hold already runs
 * on is refused (two threads would share one PGconn); the first hold
 * goes on alone, and tells its loss once. */
static void a_second_hold_on_one_client_is_refused(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0}, n2 = {0};
    pglock_hold *hold;
    pglock_client *c = first_holds(primary, id, &hold, &n);
    int pid = pglock_client_backend_pid(c);
    pglock_hold_options ho;
    pglock_hold_options_init(&ho, PGLOCK_HOLD_OPTIONS_VERSION);
    ho.on_lost = on_lost;
    ho.arg = &n2;
    pglock_hold *again = (pglock_hold *)&again;
    int rc = pglock_hold_start(&again, c, &ho);
    assert_int_equal(rc, PGLOCK_ESTATE);
    assert_null(again);
    pt_execf(obs, "SELECT pg_terminate_backend(%d)", pid);
    assert_true(pt_wait_until(noticed, &n, 3 * LEASE_MS));
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n2.calls, 0);
    pglock_client_close(c);
    PQfinish(obs);
}

static void bad_options_and_states_are_refused(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    pglock_client *c = pt_open_client(primary, NULL);
    pglock_hold *hold = (pglock_hold *)&hold;
    /* nothing held yet */
    assert_int_equal(pglock_hold_start(&hold, c, NULL), PGLOCK_ESTATE);
    assert_null(hold);
    assert_non_null(strstr(pglock_client_error(c), "holds no lock"));
    pglock_key k;
    pglock_key_int64(&k, pt_unique_key());
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pglock_hold_options ho = {0}; /* never initialised: version 0 */
    assert_int_equal(pglock_hold_start(&hold, c, &ho), PGLOCK_EINVAL);
    assert_non_null(strstr(pglock_client_error(c), "pglock_hold_options_init"));
    assert_int_equal(pglock_hold_options_init(&ho, 99), PGLOCK_EINVAL);
    assert_int_equal(pglock_hold_start(&hold, c, NULL), 0);
    assert_int_equal(pglock_hold_step(hold, NULL), PGLOCK_ESTATE);
    assert_int_equal(pglock_hold_fd(hold), -1);
    assert_int_equal(pglock_hold_loss(hold), 0);
    assert_string_equal(pglock_hold_error(hold), "");
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 1);
    pglock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            a_cut_network_stops_the_work_before_a_second_holder_starts),
        cmocka_unit_test(a_terminated_backend_stops_the_work_at_once),
        cmocka_unit_test(stop_and_close_return_on_a_dead_network),
        cmocka_unit_test(stop_on_a_healthy_lease_confirms_and_keeps_the_lock),
        cmocka_unit_test(the_loop_mode_notices_a_terminated_backend),
        cmocka_unit_test(
            the_loop_mode_confirms_on_demand_even_past_the_deadline),
        cmocka_unit_test(a_hold_through_a_pooler_keeps_the_transaction_lock),
        cmocka_unit_test(a_loss_notice_comes_while_the_lock_is_still_held),
        cmocka_unit_test(statement_errors_on_the_session_are_no_loss),
        cmocka_unit_test(a_cancel_storm_in_xact_hold_is_no_loss),
        cmocka_unit_test(a_second_hold_on_one_client_is_refused),
        cmocka_unit_test(bad_options_and_states_are_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
