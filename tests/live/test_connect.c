/*
 * Bounded connections: pglock__connect_params() gives up on a server that
 * accepts and never answers (the proxy, cut) after connect_timeout, goes
 * on to the next host of a multi-host conninfo, returns soon after its
 * interrupt, and calls a conninfo libpq refuses PGLOCK_EINVAL;
 * pglock_client_open() connects the same way, its options'
 * connect_timeout_ms bounding each host where the conninfo sets no
 * connect_timeout of its own; pglock__exec_params()
 * cancels a query at its deadline and leaves the connection usable.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bounded_conn.h"
#include "support.h"

static PGconn *connect_to(const char *conninfo, int interrupt_fd,
                          pglock_error *err)
{
    const char *k[] = {"dbname", NULL}, *v[] = {conninfo, NULL};
    return pglock__connect_params(k, v, 1, -1, interrupt_fd, err);
}

static int proxy_port(void)
{
    const char *p = strstr(pt_env_or_skip("PGLOCK_TEST_PROXY"), "port=");
    return p ? atoi(p + 5) : 0;
}

static void a_server_that_never_answers_fails_after_connect_timeout(
    void **state)
{
    (void)state;
    char ci[256];
    snprintf(ci, sizeof ci, "%s connect_timeout=2",
             pt_env_or_skip("PGLOCK_TEST_PROXY"));
    pt_proxy_cut();
    pglock_error err = {0};
    PGconn *c = connect_to(ci, -1, &err);
    pt_proxy_heal();
    assert_null(c);
    assert_int_equal(err.code, PGLOCK_ECONNECT);
    if (!strstr(err.message, "no answer within 2 s (connect_timeout)"))
        fail_msg("message: %s", err.message);
}

/* The options' bound, to a server that never answers: the conninfo has
 * none, so 2000 ms is the host's connect_timeout; one the conninfo sets
 * wins (here 3 s). */
static void the_options_connect_timeout_bounds_a_silent_server(void **state)
{
    (void)state;
    const char *proxy = pt_env_or_skip("PGLOCK_TEST_PROXY");
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.connect_timeout_ms = 1500; /* whole seconds, at least 2: 2 s */
    pt_proxy_cut();
    pglock_client *c = NULL;
    int64_t t0 = pglock_now_ms();
    int rc = pglock_client_open(&c, proxy, &o);
    int64_t took = pglock_now_ms() - t0;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", pglock_client_error(c));
    pglock_client_close(c);
    char ci[256];
    snprintf(ci, sizeof ci, "%s connect_timeout=3", proxy);
    c = NULL;
    int rc3 = pglock_client_open(&c, ci, &o);
    char msg3[512];
    snprintf(msg3, sizeof msg3, "%s", pglock_client_error(c));
    pglock_client_close(c);
    pt_proxy_heal();
    printf("# gave up on the silent server after %lld ms\n", (long long)took);
    assert_int_equal(rc, PGLOCK_ECONNECT);
    if (!strstr(msg, "no answer within 2 s (connect_timeout)"))
        fail_msg("message: %s", msg);
    assert_int_equal(rc3, PGLOCK_ECONNECT);
    if (!strstr(msg3, "no answer within 3 s (connect_timeout)"))
        fail_msg("message: %s", msg3);
}

static void the_next_host_is_tried_after_a_silent_one(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY_TCP");
    const char *pp = strstr(primary, "port=");
    assert_non_null(pp);
    char ci[256];
    snprintf(ci, sizeof ci,
             "host=127.0.0.1,127.0.0.1 port=%d,%d user=postgres "
             "dbname=postgres connect_timeout=2",
             proxy_port(), atoi(pp + 5));
    pt_proxy_cut();
    pglock_error err = {0};
    PGconn *c = connect_to(ci, -1, &err);
    pt_proxy_heal();
    if (!c)
        fail_msg("not connected: %s", err.message);
    assert_int_equal(atoi(PQport(c)), atoi(pp + 5));
    assert_int_equal(pt_query_int(c, "SELECT 1"), 1);
    PQfinish(c);
}

/* The interrupt: a pipe, written 300 ms into the connect. */
static int stop[2];

static void *set_stop_later(void *arg)
{
    (void)arg;
    usleep(300 * 1000);
    ssize_t wr = write(stop[1], "x", 1);
    (void)wr;
    return NULL;
}

static void an_interrupt_ends_the_connect(void **state)
{
    (void)state;
    char ci[256];
    snprintf(ci, sizeof ci, "%s connect_timeout=60",
             pt_env_or_skip("PGLOCK_TEST_PROXY"));
    pt_proxy_cut();
    assert_int_equal(pipe(stop), 0);
    pthread_t t;
    pthread_create(&t, NULL, set_stop_later, NULL);
    pglock_error err = {0};
    PGconn *c = connect_to(ci, stop[0], &err);
    pthread_join(t, NULL);
    assert_null(c);
    assert_int_equal(err.code, PGLOCK_EINTR);

    /* the client's open connects the same way */
    char b;
    assert_int_equal(read(stop[0], &b, 1), 1);
    pthread_create(&t, NULL, set_stop_later, NULL);
    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.interrupt_fd = stop[0];
    pglock_client *client = NULL;
    assert_int_equal(pglock_client_open(&client, ci, &o), PGLOCK_EINTR);
    pthread_join(t, NULL);
    pglock_client_close(client);
    close(stop[0]);
    close(stop[1]);
    pt_proxy_heal();
}

static void a_conninfo_libpq_refuses_is_einval(void **state)
{
    (void)state;
    pglock_error err = {0};
    assert_null(connect_to("host=/tmp dbnme=x", -1, &err));
    assert_int_equal(err.code, PGLOCK_EINVAL);
    assert_non_null(strstr(err.message, "dbnme"));
    /* a secret libpq quotes is hidden */
    assert_null(connect_to("postgresql://u:s3cr%ZZet@/db", -1, &err));
    assert_int_equal(err.code, PGLOCK_EINVAL);
    assert_null(strstr(err.message, "s3cr"));
    pglock_client *client = NULL;
    assert_int_equal(pglock_client_open(&client, "host=/tmp dbnme=x", NULL),
                     PGLOCK_EINVAL);
    pglock_client_close(client);
}

static void a_query_past_its_deadline_is_cancelled(void **state)
{
    (void)state;
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    pglock_error err = {0};
    PGresult *r = pglock__exec_params(c, "SELECT pg_sleep(30)", 0, NULL, 300,
                                      &err);
    assert_null(r);
    assert_int_equal(err.code, PGLOCK_ETIMEDOUT);
    /* cancelled on the server: the same connection answers at once */
    const char *params[1] = {"41"};
    r = pglock__exec_params(c, "SELECT $1::int + 1", 1, params, 5000, &err);
    assert_non_null(r);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_string_equal(PQgetvalue(r, 0, 0), "42");
    PQclear(r);
    /* a server error is a result, for the caller to read */
    r = pglock__exec_params(c, "SELECT 1/0", 0, NULL, 5000, &err);
    assert_non_null(r);
    assert_string_equal(PQresultErrorField(r, PG_DIAG_SQLSTATE), "22012");
    PQclear(r);
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(
            a_server_that_never_answers_fails_after_connect_timeout),
        cmocka_unit_test(the_options_connect_timeout_bounds_a_silent_server),
        cmocka_unit_test(the_next_host_is_tried_after_a_silent_one),
        cmocka_unit_test(an_interrupt_ends_the_connect),
        cmocka_unit_test(a_conninfo_libpq_refuses_is_einval),
        cmocka_unit_test(a_query_past_its_deadline_is_cancelled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
