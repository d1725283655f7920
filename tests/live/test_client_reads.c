/*
 * The reads a program makes on its lock client's own connection, through
 * the client (pglock_client_holders(), pglock_client_key_resolve()), as
 * pglock run does for its busy line, its slots and its legacy keys:
 * - the holders list shows another session's lock as that session holds
 *   it, and the client's own;
 * - a legacy key's value is the server's, and the lock taken with it is
 *   the one a plain pg_advisory_lock(hashtext(...)) contends for;
 * - in a holding transaction, a read that fails (cancelled at its bound)
 *   costs only the last lock statement's savepoint: the lock stays held,
 *   pglock_lock() says PGLOCK_ESTATE until a heartbeat confirms the lease,
 *   and then both work again;
 * - under a managed hold the read is refused and changes nothing; on a
 *   lost connection it is PGLOCK_ECONNLOST and the connection is closed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

/* The granted entry of pid among list's, or NULL. */
static const pglock_holder *granted_to(const pglock_holders *list, int pid)
{
    for (int i = 0; i < pglock_holders_count(list); i++) {
        const pglock_holder *e = pglock_holders_get(list, i);
        if (e->granted && e->pid == pid)
            return e;
    }
    return NULL;
}

static void the_holders_are_read_on_the_clients_connection(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    int64_t id = pt_unique_key();
    PGconn *other = pt_connect_holding(primary, id);
    int other_pid = PQbackendPID(other);
    pglock_key k;
    pglock_key_int64(&k, id);
    pglock_client *c = pt_open_client(primary, NULL);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_EBUSY);

    pglock_holders *list = NULL;
    assert_int_equal(pglock_client_holders(&list, c, &k, 1, 0, 5000), 0);
    const pglock_holder *e = granted_to(list, other_pid);
    assert_non_null(e);
    assert_int_equal(e->key.id, id);
    assert_int_equal(e->mode, PGLOCK_EXCLUSIVE);
    assert_null(granted_to(list, pglock_client_backend_pid(c)));
    pglock_holders_free(list);

    /* the other session goes; the client takes it and is listed */
    PQfinish(other);
    pglock_key mine;
    int64_t mine_id = pt_unique_key();
    pglock_key_int64(&mine, mine_id);
    assert_int_equal(pglock_lock(c, &mine, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pglock_client_holders(&list, c, &mine, 1, 0, 5000), 0);
    assert_non_null(granted_to(list, pglock_client_backend_pid(c)));
    pglock_holders_free(list);
    pglock_client_close(c);
}

static void a_legacy_key_is_resolved_on_the_client(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    char name[64];
    snprintf(name, sizeof name, "client-reads-%lld",
             (long long)pt_unique_key());
    pglock_key k;
    assert_int_equal(pglock_key_hashtext(&k, name), 0);
    pglock_client *c = pt_open_client(primary, NULL);
    assert_int_equal(pglock_client_key_resolve(c, &k), 0);
    assert_true(k.resolved);
    assert_int_equal(k.id,
                     pt_query_intf(obs, "SELECT hashtext('%s')::bigint", name));
    /* the lock it names is the one a plain client of hashtext() wants */
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_int_equal(pt_query_intf(obs,
                                   "SELECT pg_try_advisory_lock("
                                   "hashtext('%s'))::int",
                                   name),
                     0);
    pglock_client_close(c);
    PQfinish(obs);
}

static void a_failed_read_in_the_holding_transaction_keeps_the_lock(
    void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.lifetime = PGLOCK_LIFETIME_XACT;
    pglock_key k;
    int64_t id;
    pglock_client *c = pt_client_holding(primary, &o, &k, &id, NULL);
    assert_false(pt_key_free(obs, id));

    /* the holders read needs pg_database: a session that locks it out
     * makes the read wait until its bound cancels it */
    PGconn *blocker = pt_connect(primary);
    pt_exec_ok(blocker, "BEGIN");
    pt_exec_ok(blocker, "LOCK TABLE pg_catalog.pg_database IN ACCESS "
                        "EXCLUSIVE MODE");
    pglock_holders *list = NULL;
    assert_int_equal(pglock_client_holders(&list, c, &k, 1, 0, 300),
                     PGLOCK_ETIMEDOUT);
    assert_null(list);
    pt_exec_ok(blocker, "ROLLBACK");
    PQfinish(blocker);

    /* the lock is still held, and the client knows what it must do */
    assert_false(pt_key_free(obs, id));
    pglock_key other;
    pglock_key_int64(&other, pt_unique_key());
    assert_int_equal(pglock_lock(c, &other, PGLOCK_EXCLUSIVE, PGLOCK_TRY),
                     PGLOCK_ESTATE);
    assert_int_equal(pglock_client_holders(&list, c, &k, 1, 0, 5000),
                     PGLOCK_ESTATE);
    assert_int_equal(pglock_heartbeat(c, 5000), 0);
    assert_false(pt_key_free(obs, id));
    assert_int_equal(pglock_client_holders(&list, c, &k, 1, 0, 5000), 0);
    assert_int_equal(pglock_holders_count(list), 1);
    pglock_holders_free(list);
    assert_int_equal(pglock_lock(c, &other, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    pglock_client_close(c);
    PQfinish(obs);
}

static void a_read_under_a_hold_is_refused_and_a_lost_one_closes(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    pglock_key k;
    int64_t id;
    int pid;
    pglock_client *c = pt_client_holding(primary, NULL, &k, &id, &pid);
    pglock_hold *h = NULL;
    assert_int_equal(pglock_hold_start(&h, c, NULL), 0);
    pglock_holders *list = NULL;
    assert_int_equal(pglock_client_holders(&list, c, &k, 1, 0, 5000),
                     PGLOCK_ESTATE);
    pglock_key legacy;
    pglock_key_hashtext(&legacy, "under-a-hold");
    assert_int_equal(pglock_client_key_resolve(c, &legacy), PGLOCK_ESTATE);
    assert_false(legacy.resolved);
    assert_int_equal(pglock_hold_stop(h), 0);
    assert_false(pt_key_free(obs, id));

    /* the backend goes: the read says so, and the connection is closed */
    assert_int_equal(
        pt_query_intf(obs, "SELECT pg_terminate_backend(%d)::int", pid), 1);
    assert_int_equal(pglock_client_holders(&list, c, &k, 1, 0, 5000),
                     PGLOCK_ECONNLOST);
    assert_int_equal(pglock_client_socket(c), -1);
    assert_int_equal(pglock_client_key_resolve(c, &legacy), PGLOCK_ECONNLOST);
    pglock_client_close(c);
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_holders_are_read_on_the_clients_connection),
        cmocka_unit_test(a_legacy_key_is_resolved_on_the_client),
        cmocka_unit_test(
            a_failed_read_in_the_holding_transaction_keeps_the_lock),
        cmocka_unit_test(a_read_under_a_hold_is_refused_and_a_lost_one_closes),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
