/*
 * Keys against a real server (PGLOCK_TEST_PRIMARY, a conninfo; skipped
 * when unset):
 *   - the C name rule equals docs/keys.md's SQL expression for 10,000+ names
 *     (empty, long, non-ASCII, quotes and backslashes);
 *   - hashtext / hashtextextended keys resolve to what the server locks;
 *   - the SQL from pglock_key_sql(), run on one connection, takes the lock
 *     that a second connection then cannot take, at the coordinates
 *     pglock_key_locktag() predicts, as pg_locks shows.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

#define NAMES 10240
#define BATCH 2560

static PGconn *connect_or_skip(void)
{
    PGconn *c = pt_connect(pt_env_or_skip("PGLOCK_TEST_PRIMARY"));
    assert_int_equal(PQsetClientEncoding(c, "UTF8"), 0);
    return c;
}

static PGresult *exec_ok(PGconn *c, const char *sql, int n,
                         const char *const *params)
{
    PGresult *r = PQexecParams(c, sql, n, NULL, params, NULL, NULL, 0);
    ExecStatusType st = PQresultStatus(r);
    if (st != PGRES_TUPLES_OK && st != PGRES_COMMAND_OK)
        fail_msg("%s: %s", sql, PQerrorMessage(c));
    return r;
}

/* ------------------------------------------------- generated names */

/* xorshift64: deterministic, so a failure can be reproduced. */
static uint64_t rng_state = 0x9E3779B97F4A7C15u;
static uint64_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

/* Appends code point cp as UTF-8. */
static size_t put_utf8(char *p, uint32_t cp)
{
    if (cp < 0x80) {
        p[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        p[0] = (char)(0xC0 | (cp >> 6));
        p[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        p[0] = (char)(0xE0 | (cp >> 12));
        p[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        p[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    p[0] = (char)(0xF0 | (cp >> 18));
    p[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    p[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    p[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* A random valid code point, never NUL or a surrogate; mostly ASCII. */
static uint32_t random_cp(void)
{
    switch (rnd() % 6) {
    case 0:
        return 0x80 + (uint32_t)(rnd() % (0x800 - 0x80));
    case 1: {
        uint32_t cp = 0x800 + (uint32_t)(rnd() % (0x10000 - 0x800));
        return (cp >= 0xD800 && cp <= 0xDFFF) ? 0xE9 : cp;
    }
    case 2:
        return 0x10000 + (uint32_t)(rnd() % (0x110000 - 0x10000));
    default: {
        static const char special[] = "'\\\"{},: \t\n";
        if (rnd() % 4 == 0)
            return (uint32_t)special[rnd() % (sizeof special - 1)];
        return 1 + (uint32_t)(rnd() % 0x7F);
    }
    }
}

static char *make_name(int i)
{
    size_t len;
    if (i == 0)
        len = 0; /* the empty name */
    else if (i % 500 == 1)
        len = 1000 + (size_t)(rnd() % 3000); /* long */
    else
        len = (size_t)(rnd() % 40);
    char *s = malloc(len * 4 + 1);
    size_t n = 0;
    int ascii = i % 2 == 0; /* half the names are plain ASCII */
    for (size_t k = 0; k < len; k++)
        n += put_utf8(s + n,
                      ascii ? 1 + (uint32_t)(rnd() % 0x7F) : random_cp());
    s[n] = '\0';
    return s;
}

/* names[from..to) as a text[] literal: each element double-quoted with
 * '"' and '\' backslash-escaped (array input syntax). */
static char *array_literal(char **names, int from, int to)
{
    size_t cap = 16;
    for (int i = from; i < to; i++)
        cap += strlen(names[i]) * 2 + 3;
    char *a = malloc(cap), *p = a;
    *p++ = '{';
    for (int i = from; i < to; i++) {
        if (i > from)
            *p++ = ',';
        *p++ = '"';
        for (const char *s = names[i]; *s; s++) {
            if (*s == '"' || *s == '\\')
                *p++ = '\\';
            *p++ = *s;
        }
        *p++ = '"';
    }
    *p++ = '}';
    *p = '\0';
    return a;
}

static void test_c_rule_equals_sql_expression_for_10000_names(void **state)
{
    (void)state;
    PGconn *c = connect_or_skip();
    char **names = malloc(NAMES * sizeof *names);
    for (int i = 0; i < NAMES; i++)
        names[i] = make_name(i);
    int checked = 0, nonascii = 0, longest = 0;
    for (int from = 0; from < NAMES; from += BATCH) {
        char *arr = array_literal(names, from, from + BATCH);
        const char *params[1] = {arr};
        /* The expression exactly as docs/keys.md publishes it; octet_length
         * proves the server hashed the very bytes we did. */
        PGresult *r = exec_ok(
            c,
            "SELECT ord, octet_length(convert_to(n, 'UTF8')),"
            " ('x' || substr(encode(sha256(convert_to(n, 'UTF8')), 'hex'),"
            " 1, 16))::bit(64)::bigint"
            " FROM unnest($1::text[]) WITH ORDINALITY AS t(n, ord)"
            " ORDER BY ord",
            1, params);
        assert_int_equal(PQntuples(r), BATCH);
        for (int row = 0; row < BATCH; row++) {
            const char *name = names[from + row];
            size_t len = strlen(name);
            assert_int_equal(atoi(PQgetvalue(r, row, 1)), (int)len);
            int64_t server = strtoll(PQgetvalue(r, row, 2), NULL, 10);
            pglock_key k;
            assert_int_equal(pglock_key_text(&k, name), PGLOCK_OK);
            if (k.id != server)
                fail_msg("name #%d (%zu bytes): C %" PRId64 ", SQL %" PRId64,
                         from + row, len, k.id, server);
            for (size_t b = 0; b < len; b++)
                if ((unsigned char)name[b] >= 0x80) {
                    nonascii++;
                    break;
                }
            if ((int)len > longest)
                longest = (int)len;
            checked++;
        }
        PQclear(r);
        free(arr);
    }
    print_message("%d names agree (%d non-ASCII, longest %d bytes, "
                  "including the empty name)\n",
                  checked, nonascii, longest);
    assert_true(nonascii > 1000 && checked - nonascii > 1000);
    assert_true(longest >= 1000);
    for (int i = 0; i < NAMES; i++)
        free(names[i]);
    free(names);
    PQfinish(c);
}

/* ------------------------------------------------ locks and pg_locks */

/* The pg_locks row of backend pid for an advisory lock, or fails. */
static void expect_pg_locks(PGconn *observer, int pid, const pglock_key *k,
                            const char *mode)
{
    uint32_t classid, objid;
    int objsubid;
    assert_int_equal(pglock_key_locktag(k, &classid, &objid, &objsubid),
                     PGLOCK_OK);
    char p[16], cl[16], ob[16], sub[4];
    snprintf(p, sizeof p, "%d", pid);
    snprintf(cl, sizeof cl, "%" PRIu32, classid);
    snprintf(ob, sizeof ob, "%" PRIu32, objid);
    snprintf(sub, sizeof sub, "%d", objsubid);
    const char *params[4] = {p, cl, ob, sub};
    PGresult *r = exec_ok(observer,
                          "SELECT mode, granted FROM pg_locks"
                          " WHERE locktype = 'advisory' AND pid = $1::int"
                          " AND classid = $2::oid AND objid = $3::oid"
                          " AND objsubid = $4::int2",
                          4, params);
    if (PQntuples(r) != 1)
        fail_msg("pg_locks has %d rows for pid %s at %s/%s/%s", PQntuples(r), p,
                 cl, ob, sub);
    assert_string_equal(PQgetvalue(r, 0, 0), mode);
    assert_string_equal(PQgetvalue(r, 0, 1), "t");
    PQclear(r);
}

/* 1 if other could take k in mode right now (and releases it again). */
static int other_can_take(PGconn *other, const pglock_key *k, int shared)
{
    char a[32], b[32];
    const char *params[2] = {a, b};
    const char *sql;
    int n;
    if (k->kind == PGLOCK_KEY_PAIR) {
        snprintf(a, sizeof a, "%" PRId32, k->ns);
        snprintf(b, sizeof b, "%" PRId32, k->nsid);
        sql = shared
                  ? "SELECT pg_try_advisory_xact_lock_shared($1::int, $2::int)"
                  : "SELECT pg_try_advisory_xact_lock($1::int, $2::int)";
        n = 2;
    } else {
        snprintf(a, sizeof a, "%" PRId64, k->id);
        sql = shared ? "SELECT pg_try_advisory_xact_lock_shared($1::bigint)"
                     : "SELECT pg_try_advisory_xact_lock($1::bigint)";
        n = 1;
    }
    /* Xact locks in an implicit transaction: released at once. */
    PGresult *r = exec_ok(other, sql, n, params);
    int got = !strcmp(PQgetvalue(r, 0, 0), "t");
    PQclear(r);
    return got;
}

static void check_sql_takes_lock(PGconn *holder, PGconn *other, pglock_key *k,
                                 pglock_mode mode, pglock_scope scope)
{
    pglock_error err = {0};
    assert_int_equal(pglock_key_resolve(k, holder, &err), PGLOCK_OK);
    char sql[1024];
    int n = pglock_key_sql(k, mode, scope, sql, sizeof sql);
    assert_true(n > 0 && n < (int)sizeof sql);
    if (scope == PGLOCK_XACT)
        pt_exec_ok(holder, "BEGIN");
    pt_exec_ok(holder, sql);

    expect_pg_locks(other, PQbackendPID(holder), k,
                    mode == PGLOCK_SHARED ? "ShareLock" : "ExclusiveLock");
    if (other_can_take(other, k, 0))
        fail_msg("another session took the lock of: %s", sql);
    assert_int_equal(other_can_take(other, k, 1), mode == PGLOCK_SHARED);

    if (scope == PGLOCK_XACT)
        pt_exec_ok(holder, "COMMIT");
    else
        pt_exec_ok(holder, "SELECT pg_advisory_unlock_all()");
    assert_true(other_can_take(other, k, 0));
}

static void test_sql_text_takes_the_lock_pg_locks_shows(void **state)
{
    (void)state;
    PGconn *holder = connect_or_skip();
    PGconn *other = connect_or_skip();
    static const char *const keys[] = {
        "0",
        "72001",
        "-5",
        "9223372036854775807",
        "-9223372036854775808",
        "42:9",
        "-5:-7",
        "-2147483648:2147483647",
        "nightly-billing",
        "text:",
        "text:it's",
        "text:back\\slash 'q'",
        "café",
        "日本語",
        "🔒",
        "hashtext:nightly-billing",
        "hashtext:a",
        "hashtext:it's",
        "hashtextextended:7:nightly-billing",
        "hashtextextended:-9223372036854775808:x",
    };
    int checked = 0;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        pglock_key k;
        pglock_error err;
        if (!strcmp(keys[i], "text:"))
            assert_int_equal(pglock_key_text(&k, ""), PGLOCK_OK);
        else if (pglock_key_parse(&k, keys[i], &err) != PGLOCK_OK)
            fail_msg("%s", err.message);
        for (int mode = 0; mode < 2; mode++)
            for (int scope = 0; scope < 2; scope++) {
                check_sql_takes_lock(holder, other, &k, (pglock_mode)mode,
                                     (pglock_scope)scope);
                checked++;
            }
    }
    /* The E'' literal holds with the old string syntax too. */
    pt_exec_ok(holder, "SET standard_conforming_strings = off");
    pglock_key k;
    pglock_key_text(&k, "back\\slash 'q'");
    check_sql_takes_lock(holder, other, &k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION);
    pglock_key_hashtext(&k, "a\\b");
    check_sql_takes_lock(holder, other, &k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION);
    print_message("%d key/mode/scope combinations lock as predicted\n",
                  checked + 2);
    PQfinish(holder);
    PQfinish(other);
}

static void test_hashtext_resolve_agrees_with_server(void **state)
{
    (void)state;
    PGconn *c = connect_or_skip();
    static const char *const names[] = {"nightly-billing", "a",   "", "café",
                                        "日本語",          "it's"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        pglock_key k;
        pglock_error err = {0};
        assert_int_equal(pglock_key_hashtext(&k, names[i]), PGLOCK_OK);
        assert_int_equal(pglock_key_resolve(&k, c, &err), PGLOCK_OK);
        assert_int_equal(k.resolved, 1);
        const char *params[1] = {names[i]};
        PGresult *r = exec_ok(c, "SELECT hashtext($1)", 1, params);
        /* int4 from the server; the key is its sign extension. */
        assert_true(k.id == (int64_t)strtol(PQgetvalue(r, 0, 0), NULL, 10));
        assert_true(k.id >= INT32_MIN && k.id <= INT32_MAX);
        PQclear(r);

        assert_int_equal(pglock_key_hashtextextended(&k, names[i], -3),
                         PGLOCK_OK);
        assert_int_equal(pglock_key_resolve(&k, c, &err), PGLOCK_OK);
        r = exec_ok(c, "SELECT hashtextextended($1, -3)", 1, params);
        assert_true(k.id == strtoll(PQgetvalue(r, 0, 0), NULL, 10));
        PQclear(r);
    }
    /* A dead connection is an error, not a key. */
    PQfinish(c);
    c = PQconnectdb("host=/nonexistent-pglock-test port=1");
    pglock_key k;
    pglock_error err = {0};
    pglock_key_hashtext(&k, "x");
    assert_int_equal(pglock_key_resolve(&k, c, &err), PGLOCK_ECONNLOST);
    assert_int_equal(k.resolved, 0);
    assert_true(err.message[0] != '\0');
    PQfinish(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_c_rule_equals_sql_expression_for_10000_names),
        cmocka_unit_test(test_hashtext_resolve_agrees_with_server),
        cmocka_unit_test(test_sql_text_takes_the_lock_pg_locks_shows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
