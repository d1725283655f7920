/*
 * The managed hold guards its client (hold.c, client.c, client_state.c):
 * while a hold runs, a call that would change the client's locks or
 * connection is refused with PGLOCK_ESTATE and the lock stays held, as a
 * real second connection sees it; closing the client with a hold running
 * stops the hold (no crash; the hold reports the loss, its handle valid
 * until pglock_hold_stop()); and a forked child's close never ends the
 * parent's session: a second connection is still refused the lock, and
 * the parent's hold confirms its lease after the child is gone.
 */
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support.h"

#define LEASE_MS 3000L

typedef struct notice {
    volatile sig_atomic_t calls;
    int code;
} notice;

static void on_lost(void *arg, int code, const char *message)
{
    (void)message;
    notice *n = arg;
    n->code = code;
    n->calls++;
}

/* A LEASE_MS client on the primary holding key id, and a hold driven
 * by drive that reports to n. */
static pglock_client *holds(const char *conninfo, int64_t id,
                            pglock_hold_drive drive, pglock_hold **hold,
                            notice *n)
{
    pglock_options o = pt_lease_options(LEASE_MS);
    pglock_client *c = pt_client_taking(conninfo, &o, id);
    pt_hold_start(hold, c, drive, on_lost, n);
    return c;
}

/* Every call that would change the client's locks or connection. */
static void every_change_is_refused(pglock_client *c, int64_t id)
{
    pglock_key k, other;
    pglock_key_int64(&k, id);
    pglock_key_int64(&other, pt_unique_key());
    int64_t token;
    int index;
    assert_int_equal(pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), PGLOCK_ESTATE);
    assert_int_equal(pglock_unlock_all(c), PGLOCK_ESTATE);
    assert_int_equal(pglock_lock(c, &other, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_ESTATE);
    assert_int_equal(pglock_lock_any(c, &other, 1, PGLOCK_EXCLUSIVE, &index),
                     PGLOCK_ESTATE);
    assert_int_equal(pglock_heartbeat(c, 1000), PGLOCK_ESTATE);
    assert_int_equal(pglock_client_fencing_token(c, &token, 1000),
                     PGLOCK_ESTATE);
}

/* The loop mode: between steps the caller's thread may call the client,
 * but an unlock must not pass behind the hold's back. */
static void an_unlock_during_a_loop_mode_hold_is_refused(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = holds(primary, id, PGLOCK_HOLD_LOOP, &hold, &n);
    every_change_is_refused(c, id);
    assert_int_equal(pt_key_free(obs, id), 0);
    long t;
    assert_int_equal(pglock_hold_step(hold, &t), 0);
    assert_int_equal(pglock_hold_confirm(hold, 5000), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(n.calls, 0);
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_unlock(c, &k, PGLOCK_EXCLUSIVE), 0);
    assert_int_equal(pt_key_free(obs, id), 1);
    pglock_client_close(c);
    PQfinish(obs);
}

/* The thread mode: a call from the caller's thread while the hold's
 * thread heartbeats. */
static void an_unlock_all_during_a_thread_mode_hold_is_refused(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = holds(primary, id, PGLOCK_HOLD_THREAD, &hold, &n);
    /* across a few heartbeats (every LEASE_MS / 6) */
    int64_t end = pglock_now_ms() + LEASE_MS / 2;
    while (pglock_now_ms() < end)
        every_change_is_refused(c, id);
    assert_int_equal(pt_key_free(obs, id), 0);
    assert_int_equal(pglock_hold_loss(hold), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(n.calls, 0);
    assert_int_equal(pt_key_free(obs, id), 0);
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    PQfinish(obs);
}

static int readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    return poll(&p, 1, 0) == 1;
}

/* Close with a thread-mode hold running: the hold's thread stops first,
 * the locks are released, and the hold tells it; every call on the hold
 * is still safe until stop, which frees the client too. */
static void close_during_a_thread_mode_hold_stops_the_hold(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = holds(primary, id, PGLOCK_HOLD_THREAD, &hold, &n);
    poll(NULL, 0, (int)(LEASE_MS / 6)); /* a heartbeat or so */
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    assert_int_equal(n.calls, 1);
    assert_int_equal(n.code, PGLOCK_ECONNLOST);
    assert_int_equal(pglock_hold_loss(hold), PGLOCK_ECONNLOST);
    assert_non_null(strstr(pglock_hold_error(hold), "closed"));
    assert_true(readable(pglock_hold_loss_fd(hold)));
    long t;
    assert_int_equal(pglock_hold_step(hold, &t), PGLOCK_ESTATE);
    assert_int_equal(pglock_hold_fd(hold), -1);
    assert_int_equal(pglock_hold_stop(hold), PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 1);
    PQfinish(obs);
}

/* The same in loop mode, whose calls on the hold after the close are the
 * ones that could touch the freed client. */
static void close_during_a_loop_mode_hold_leaves_its_calls_safe(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = holds(primary, id, PGLOCK_HOLD_LOOP, &hold, &n);
    long t;
    assert_int_equal(pglock_hold_step(hold, &t), 0);
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    assert_int_equal(n.calls, 1);
    assert_int_equal(pglock_hold_step(hold, &t), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_hold_confirm(hold, 100), PGLOCK_ECONNLOST);
    assert_int_equal(pglock_hold_fd(hold), -1);
    assert_int_equal(pglock_hold_release(hold, 100), PGLOCK_ECONNLOST);
    assert_int_equal(n.calls, 1);
    PQfinish(obs);
}

/* fork() without exec: the child may only close its copy, and that
 * closes no more than its copy of the socket.  The child's exit status
 * says what its calls returned (0: as documented). */
static int child_closes(pglock_client *c, pglock_hold *hold, int64_t id)
{
    pglock_key k;
    pglock_key_int64(&k, id);
    if (pglock_unlock(c, &k, PGLOCK_EXCLUSIVE) != PGLOCK_ESTATE)
        return 1;
    if (hold && pglock_hold_step(hold, NULL) != PGLOCK_ESTATE)
        return 2;
    pglock_client_close(c);
    if (hold && pglock_hold_stop(hold) != PGLOCK_ESTATE)
        return 3;
    return 0;
}

static void fork_child(pglock_client *c, pglock_hold *hold, int64_t id)
{
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0)
        _exit(child_closes(c, hold, id));
    int status;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

static void a_forked_childs_close_keeps_the_parents_lock(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = holds(primary, id, PGLOCK_HOLD_LOOP, &hold, &n);
    int pid = pglock_client_backend_pid(c);
    fork_child(c, hold, id);
    assert_int_equal(pt_key_free(obs, id), 0);
    assert_int_equal(pt_backend_advisory_granted(obs, pid), 1);
    assert_int_equal(pglock_hold_confirm(hold, 5000), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(n.calls, 0);
    /* and without a hold: the client's own calls go on in the parent */
    fork_child(c, NULL, id);
    assert_int_equal(pt_key_free(obs, id), 0);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    pglock_client_close(c);
    assert_int_equal(pt_key_free(obs, id), 1);
    PQfinish(obs);
}

/* The thread mode's parent: its hold's thread is not in the child. */
static void a_forked_child_leaves_a_thread_mode_hold_running(void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    notice n = {0};
    pglock_hold *hold;
    pglock_client *c = holds(primary, id, PGLOCK_HOLD_THREAD, &hold, &n);
    fork_child(c, NULL, id);
    /* a few heartbeats after the child's close, on the same session */
    poll(NULL, 0, (int)(LEASE_MS / 2));
    assert_int_equal(pt_key_free(obs, id), 0);
    assert_int_equal(pglock_hold_loss(hold), 0);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(n.calls, 0);
    pglock_client_close(c);
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(an_unlock_during_a_loop_mode_hold_is_refused),
        cmocka_unit_test(an_unlock_all_during_a_thread_mode_hold_is_refused),
        cmocka_unit_test(close_during_a_thread_mode_hold_stops_the_hold),
        cmocka_unit_test(close_during_a_loop_mode_hold_leaves_its_calls_safe),
        cmocka_unit_test(a_forked_childs_close_keeps_the_parents_lock),
        cmocka_unit_test(a_forked_child_leaves_a_thread_mode_hold_running),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
