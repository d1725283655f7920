/*
 * A dead client's lock is freed in a bounded time, with no lease set, and
 * through PgBouncer too.  Behind a pooler the server's socket is the
 * pooler's, which stays alive when the client is gone: no kernel
 * keepalive of ours reaches the client.  Only the holding transaction's
 * idle_in_transaction_session_timeout (T_s = dead_peer_ms without a
 * lease) frees it.
 *
 * The dead client is a process frozen with SIGSTOP while it holds: its
 * kernel still answers TCP, so neither the pooler nor the server can
 * tell it from a live client that went silent, the case a partition or
 * a dead host give too.
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>
#include "support.h"

#define DEAD_PEER_MS 2000L

/* In a child: opens a client on conninfo with no lease, locks id, says so
 * on fd, and freezes.  Never returns. */
static void hold_and_freeze(const char *conninfo, int64_t id, int fd)
{
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.dead_peer_ms = DEAD_PEER_MS;
    pglock_client *c = NULL;
    pglock_key k;
    pglock_key_int64(&k, id);
    if (pglock_client_open(&c, conninfo, &o) != 0 ||
        pglock_lock(c, &k, PGLOCK_EXCLUSIVE, 5000) != 0)
        _exit(1);
    char ok = 'x';
    if (write(fd, &ok, 1) != 1)
        _exit(1);
    raise(SIGSTOP);
    _exit(0);
}

static void a_frozen_clients_lock_is_freed_through_the_pooler_without_a_lease(
    void **s)
{
    (void)s;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *obs = pt_connect(primary);
    int64_t id = pt_unique_key();
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(NULL);
    pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        close(p[0]);
        hold_and_freeze(pooler, id, p[1]);
    }
    close(p[1]);
    char ok;
    assert_int_equal(read(p[0], &ok, 1), 1);
    close(p[0]);
    assert_false(pt_key_free(obs, id)); /* held by the client, which froze */
    int64_t from = pglock_now_ms();
    /* Bounded: T_s of silence, then the server ends the transaction; 5
     * T_s leaves room for a loaded machine, and never is not bounded. */
    int freed = pt_wait_key_free(obs, id, 5 * DEAD_PEER_MS);
    printf("# dead client behind the pooler, no lease, dead_peer_ms %ld: "
           "%s after %lld ms\n",
           DEAD_PEER_MS, freed ? "freed" : "still held",
           (long long)(pglock_now_ms() - from));
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    PQfinish(obs);
    assert_true(freed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            a_frozen_clients_lock_is_freed_through_the_pooler_without_a_lease),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
