/*
 * Waiting: the server waits, the timeout is kept, an interrupt or a
 * deadline cancels the server-side wait and leaves no waiter queued (nor
 * a thread of its cancel running), and a lock granted in the instant a
 * wait fails is reported as held.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "support.h"

typedef struct waiter {
    pglock_client *c;
    pglock_key key;
    pglock_mode mode;
    long timeout_ms;
    int rc;
    int64_t took_ms;
} waiter;

static void *wait_main(void *arg)
{
    waiter *w = arg;
    int64_t t0 = pt_now_ms();
    w->rc = pglock_lock(w->c, &w->key, w->mode, w->timeout_ms);
    w->took_ms = pt_now_ms() - t0;
    return NULL;
}

/* Starts w waiting for the bigint id in a thread (to be joined) and
 * returns once the server, seen from obs, shows its backend waiting. */
static pthread_t start_waiting(waiter *w, int64_t id, PGconn *obs)
{
    int pid = pglock_client_backend_pid(w->c); /* before w->c is busy */
    pglock_key_int64(&w->key, id);
    pthread_t t;
    pthread_create(&t, NULL, wait_main, w);
    assert_true(pt_wait_backend_waiting(obs, pid, 10000));
    return t;
}

static void a_waiter_is_woken_when_the_holder_releases(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    waiter w = {.c = pt_open_client(primary, NULL),
                .mode = PGLOCK_EXCLUSIVE,
                .timeout_ms = PGLOCK_WAIT_FOREVER};
    pthread_t t = start_waiting(&w, id, holder);
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, 0);
    assert_false(pt_key_free(holder, id));
    pglock_client_close(w.c);
    assert_true(pt_key_free(holder, id));
    PQfinish(holder);
}

static void a_timeout_returns_and_leaves_no_waiter(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_client *c = pt_open_client(primary, NULL);
    pglock_key k;
    pglock_key_int64(&k, id);

    int64_t t0 = pt_now_ms();
    int rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 300);
    int64_t took = pt_now_ms() - t0;
    assert_int_equal(rc, PGLOCK_ETIMEDOUT);
    /* The server's lock_timeout ended it (not the client's deadline). */
    assert_string_equal(pglock_client_sqlstate(c), "55P03");
    assert_true(took < 300 + 2000); /* within its deadline, generously */
    int pid = pglock_client_backend_pid(c);
    assert_int_equal(pt_backend_waiting_on_advisory(holder, pid), 0);
    assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    assert_int_equal(pglock_lock_count(c, &k, PGLOCK_EXCLUSIVE), 0);
    /* The client is still usable, and lock_timeout was for that wait only. */
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 300), 0);
    pglock_client_close(c);
    PQfinish(holder);
}

/* The one interrupt: a readable interrupt_fd (a self-pipe, say) ends the
 * wait at once; the library never reads it, and once the caller drains
 * it the client waits again. */
static void an_interrupt_fd_ends_the_wait_leaving_nothing_behind(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.interrupt_fd = p[0];
    waiter w = {.c = pt_open_client(primary, &o),
                .mode = PGLOCK_EXCLUSIVE,
                .timeout_ms = PGLOCK_WAIT_FOREVER};
    int pid = pglock_client_backend_pid(w.c);
    pthread_t t = start_waiting(&w, id, holder);
    assert_int_equal(write(p[1], "x", 1), 1);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, PGLOCK_EINTR);
    assert_int_equal(pt_backend_waiting_on_advisory(holder, pid), 0);
    assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    assert_non_null(strstr(pglock_client_error(w.c), "interrupted"));
    /* the byte is still there: the library never reads the fd */
    char b;
    assert_int_equal(read(p[0], &b, 1), 1);
    /* drained: the client still works */
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    assert_int_equal(pglock_lock(w.c, &w.key, PGLOCK_EXCLUSIVE, 1000), 0);
    pglock_client_close(w.c);
    close(p[0]);
    close(p[1]);
    PQfinish(holder);
}

/* The holder releases and cancels the waiter in one statement: the server
 * grants the lock and then delivers the cancel, so the waiter may get an
 * error for a lock it holds.  It must be reported as held, every time. */
static void a_grant_at_cancel_is_reported_as_held(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *holder = pt_connect(primary);
    PGconn *obs = pt_connect(primary);
    pglock_client *c = pt_open_client(primary, NULL);
    int pid = pglock_client_backend_pid(c);
    int tries = getenv("PGLOCK_TEST_RACE_TRIES")
                    ? atoi(getenv("PGLOCK_TEST_RACE_TRIES"))
                    : 200;
    for (int i = 0; i < tries; i++) {
        int64_t id = pt_unique_key();
        pt_execf(holder, "SELECT pg_advisory_lock(%lld)", (long long)id);
        waiter w = {.c = c, .mode = PGLOCK_EXCLUSIVE, .timeout_ms = 30000};
        pthread_t t = start_waiting(&w, id, obs);
        pt_execf(holder,
                 "SELECT pg_advisory_unlock(%lld),"
                 " pg_cancel_backend(%d)",
                 (long long)id, pid);
        pthread_join(t, NULL);
        if (w.rc != 0)
            fail_msg("try %d: %s (%s)", i, pglock_strerror(w.rc),
                     pglock_client_error(c));
        assert_false(pt_key_free(obs, id));
        assert_int_equal(pglock_unlock(c, &w.key, PGLOCK_EXCLUSIVE), 0);
        assert_true(pt_key_free(obs, id));
    }
    pglock_client_close(c);
    PQfinish(obs);
    PQfinish(holder);
}

/* The other side of the race: the cancel wins and the lock is not held. */
static void a_cancel_before_the_grant_is_not_held(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pglock_client *c = pt_open_client(primary, NULL);
    int pid = pglock_client_backend_pid(c);
    waiter w = {.c = c, .mode = PGLOCK_EXCLUSIVE, .timeout_ms = 30000};
    pthread_t t = start_waiting(&w, id, holder);
    pt_execf(holder, "SELECT pg_cancel_backend(%d)", pid);
    pthread_join(t, NULL);
    assert_int_equal(w.rc, PGLOCK_EINTR); /* someone cancelled it */
    assert_int_equal(pt_backend_advisory_granted(holder, pid), 0);
    pglock_client_close(c);
    PQfinish(holder);
}

/* Entries of a /proc directory: a process's threads or descriptors. */
static int proc_entries(const char *dir)
{
    DIR *d = opendir(dir);
    assert_non_null(d);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* Through the harness's proxy, cut the network during a wait: the wait
 * returns by its deadline (timeout + cancel timeout), the connection is
 * given up, and the server does not keep the waiter.  The cancel cannot
 * get through either (the proxy accepts its connection and swallows its
 * request, so PQcancel() waits for ever): it is ended at the cancel
 * timeout, and no thread of the call is left running, nor, once the
 * client is closed, a descriptor (the cancel's socket included). */
static void a_cut_network_wait_returns_by_its_deadline(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_env_or_skip("PGLOCK_TEST_PROXY_CTL");
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *holder = pt_connect_holding(primary, id);
    pt_proxy_heal(); /* whatever the proxy's control keeps open, now */
    int threads = proc_entries("/proc/self/task");
    int fds = proc_entries("/proc/self/fd");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.cancel_timeout_ms = 500;
    o.lease_ms = 3000;
    pglock_client *c = pt_open_client(proxy, &o);
    int pid = pglock_client_backend_pid(c);
    pglock_key k;
    pglock_key_int64(&k, id);

    /* Cut first: neither the server's lock_timeout error nor the cancel
     * can get through. */
    pt_proxy_cut();
    int64_t t0 = pt_now_ms();
    int rc = pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 800);
    int64_t took = pt_now_ms() - t0;
    /* Joined, a thread may still be listed for an instant while the
     * kernel tears it down; one left running would stay while the cut
     * lasts, since its PQcancel() waits for the swallowed request. */
    int threads_after = proc_entries("/proc/self/task");
    for (int64_t end = pt_now_ms() + 1000;
         threads_after != threads && pt_now_ms() < end;
         threads_after = proc_entries("/proc/self/task"))
        usleep(1000);
    int socket_after = pglock_client_socket(c);
    pglock_client_close(c);
    int fds_after = proc_entries("/proc/self/fd");
    pt_proxy_heal();
    print_message("cut network: %s after %lld ms; threads %d -> %d, "
                  "descriptors %d -> %d\n",
                  pglock_err_name(rc), (long long)took, threads, threads_after,
                  fds, fds_after);
    assert_int_equal(rc, PGLOCK_ECONNLOST);
    assert_true(took < 800 + 250 + 500 + 1500);
    assert_int_equal(socket_after, -1);
    assert_int_equal(threads_after, threads);
    assert_int_equal(fds_after, fds);
    /* The server ends the silent session by itself (the lease). */
    assert_true(pt_wait_backend_gone(holder, pid, 10000));
    pt_execf(holder, "SELECT pg_advisory_unlock(%lld)", (long long)id);
    PQfinish(holder);
}

/* When (ms since the epoch) backend pid's current wait for an advisory
 * lock began (pg_locks.waitstart, PostgreSQL 14+); 0 when it waits for
 * none. */
static long wait_began(PGconn *obs, int pid)
{
    return pt_query_intf(obs,
                         "SELECT coalesce(max((extract(epoch FROM waitstart)"
                         " * 1000)::bigint), 0) FROM pg_locks WHERE"
                         " locktype = 'advisory' AND NOT granted AND pid = %d",
                         pid);
}

typedef struct requeued {
    PGconn *obs;
    int pid;
    long first;
} requeued;

static int queued_again(void *arg)
{
    requeued *r = arg;
    long now = wait_began(r->obs, r->pid);
    return now != 0 && now != r->first;
}

/* A key held by a connection of its own (holder), and a client with
 * lease_ms (pid: its backend) waiting for it for timeout_ms. */
typedef struct leased {
    PGconn *holder;
    int64_t id;
    waiter w;
    int pid;
} leased;

/* Sets l up and starts its waiter's thread (returned, to be joined). */
static pthread_t leased_waiting(leased *l, const char *primary, long lease_ms,
                                long timeout_ms)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lease_ms = lease_ms;
    l->id = pt_unique_key();
    l->holder = pt_connect_holding(primary, l->id);
    l->w = (waiter){.c = pt_open_client(primary, &o),
                    .mode = PGLOCK_EXCLUSIVE,
                    .timeout_ms = timeout_ms};
    l->pid = pglock_client_backend_pid(l->w.c);
    return start_waiting(&l->w, l->id, l->holder);
}

/* Closes l's client and holder. */
static void leased_end(leased *l)
{
    pglock_client_close(l->w.c);
    PQfinish(l->holder);
}

/* A wait longer than T_s goes in slices of T_s, each ended by the
 * server's lock_timeout and asked for again at once: the waiter is queued
 * anew (a new waitstart), is still woken by the release and counts the
 * lock once; a timeout names the whole wait, not its last slice. */
static void a_wait_longer_than_the_lease_goes_in_slices(void **state)
{
    (void)state;
    leased l;
    pthread_t t = leased_waiting(&l, pt_env_or_skip("PGLOCK_TEST_PRIMARY"),
                                 2000, 5000);
    pthread_join(t, NULL);
    print_message("a 5000 ms wait, lease 2000 ms: %s after %lld ms\n",
                  pglock_err_name(l.w.rc), (long long)l.w.took_ms);
    assert_int_equal(l.w.rc, PGLOCK_ETIMEDOUT);
    assert_string_equal(pglock_client_sqlstate(l.w.c), "55P03");
    assert_non_null(
        strstr(pglock_client_error(l.w.c), "timed out after 5000 ms"));
    assert_int_equal(pt_backend_waiting_on_advisory(l.holder, l.pid), 0);

    l.w.timeout_ms = PGLOCK_WAIT_FOREVER;
    t = start_waiting(&l.w, l.id, l.holder);
    requeued r = {.obs = l.holder,
                  .pid = l.pid,
                  .first = wait_began(l.holder, l.pid)};
    assert_true(pt_wait_until(queued_again, &r, 10000));
    pt_execf(l.holder, "SELECT pg_advisory_unlock(%lld)", (long long)l.id);
    pthread_join(t, NULL);
    assert_int_equal(l.w.rc, 0);
    assert_int_equal(pglock_lock_count(l.w.c, &l.w.key, PGLOCK_EXCLUSIVE), 1);
    assert_int_equal(pglock_unlock(l.w.c, &l.w.key, PGLOCK_EXCLUSIVE), 0);
    assert_true(pt_key_free(l.holder, l.id));
    leased_end(&l);
}

/* A frozen server: its processes stopped (SIGSTOP here: the waiter's
 * backend), its kernel still answering TCP, so no keepalive or socket
 * error ends a wait on it.  A wait for ever still ends, about T_s after
 * the server fell silent: the slice goes unanswered, then the cancel, and
 * the connection is closed (PGLOCK_ECONNLOST), which frees whatever the
 * backend may be granted once it runs again. */
static void a_frozen_backend_ends_a_wait_for_ever_after_about_the_lease(
    void **state)
{
    (void)state;
    leased l;
    pthread_t t = leased_waiting(&l, pt_env_or_skip("PGLOCK_TEST_PRIMARY"),
                                 3000, PGLOCK_WAIT_FOREVER);
    if (kill(l.pid, SIGSTOP) != 0) {
        int e = errno;
        pt_execf(l.holder, "SELECT pg_advisory_unlock(%lld)", (long long)l.id);
        pthread_join(t, NULL);
        leased_end(&l);
        if (e == EPERM)
            skip(); /* not the server's user, nor root */
        fail_msg("kill(%d, SIGSTOP): %s", l.pid, strerror(e));
    }
    /* Bounded: T_s + the deadline's grace + the cancel's 2 s is about
     * 5.3 s; 30 s leaves room for a loaded machine, and a wait that ended
     * only with the holder's release would not be bounded at all. */
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 30;
    int joined = pthread_timedjoin_np(t, NULL, &until) == 0;
    kill(l.pid, SIGCONT);
    if (!joined) {
        pt_execf(l.holder, "SELECT pg_advisory_unlock(%lld)", (long long)l.id);
        pthread_join(t, NULL);
        fail_msg("the wait on a frozen backend did not end within 30 s (%s)",
                 pglock_strerror(l.w.rc));
    }
    print_message("frozen backend, lease 3000 ms: %s after %lld ms: %s\n",
                  pglock_err_name(l.w.rc), (long long)l.w.took_ms,
                  pglock_client_error(l.w.c));
    assert_int_equal(l.w.rc, PGLOCK_ECONNLOST);
    assert_int_equal(pglock_client_socket(l.w.c), -1);
    /* thawed, it finds its client gone, and never holds the key */
    assert_true(pt_wait_backend_gone(l.holder, l.pid, 10000));
    pt_execf(l.holder, "SELECT pg_advisory_unlock(%lld)", (long long)l.id);
    assert_true(pt_key_free(l.holder, l.id));
    leased_end(&l);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(a_waiter_is_woken_when_the_holder_releases),
        cmocka_unit_test(a_timeout_returns_and_leaves_no_waiter),
        cmocka_unit_test(an_interrupt_fd_ends_the_wait_leaving_nothing_behind),
        cmocka_unit_test(a_grant_at_cancel_is_reported_as_held),
        cmocka_unit_test(a_cancel_before_the_grant_is_not_held),
        cmocka_unit_test(a_cut_network_wait_returns_by_its_deadline),
        cmocka_unit_test(a_wait_longer_than_the_lease_goes_in_slices),
        cmocka_unit_test(
            a_frozen_backend_ends_a_wait_for_ever_after_about_the_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
