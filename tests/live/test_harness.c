/*
 * test_harness.c — the test harness itself keeps its promises: each server
 * is what its variable says, the proxy cuts and counts, the pooler is in
 * transaction mode and gives itself away by its backend pid.
 */
#include "support.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void primary_answers_and_pids_match_directly(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    assert_int_equal(pt_query_int(c, "select 1"), 1);
    assert_int_equal(pt_query_int(c, "select pg_backend_pid()"),
                     PQbackendPID(c));
    assert_int_equal(pt_query_int(c, "select pg_is_in_recovery()"), 0);
    PQfinish(c);
}

/* The server's version is the harness's to report (the version matrix runs
 * every supported one), never a test's to assume. */
static long reported_version(void)
{
    const char *v = pt_env_or_skip("PGLOCK_TEST_SERVER_VERSION_NUM");
    char *end;
    long n = strtol(v, &end, 10);
    if (*end != '\0' || n < 90000)
        fail_msg(
            "PGLOCK_TEST_SERVER_VERSION_NUM=\"%s\" is not a server_version_num",
            v);
    return n;
}

static void primary_is_the_version_the_harness_reports(void **state)
{
    (void)state;
    long version = reported_version();
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    assert_int_equal(
        pt_query_int(c, "select current_setting('server_version_num')::int"),
        version);
    assert_int_equal(PQserverVersion(c), version);
    PQfinish(c);
}

static void primary_over_tcp_pids_match(void **state)
{
    (void)state;
    PGconn *t = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY_TCP"));
    assert_int_equal(pt_query_int(t, "select pg_backend_pid()"),
                     PQbackendPID(t));
    assert_int_equal(pt_query_int(t, "select inet_server_addr() = '127.0.0.1'"),
                     1);
    PQfinish(t);
}

static void ordinary_role_is_not_superuser(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_ORDINARY"));
    assert_int_equal(pt_query_int(c, "select current_user = 'pglock_user'"), 1);
    assert_int_equal(
        pt_query_int(
            c, "select usesuper from pg_user where usename = current_user"),
        0);
    PQfinish(c);
}

static void other_database_is_another_database(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_OTHER_DB"));
    assert_int_equal(
        pt_query_int(c, "select current_database() = 'pglock_other'"), 1);
    PQfinish(c);
}

static void password_role_needs_its_password(void **state)
{
    (void)state;
    const char *ci = pt_env_or_skip("PGLOCK_TEST_PW_CONNINFO");
    const char *pw = pt_env_or_skip("PGLOCK_TEST_PW_PASSWORD");
    char buf[1024];

    snprintf(buf, sizeof buf, "%s password=wrong-%s", ci, pw);
    PGconn *bad = PQconnectdb(buf);
    assert_int_not_equal(PQstatus(bad), CONNECTION_OK);
    assert_non_null(
        strstr(PQerrorMessage(bad), "password authentication failed"));
    PQfinish(bad);

    snprintf(buf, sizeof buf, "%s password=%s", ci, pw);
    PGconn *good = pt_connect(buf);
    assert_int_equal(pt_query_int(good, "select current_user = 'pglock_pw'"),
                     1);
    PQfinish(good);
}

static void down_address_refuses_at_once(void **state)
{
    (void)state;
    PGconn *c = PQconnectdb(pt_env_or_skip("PGLOCK_TEST_DOWN"));
    assert_int_not_equal(PQstatus(c), CONNECTION_OK);
    assert_non_null(strstr(PQerrorMessage(c), "refused"));
    PQfinish(c);
}

static void standby_is_in_recovery(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_STANDBY"));
    assert_int_equal(pt_query_int(c, "select pg_is_in_recovery()"), 1);
    /* A streaming standby runs the primary's major version. */
    assert_int_equal(
        pt_query_int(
            c, "select current_setting('server_version_num')::int / 10000"),
        reported_version() / 10000);
    PQfinish(c);
}

static void pooler_backend_pid_differs_from_server_pid(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_POOLER"));
    long server_pid = pt_query_int(c, "select pg_backend_pid()");
    assert_true(server_pid > 0);
    /* PQbackendPID() is PgBouncer's own cancel key, not a server pid. */
    assert_int_not_equal(server_pid, PQbackendPID(c));
    PQfinish(c);
}

static void pooler_is_in_transaction_mode(void **state)
{
    (void)state;
    PGconn *admin = pt_connect(pt_env_or_skip("PGLOCK_TEST_POOLER_ADMIN"));
    PGresult *res = PQexec(admin, "SHOW CONFIG");
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    int found = 0;
    for (int i = 0; i < PQntuples(res); i++)
        if (strcmp(PQgetvalue(res, i, 0), "pool_mode") == 0) {
            assert_string_equal(PQgetvalue(res, i, 1), "transaction");
            found = 1;
        }
    assert_true(found);
    PQclear(res);
    PQfinish(admin);

    /* Behaviour: once a's transaction ends, its server connection serves b
     * while a is still connected (PgBouncer reuses the most recently
     * released server); in session mode a would keep it. */
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *a = pt_connect(pooler);
    PGconn *b = pt_connect(pooler);
    long pid_a = pt_query_int(a, "select pg_backend_pid()");
    long pid_b = pt_query_int(b, "select pg_backend_pid()");
    assert_int_equal(pid_a, pid_b);
    PQfinish(a);
    PQfinish(b);
}

/* Waits up to timeout_ms for the result of the query sent on c.
 * Returns 1 if a result arrived, 0 on timeout or a broken connection. */
static int result_within(PGconn *c, long timeout_ms)
{
    long deadline = pt_now_ms() + timeout_ms;
    while (PQisBusy(c)) {
        long left = deadline - pt_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = PQsocket(c), .events = POLLIN};
        if (poll(&p, 1, (int)left) > 0 && !PQconsumeInput(c))
            return 0;
    }
    PGresult *res = PQgetResult(c);
    int ok = PQresultStatus(res) == PGRES_TUPLES_OK;
    PQclear(res);
    while ((res = PQgetResult(c)) != NULL)
        PQclear(res);
    return ok;
}

static void cut_proxy_misses_deadline_and_heal_serves_new_connections(
    void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    PGconn *old = pt_connect(proxy);
    assert_int_equal(pt_query_int(old, "select 1"), 1);

    pt_proxy_cut();
    assert_int_equal(PQsendQuery(old, "select 1"), 1);
    assert_int_equal(PQsetnonblocking(old, 1), 0);
    assert_int_equal(result_within(old, 1000), 0);
    /* The dead network closed nothing. */
    assert_int_equal(PQstatus(old), CONNECTION_OK);

    pt_proxy_heal();
    /* The old connection lost its query: the proxy closes it at the heal. */
    assert_int_equal(result_within(old, 5000), 0);
    PQfinish(old);

    PGconn *fresh = pt_connect(proxy);
    assert_int_equal(pt_query_int(fresh, "select 2"), 2);
    PQfinish(fresh);
}

static void connection_made_during_cut_gets_nothing(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pt_proxy_cut();
    PGconn *c = PQconnectStart(proxy);
    assert_non_null(c);
    long deadline = pt_now_ms() + 1000;
    PostgresPollingStatusType st = PGRES_POLLING_WRITING;
    while (st != PGRES_POLLING_OK && st != PGRES_POLLING_FAILED &&
           pt_now_ms() < deadline) {
        struct pollfd p = {.fd = PQsocket(c),
                           .events = st == PGRES_POLLING_READING ? POLLIN
                                                                 : POLLOUT};
        poll(&p, 1, 50);
        if (p.revents)
            st = PQconnectPoll(c);
    }
    assert_int_not_equal(st, PGRES_POLLING_OK);
    assert_int_not_equal(st, PGRES_POLLING_FAILED);
    pt_proxy_heal();
    PQfinish(c);
}

static void proxy_counts_one_roundtrip_per_query(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_PROXY"));
    pt_proxy_reset();
    PQclear(PQexec(c, "select 1"));
    assert_int_equal(pt_proxy_roundtrips(), 1);
    assert_int_equal(pt_proxy_messages(), 1);

    pt_proxy_reset();
    const char *params[1] = {"42"};
    PGresult *res = PQexecParams(c, "select $1::int", 1, NULL, params, NULL,
                                 NULL, 0);
    assert_int_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    PQclear(res);
    assert_int_equal(pt_proxy_roundtrips(), 1);
    /* Parse, Bind, Describe, Execute, Sync. */
    assert_int_equal(pt_proxy_messages(), 5);
    PQfinish(c);

    /* A whole connection: SSLRequest (sslmode=prefer), startup, Terminate. */
    pt_proxy_reset();
    PQfinish(pt_connect(pt_env_or_skip("PGLOCK_TEST_PROXY")));
    assert_int_equal(pt_proxy_roundtrips(), 0);
    assert_true(pt_proxy_messages() >= 2);
}

static void restarted_primary_is_reachable_directly_and_through_others(
    void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    const char *pooler = pt_env_or_skip("PGLOCK_TEST_POOLER");
    PGconn *before = pt_connect(primary);
    long pid = pt_query_int(before, "select pg_backend_pid()");

    pt_harness("restart-primary");

    PGresult *res = PQexec(before, "select 1");
    assert_int_not_equal(PQresultStatus(res), PGRES_TUPLES_OK);
    PQclear(res);
    PQfinish(before);
    PGconn *after = pt_connect(primary);
    assert_int_not_equal(pt_query_int(after, "select pg_backend_pid()"), pid);
    PQfinish(after);
    PGconn *p = pt_connect(proxy);
    assert_int_equal(pt_query_int(p, "select 1"), 1);
    PQfinish(p);
    PGconn *b = pt_connect(pooler);
    assert_int_equal(pt_query_int(b, "select 1"), 1);
    PQfinish(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(primary_answers_and_pids_match_directly),
        cmocka_unit_test(primary_is_the_version_the_harness_reports),
        cmocka_unit_test(primary_over_tcp_pids_match),
        cmocka_unit_test(ordinary_role_is_not_superuser),
        cmocka_unit_test(other_database_is_another_database),
        cmocka_unit_test(password_role_needs_its_password),
        cmocka_unit_test(down_address_refuses_at_once),
        cmocka_unit_test(standby_is_in_recovery),
        cmocka_unit_test(pooler_backend_pid_differs_from_server_pid),
        cmocka_unit_test(pooler_is_in_transaction_mode),
        cmocka_unit_test(
            cut_proxy_misses_deadline_and_heal_serves_new_connections),
        cmocka_unit_test(connection_made_during_cut_gets_nothing),
        cmocka_unit_test(proxy_counts_one_roundtrip_per_query),
        cmocka_unit_test(
            restarted_primary_is_reachable_directly_and_through_others),
    };
    return cmocka_run_group_tests_name("harness", tests, NULL, NULL);
}
