/*
 * Opening a client the ways libpq allows: a conninfo string, a URI,
 * keyword/value arrays (with expand_dbname), an empty conninfo that leaves
 * everything to the PG* variables; application_name: the caller's wins,
 * else the option's, else "pglock" (a fallback_application_name).  Each
 * checked on the server, for the backend the client really uses.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

/* The application_name and database the server shows for c's backend,
 * as "app|db" in buf. */
static void seen_by_server(PGconn *obs, pglock_client *c, char *buf, size_t len)
{
    char sql[200];
    snprintf(sql, sizeof sql,
             "SELECT application_name || '|' || datname FROM"
             " pg_stat_activity WHERE pid = %d",
             pglock_client_backend_pid(c));
    PGresult *r = PQexec(obs, sql);
    assert_int_equal(PQresultStatus(r), PGRES_TUPLES_OK);
    assert_int_equal(PQntuples(r), 1);
    snprintf(buf, len, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
}

/* Takes and checks one lock, so that each way of opening is proven to
 * give a working lock connection. */
static void locks(PGconn *obs, pglock_client *c)
{
    int64_t id = pt_unique_key();
    pglock_key k;
    pglock_key_int64(&k, id);
    assert_int_equal(pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    assert_false(pt_key_free(obs, id));
}

static void application_name_precedence(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    PGconn *obs = pt_connect(primary);
    char buf[256], conninfo[1024];

    pglock_client *c = pt_open_client(primary, NULL);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "pglock|postgres");
    pglock_client_close(c);

    pglock_options o;
    pglock_options_init(&o, PGLOCK_OPTIONS_VERSION);
    o.application_name = "billing-worker";
    c = pt_open_client(primary, &o);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "billing-worker|postgres");
    pglock_client_close(c);

    snprintf(conninfo, sizeof conninfo, "%s application_name=callers-own",
             primary);
    c = pt_open_client(conninfo, &o);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "callers-own|postgres");
    locks(obs, c);
    pglock_client_close(c);
    PQfinish(obs);
}

static void keyword_arrays_with_expand_dbname(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *host = pt_env_or_skip("PGHOST");
    const char *port = pt_env_or_skip("PGPORT");
    PGconn *obs = pt_connect(primary);
    char buf[256];

    /* dbname carries a whole conninfo; a later keyword overrides it */
    const char *k1[] = {"dbname", "application_name", NULL};
    const char *v1[] = {primary, "arrays-1", NULL};
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open_params(&c, k1, v1, NULL), 0);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "arrays-1|postgres");
    locks(obs, c);
    pglock_client_close(c);

    /* plain keywords, another database */
    const char *k2[] = {"host", "port", "user", "dbname", NULL};
    const char *v2[] = {host, port, "postgres", "pglock_other", NULL};
    assert_int_equal(pglock_client_open_params(&c, k2, v2, NULL), 0);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "pglock|pglock_other");
    assert_string_equal(pglock_client_database(c), "pglock_other");
    pglock_client_close(c);
    PQfinish(obs);
}

/* A NULL value is libpq's "not given" (PGHOST decides here).  The client
 * keeps its parameters for the fencing token's second connection: all of
 * them are freed at close, those after a NULL value too (under valgrind
 * and LeakSanitizer a leak fails this test). */
static void a_null_value_among_the_keywords_is_not_given(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *port = pt_env_or_skip("PGPORT");
    pt_env_or_skip("PGHOST");
    PGconn *obs = pt_connect(primary);
    const char *k[] = {"host", "port", "dbname", "connect_timeout", NULL};
    const char *v[] = {NULL, port, "pglock_other", "5", NULL};
    pglock_client *c = NULL;
    assert_int_equal(pglock_client_open_params(&c, k, v, NULL), 0);
    assert_string_equal(pglock_client_database(c), "pglock_other");
    int64_t token = 0;
    pglock_key key;
    pglock_key_int64(&key, pt_unique_key());
    assert_int_equal(pglock_lock(c, &key, PGLOCK_EXCLUSIVE, PGLOCK_TRY), 0);
    /* the kept parameters at work: the token's second connection */
    assert_int_equal(pglock_client_fencing_token(c, &token, 5000), 0);
    assert_true(token > 0);
    pglock_client_close(c);
    PQfinish(obs);
}

static void a_uri_and_the_pg_variables(void **state)
{
    (void)state;
    const char *primary = pt_env_or_skip("PGLOCK_TEST_PRIMARY");
    const char *port = pt_env_or_skip("PGPORT");
    pt_env_or_skip("PGHOST");
    PGconn *obs = pt_connect(primary);
    char buf[256], uri[512];

    snprintf(uri, sizeof uri,
             "postgresql://postgres@127.0.0.1:%s/pglock_other"
             "?application_name=by-uri",
             port);
    pglock_client *c = pt_open_client(uri, NULL);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "by-uri|pglock_other");
    pglock_client_close(c);

    /* An empty conninfo: libpq's PG* variables decide. */
    char *saved = getenv("PGDATABASE") ? strdup(getenv("PGDATABASE")) : NULL;
    setenv("PGDATABASE", "pglock_other", 1);
    c = pt_open_client("", NULL);
    if (saved)
        setenv("PGDATABASE", saved, 1);
    else
        unsetenv("PGDATABASE");
    free(saved);
    seen_by_server(obs, c, buf, sizeof buf);
    assert_string_equal(buf, "pglock|pglock_other");
    pglock_client_close(c);
    PQfinish(obs);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(application_name_precedence),
        cmocka_unit_test(keyword_arrays_with_expand_dbname),
        cmocka_unit_test(a_null_value_among_the_keywords_is_not_given),
        cmocka_unit_test(a_uri_and_the_pg_variables),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
