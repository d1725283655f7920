/*
 * The lock connection's answers read in pieces, and together with other
 * messages: every heartbeat, confirmation, stop and release is still
 * confirmed, in session and in xact lifetime.
 *
 * With client_min_messages = debug5 the server flushes each DEBUG
 * notice as it is raised, and the extended protocol's commit (at Sync,
 * after CommandComplete) raises one: the release's answer then leaves
 * the server in several writes, ReadyForQuery alone in the last.  Over
 * TLS each write is a record of its own, and libpq reads one record per
 * PQconsumeInput(), so the answer comes in several reads (the TLS pass,
 * tests/run.sh TLS_SUITES, runs this file against a verify-full
 * primary).  The library once kept "the holding backend answered" in one
 * read's locals, and lost it at the next: the release of a `run
 * --lease=3s` exited 74.  A LISTEN on the lock connection adds
 * notifications that share a read with the answers.
 */
#include <stdio.h>
#include <stdlib.h>
#include "support.h"

#define LEASE_MS 3000L

/* The harness's primary with every DEBUG notice sent to the client. */
static const char *chatty_conninfo(void)
{
    static char buf[2048];
    snprintf(buf, sizeof buf, "%s options='-c client_min_messages=debug5'",
             pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    return buf;
}

/* Under the TLS pass, the lock connection really is TLS: the pieces are
 * records. */
static void tls_when_asked(pglock_client *c)
{
    if (getenv("PGLOCK_TEST_TLS_CA"))
        assert_int_equal(PQsslInUse(pglock_client_conn(c)), 1);
}

static pglock_client *chatty_holder(pglock_lifetime lifetime, int64_t *id)
{
    pglock_options o;
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    o.lifetime = lifetime;
    o.lease_ms = LEASE_MS;
    pglock_key k;
    pglock_client *c = pt_client_holding(chatty_conninfo(), &o, &k, id, NULL);
    tls_when_asked(c);
    return c;
}

typedef struct moved {
    const pglock_hold *hold;
    int64_t from;
} moved;

/* Two heartbeats confirmed since: the deadline moved on twice. */
static int confirmed_twice(void *arg)
{
    moved *m = arg;
    return pglock_hold_deadline(m->hold) >= m->from + 2 * (LEASE_MS / 6);
}

/* A thread-mode hold on c that has confirmed two heartbeats. */
static pglock_hold *hold_beating(pglock_client *c)
{
    pglock_hold *hold;
    assert_int_equal(pglock_hold_start(&hold, c, NULL), 0);
    moved m = {hold, pglock_hold_deadline(hold)};
    assert_true(pt_wait_until(confirmed_twice, &m, 4 * LEASE_MS));
    assert_int_equal(pglock_hold_loss(hold), 0);
    return hold;
}

static void release_in_pieces(pglock_lifetime lifetime)
{
    int64_t id;
    pglock_client *c = chatty_holder(lifetime, &id);
    pglock_hold *hold = hold_beating(c);
    assert_int_equal(pglock_hold_release(hold, 2000), 0);
    PGconn *obs = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    assert_true(pt_key_free(obs, id)); /* released, not dropped: at once */
    PQfinish(obs);
    pglock_client_close(c);
}

static void the_release_is_confirmed_when_its_answer_comes_in_pieces(void **s)
{
    (void)s;
    release_in_pieces(PGLOCK_LIFETIME_SESSION);
}

static void the_xact_release_is_confirmed_when_its_answer_comes_in_pieces(
    void **s)
{
    (void)s;
    release_in_pieces(PGLOCK_LIFETIME_XACT);
}

/* Stop keeps the locks (its last word is a heartbeat); the unlock and a
 * heartbeat of the caller's own come in pieces too. */
static void stop_heartbeat_and_unlock_are_confirmed_in_pieces(void **s)
{
    (void)s;
    int64_t id;
    pglock_client *c = chatty_holder(PGLOCK_LIFETIME_SESSION, &id);
    pglock_hold *hold = hold_beating(c);
    assert_int_equal(pglock_hold_stop(hold), 0);
    assert_int_equal(pglock_heartbeat(c, 2000), 0);
    PGconn *obs = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    assert_false(pt_key_free(obs, id));
    assert_int_equal(pglock_unlock_all(c), 0);
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
    pglock_client_close(c);
}

/* The loop mode's confirmation on demand, and notifications (one of
 * nearly 8000 bytes) arriving with the answers, in the same reads. */
static void confirm_on_demand_with_notifications_beside_the_answers(void **s)
{
    (void)s;
    int64_t id;
    pglock_options o;
    assert_int_equal(pglock_options_init(&o, PGLOCK_OPTIONS_VERSION), 0);
    o.lease_ms = LEASE_MS;
    pglock_key k;
    pglock_client *c = pt_client_holding(chatty_conninfo(), &o, &k, &id, NULL);
    tls_when_asked(c);
    /* Before the hold owns the connection: the test's own LISTEN. */
    PGresult *r = PQexec(pglock_client_conn(c), "LISTEN pglock_pieces");
    assert_int_equal(PQresultStatus(r), PGRES_COMMAND_OK);
    PQclear(r);
    pglock_hold_options ho;
    assert_int_equal(pglock_hold_options_init(&ho, PGLOCK_HOLD_OPTIONS_VERSION),
                     0);
    ho.drive = PGLOCK_HOLD_LOOP;
    pglock_hold *hold;
    assert_int_equal(pglock_hold_start(&hold, c, &ho), 0);
    PGconn *obs = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    for (int i = 0; i < 5; i++) {
        pt_exec_ok(obs, "SELECT pg_notify('pglock_pieces', "
                        "repeat('x', 7990)), pg_notify('pglock_pieces', 'y')");
        assert_int_equal(pglock_hold_confirm(hold, 2000), 0);
        long t;
        assert_int_equal(pglock_hold_step(hold, &t), 0);
    }
    assert_int_equal(pglock_hold_release(hold, 2000), 0);
    assert_true(pt_key_free(obs, id));
    PQfinish(obs);
    pglock_client_close(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            the_release_is_confirmed_when_its_answer_comes_in_pieces),
        cmocka_unit_test(
            the_xact_release_is_confirmed_when_its_answer_comes_in_pieces),
        cmocka_unit_test(stop_heartbeat_and_unlock_are_confirmed_in_pieces),
        cmocka_unit_test(
            confirm_on_demand_with_notifications_beside_the_answers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
