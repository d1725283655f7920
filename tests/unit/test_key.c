/*
 * Keys without a server: the SHA-256 rule against published vectors,
 * pg_locks coordinates, printing, SQL text, the parser's accept and reject
 * tables, and strict UTF-8.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "pglock.h"
#include "key_internal.h"

/* tests/data/key_vectors.txt, found from this file's own path. */
static FILE *open_vectors(void)
{
    const char *env = getenv("PGLOCK_TEST_DATA");
    char path[4096];
    if (env)
        snprintf(path, sizeof path, "%s/key_vectors.txt", env);
    else {
        snprintf(path, sizeof path, "%s", __FILE__);
        char *cut = strstr(path, "unit/test_key.c");
        assert_non_null(cut);
        snprintf(cut, sizeof path - (size_t)(cut - path),
                 "data/key_vectors.txt");
    }
    FILE *f = fopen(path, "r");
    if (!f)
        fail_msg("cannot open %s", path);
    return f;
}

static size_t unhex(const char *hex, char *out, size_t cap)
{
    size_t n = 0;
    if (!strcmp(hex, "-"))
        return 0;
    for (; hex[0] && hex[1]; hex += 2) {
        unsigned v;
        assert_int_equal(sscanf(hex, "%2x", &v), 1);
        assert_true(n < cap);
        out[n++] = (char)v;
    }
    return n;
}

static void test_name_rule_matches_published_vectors(void **state)
{
    (void)state;
    FILE *f = open_vectors();
    char line[8192], name[4096];
    int count = 0;
    while (fgets(line, sizeof line, f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        char *id = strtok(line, "\t"), *hex = strtok(NULL, "\t");
        assert_non_null(id);
        assert_non_null(hex);
        size_t n = unhex(hex, name, sizeof name - 1);
        name[n] = '\0';
        int64_t want = strtoll(id, NULL, 10);
        assert_true(pglock_name_to_int64(name, n) == want);
        pglock_key k;
        assert_int_equal(pglock_key_text(&k, name), PGLOCK_OK);
        assert_true(k.id == want);
        assert_int_equal(k.name_len, n);
        count++;
    }
    fclose(f);
    assert_true(count >= 10);
}

static void test_design_example(void **state)
{
    (void)state;
    assert_true(pglock_name_to_int64("nightly-billing", 15) ==
                INT64_C(-3003901418071974465));
    /* len counts bytes: a NUL inside is hashed, not a terminator. */
    assert_true(pglock_name_to_int64("nightly-billing", 7) ==
                pglock_name_to_int64("nightly", 7));
}

static void check_tag(const pglock_key *k, uint32_t c, uint32_t o, int s)
{
    uint32_t cc, oo;
    int ss;
    assert_int_equal(pglock_key_locktag(k, &cc, &oo, &ss), PGLOCK_OK);
    assert_int_equal(cc, c);
    assert_int_equal(oo, o);
    assert_int_equal(ss, s);
}

static void test_locktag_int64_extremes(void **state)
{
    (void)state;
    pglock_key k;
    /* Each expectation was read from pg_locks on PostgreSQL 15. */
    pglock_key_int64(&k, 0);
    check_tag(&k, 0, 0, 1);
    pglock_key_int64(&k, 72001);
    check_tag(&k, 0, 72001, 1);
    pglock_key_int64(&k, -5);
    check_tag(&k, 0xFFFFFFFFu, 0xFFFFFFFBu, 1);
    pglock_key_int64(&k, INT64_MIN);
    check_tag(&k, 0x80000000u, 0, 1);
    pglock_key_int64(&k, INT64_MAX);
    check_tag(&k, 0x7FFFFFFFu, 0xFFFFFFFFu, 1);
    pglock_key_int64(&k, INT64_C(-3003901418071974465));
    check_tag(&k, 3595566995u, 1535581631u, 1);
    pglock_key_text(&k, "nightly-billing");
    check_tag(&k, 3595566995u, 1535581631u, 1);
}

static void test_locktag_pairs(void **state)
{
    (void)state;
    pglock_key k;
    pglock_key_pair(&k, 42, 9);
    check_tag(&k, 42, 9, 2);
    pglock_key_pair(&k, -5, -7);
    check_tag(&k, 4294967291u, 4294967289u, 2);
    pglock_key_pair(&k, INT32_MIN, INT32_MAX);
    check_tag(&k, 0x80000000u, 0x7FFFFFFFu, 2);
}

static void test_locktag_legacy_needs_resolving(void **state)
{
    (void)state;
    pglock_key k;
    uint32_t c, o;
    int s;
    char buf[64];
    assert_int_equal(pglock_key_hashtext(&k, "nightly-billing"), PGLOCK_OK);
    assert_int_equal(pglock_key_locktag(&k, &c, &o, &s), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_format(&k, buf, sizeof buf), PGLOCK_EINVAL);
    /* hashtext is int4; the bigint form sign-extends it (pg_locks on 15:
     * classid=4294967295 objid=3993195869 for this name). */
    k.id = -301771427;
    k.resolved = 1;
    check_tag(&k, 0xFFFFFFFFu, 3993195869u, 1);
    assert_int_equal(pglock_key_hashtextextended(&k, "x", 7), PGLOCK_OK);
    assert_int_equal(pglock_key_locktag(&k, &c, &o, &s), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_locktag(NULL, &c, &o, &s), PGLOCK_EINVAL);
}

static void check_format(const pglock_key *k, const char *want)
{
    char buf[64];
    assert_int_equal(pglock_key_format(k, buf, sizeof buf), (int)strlen(want));
    assert_string_equal(buf, want);
}

static void test_format(void **state)
{
    (void)state;
    pglock_key k;
    pglock_key_int64(&k, 123);
    check_format(&k, "123");
    pglock_key_int64(&k, INT64_MIN);
    check_format(&k, "-9223372036854775808");
    pglock_key_pair(&k, 42, 9);
    check_format(&k, "42:9");
    pglock_key_pair(&k, -1, INT32_MIN);
    check_format(&k, "-1:-2147483648");
    pglock_key_text(&k, "nightly-billing");
    check_format(&k, "-3003901418071974465");
    /* snprintf's contract: the needed length, truncated output. */
    char small[4];
    pglock_key_int64(&k, 123456);
    assert_int_equal(pglock_key_format(&k, small, sizeof small), 6);
    assert_string_equal(small, "123");
    assert_int_equal(pglock_key_format(&k, NULL, 0), 6);
}

static void check_sql(const pglock_key *k, pglock_mode m, pglock_scope s,
                      const char *want)
{
    char buf[512];
    assert_int_equal(pglock_key_sql(k, m, s, buf, sizeof buf),
                     (int)strlen(want));
    assert_string_equal(buf, want);
    assert_int_equal(pglock_key_sql(k, m, s, NULL, 0), (int)strlen(want));
}

static void test_sql(void **state)
{
    (void)state;
    pglock_key k;
    pglock_key_int64(&k, -3003901418071974465);
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION,
              "SELECT pg_advisory_lock(-3003901418071974465);");
    pglock_key_int64(&k, INT64_MIN);
    check_sql(&k, PGLOCK_SHARED, PGLOCK_SESSION,
              "SELECT pg_advisory_lock_shared(-9223372036854775808);");
    pglock_key_pair(&k, 42, 9);
    check_sql(&k, PGLOCK_SHARED, PGLOCK_XACT,
              "SELECT pg_advisory_xact_lock_shared(42, 9);");
    pglock_key_pair(&k, -1, -2);
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_XACT,
              "SELECT pg_advisory_xact_lock(-1, -2);");
    pglock_key_text(&k, "nightly-billing");
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION,
              "SELECT pg_advisory_lock(('x' || substr(encode(sha256("
              "convert_to('nightly-billing', 'UTF8')), 'hex'), 1, 16))"
              "::bit(64)::bigint);");
    pglock_key_text(&k, "it's");
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION,
              "SELECT pg_advisory_lock(('x' || substr(encode(sha256("
              "convert_to('it''s', 'UTF8')), 'hex'), 1, 16))"
              "::bit(64)::bigint);");
    /* A backslash: E'' reads the same whatever standard_conforming_strings. */
    pglock_key_text(&k, "a\\'b");
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION,
              "SELECT pg_advisory_lock(('x' || substr(encode(sha256("
              "convert_to(E'a\\\\''b', 'UTF8')), 'hex'), 1, 16))"
              "::bit(64)::bigint);");
    pglock_key_hashtext(&k, "name");
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_SESSION,
              "SELECT pg_advisory_lock(hashtext('name'));");
    pglock_key_hashtextextended(&k, "name", 7);
    check_sql(&k, PGLOCK_EXCLUSIVE, PGLOCK_XACT,
              "SELECT pg_advisory_xact_lock(hashtextextended('name', 7));");
    pglock_key_hashtextextended(&k, "o'k", INT64_MIN);
    check_sql(&k, PGLOCK_SHARED, PGLOCK_SESSION,
              "SELECT pg_advisory_lock_shared(hashtextextended('o''k', "
              "-9223372036854775808));");
    /* Bad mode or scope. */
    char buf[8];
    assert_int_equal(pglock_key_sql(&k, (pglock_mode)7, PGLOCK_SESSION, buf,
                                    sizeof buf),
                     PGLOCK_EINVAL);
    assert_int_equal(pglock_key_sql(&k, PGLOCK_SHARED, (pglock_scope)7, buf,
                                    sizeof buf),
                     PGLOCK_EINVAL);
    /* Truncation like snprintf. */
    pglock_key_int64(&k, 1);
    assert_int_equal(pglock_key_sql(&k, 0, 0, buf, sizeof buf), 27);
    assert_string_equal(buf, "SELECT ");
}

/* ---------------------------------------------------------- parser */

typedef struct good {
    const char *text;
    pglock_key_kind kind;
    int64_t id; /* INT64/TEXT: the bigint */
    int32_t ns, nsid;
    int64_t seed;
    const char *name;
} good;

/* (clang-format would lay out this braced initializer as a block) */
/* clang-format off */
#define I(t, v) {t, PGLOCK_KEY_INT64, INT64_C(v), 0, 0, 0, NULL}
#define P(t, a, b) {t, PGLOCK_KEY_PAIR, 0, a, b, 0, NULL}
#define T(t, n) {t, PGLOCK_KEY_TEXT, 0, 0, 0, 0, n}
#define H(t, n) {t, PGLOCK_KEY_HASHTEXT, 0, 0, 0, 0, n}
#define X(t, s, n) {t, PGLOCK_KEY_HASHTEXTEXTENDED, 0, 0, 0, INT64_C(s), n}
/* clang-format on */

static const good goods[] = {
    I("0", 0),
    I("1", 1),
    I("123", 123),
    I("-5", -5),
    I("72001", 72001),
    I("9223372036854775807", 9223372036854775807),
    I("-9223372036854775808", -9223372036854775807 - 1),
    I("int:-5", -5),
    I("int:0", 0),
    I("int:9223372036854775807", 9223372036854775807),
    I("-3003901418071974465", -3003901418071974465),
    P("42:9", 42, 9),
    P("0:0", 0, 0),
    P("-1:-2", -1, -2),
    P("2147483647:-2147483648", INT32_MAX, INT32_MIN),
    P("pair:42:9", 42, 9),
    P("pair:-2147483648:2147483647", INT32_MIN, INT32_MAX),
    T("nightly-billing", "nightly-billing"),
    T("text:123", "123"),
    T("text:42:x", "42:x"),
    T("text:-5", "-5"),
    T("text: spaced ", " spaced "),
    T("text:text:", "text:"),
    T("text:@x", "@x"),
    T("billing:eu", "billing:eu"),
    T("café", "café"),
    T("日本語", "日本語"),
    T("🔒", "🔒"),
    T("a b", "a b"),
    T("x1e3", "x1e3"),
    T("integer:5", "integer:5"),
    T("Int", "Int"),
    T("hashtext", "hashtext"),
    T(".5", ".5"),
    H("hashtext:nightly-billing", "nightly-billing"),
    H("hashtext:a:b", "a:b"),
    H("hashtext:123", "123"),
    X("hashtextextended:7:nightly-billing", 7, "nightly-billing"),
    X("hashtextextended:-1:x:y", -1, "x:y"),
    X("hashtextextended:0:0", 0, "0"),
    X("hashtextextended:-9223372036854775808:n", -9223372036854775807 - 1, "n"),
};

typedef struct bad {
    const char *text;
    const char *why; /* expected in the message */
} bad;

static const bad bads[] = {
    {"", "the key is empty"},
    {"42:x", "the id after ':' is not an integer"},
    {"1e3", "the key is not an integer; for a name write text:1e3"},
    {"0x10", "the key is not an integer"},
    {"-", "the key is not an integer"},
    {"--5", "the key is not an integer"},
    {"-x", "the key is not an integer"},
    {"+5", "'+' sign"},
    {" 42", "leading or trailing whitespace"},
    {"42 ", "leading or trailing whitespace"},
    {"name ", "leading or trailing whitespace"},
    {"\tname", "leading or trailing whitespace"},
    {"42:", "the id after ':' is empty"},
    {":9", "the namespace before ':' is empty"},
    {":", "the namespace before ':' is empty"},
    {"1:2:3", "too many ':'"},
    {"007", "not in canonical form (write 7)"},
    {"-0", "not in canonical form (write 0)"},
    {"-007", "not in canonical form (write -7)"},
    {"00", "not in canonical form (write 0)"},
    {"01:2", "the namespace before ':' is not in canonical form (write 1)"},
    {"1:-0", "the id after ':' is not in canonical form (write 0)"},
    {"9223372036854775808", "out of range for a 64-bit integer"},
    {"-9223372036854775809", "out of range for a 64-bit integer"},
    {"99999999999999999999999", "out of range for a 64-bit integer"},
    {"2147483648:1", "the namespace before ':' is out of range for a 32-bit"},
    {"1:-2147483649", "the id after ':' is out of range for a 32-bit"},
    {"1.5", "not an integer"},
    {"1,000", "not an integer"},
    {"1_000", "not an integer"},
    {"5abc", "not an integer"},
    {"42:9x", "the id after ':' is not an integer"},
    {"42: 9", "the id after ':' is not an integer"},
    {"int:", "the integer after \"int:\" is empty"},
    {"int:abc", "the integer after \"int:\" is not an integer"},
    {"int:+1", "'+' sign"},
    {"int:1:2", "not an integer"},
    {"int: 5", "not an integer"},
    {"int:9223372036854775808", "out of range"},
    {"pair:", "a pair needs the form NS:ID"},
    {"pair:42", "a pair needs the form NS:ID"},
    {"pair:1:2:3", "too many ':'"},
    {"pair:x:1", "the namespace before ':' is not an integer"},
    {"text:", "the name after \"text:\" is empty"},
    {"hashtext:", "the name after \"hashtext:\" is empty"},
    {"hashtextextended:", "expected hashtextextended:SEED:NAME"},
    {"hashtextextended:7", "expected hashtextextended:SEED:NAME"},
    {"hashtextextended:7:", "the name after the seed is empty"},
    {"hashtextextended::x", "the seed is empty"},
    {"hashtextextended:x:y", "the seed is not an integer"},
    {"hashtextextended:07:y", "the seed is not in canonical form"},
    {"INT:5", "the prefix \"int:\" must be lower case"},
    {"Text:abc", "the prefix \"text:\" must be lower case"},
    {"PAIR:1:2", "must be lower case"},
    {"HashText:x", "must be lower case"},
    {"@nightly-billing", "registry names (@NAME) are looked up by the caller"},
    {"@", "registry names"},
    {"caf\xc3", "not valid UTF-8"},
    {"\xc0\xaf", "not valid UTF-8"},
    {"\xed\xa0\x80", "not valid UTF-8"},
    {"text:\xff", "not valid UTF-8"},
};

static void check_good(const good *g)
{
    pglock_key k;
    pglock_error err = {.code = 1, .message = "unset"};
    int rc = pglock_key_parse(&k, g->text, &err);
    if (rc != PGLOCK_OK)
        fail_msg("\"%s\" rejected: %s", g->text, err.message);
    assert_int_equal(err.code, 0);
    assert_string_equal(err.message, "");
    assert_int_equal(k.kind, g->kind);
    switch (g->kind) {
    case PGLOCK_KEY_INT64:
        assert_true(k.id == g->id);
        break;
    case PGLOCK_KEY_PAIR:
        assert_int_equal(k.ns, g->ns);
        assert_int_equal(k.nsid, g->nsid);
        break;
    case PGLOCK_KEY_TEXT:
        assert_string_equal(k.name, g->name);
        assert_true(k.id == pglock_name_to_int64(g->name, strlen(g->name)));
        break;
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        assert_true(k.seed == g->seed);
        /* fall through */
    case PGLOCK_KEY_HASHTEXT:
        assert_string_equal(k.name, g->name);
        assert_int_equal(k.resolved, 0);
        break;
    }
    if (k.name) {
        /* The key borrows the text: the name points into it. */
        assert_true(k.name >= g->text && k.name < g->text + strlen(g->text));
        assert_int_equal(k.name_len, strlen(k.name));
    }
}

static void test_parse_accepts(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof goods / sizeof goods[0]; i++)
        check_good(&goods[i]);
}

static void test_parse_rejects(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        if (!bads[i].why)
            continue;
        pglock_key k;
        pglock_error e;
        int rc = pglock_key_parse(&k, bads[i].text, &e);
        const char *err = e.message;
        if (rc != PGLOCK_EINVAL)
            fail_msg("\"%s\" accepted (kind %d)", bads[i].text, (int)k.kind);
        assert_int_equal(e.code, PGLOCK_EINVAL);
        assert_string_equal(e.sqlstate, "");
        if (!strstr(err, bads[i].why))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bads[i].text, err,
                     bads[i].why);
        assert_true(strncmp(err, "invalid key \"", 13) == 0);
        assert_null(strchr(err, '\n'));
        /* err may be NULL */
        assert_int_equal(pglock_key_parse(&k, bads[i].text, NULL),
                         PGLOCK_EINVAL);
    }
}

static void test_parse_error_message_exact(void **state)
{
    (void)state;
    pglock_key k;
    pglock_error e;
    const char *err = e.message;
    pglock_key_parse(&k, "42:x", &e);
    assert_string_equal(err, "invalid key \"42:x\": the id after ':' is not an "
                             "integer; for a name write text:42:x");
    /* Control bytes are escaped, long keys cut: one line, bounded. */
    pglock_key_parse(&k, "1\n2", &e);
    assert_null(strchr(err, '\n'));
    assert_non_null(strstr(err, "1\\x0A2"));
    char longkey[300];
    memset(longkey, '9', sizeof longkey - 1);
    longkey[sizeof longkey - 1] = '\0';
    pglock_key_parse(&k, longkey, &e);
    assert_non_null(strstr(err, "...\""));
    assert_int_equal(pglock_key_parse(NULL, "1", &e), PGLOCK_EINVAL);
    assert_string_equal(err, "no key given");
    assert_int_equal(pglock_key_parse(&k, NULL, &e), PGLOCK_EINVAL);
}

/* Every integer pglock prints parses back to the same key: canonical. */
static void test_format_parse_round_trip(void **state)
{
    (void)state;
    const int64_t ids[] = {0,         1,
                           -1,        9,
                           10,        -10,
                           72001,     INT64_MAX,
                           INT64_MIN, INT64_MIN + 1,
                           INT32_MAX, (int64_t)INT32_MAX + 1};
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        pglock_key a, b;
        char buf[64];
        pglock_key_int64(&a, ids[i]);
        pglock_key_format(&a, buf, sizeof buf);
        assert_int_equal(pglock_key_parse(&b, buf, NULL), PGLOCK_OK);
        assert_int_equal(b.kind, PGLOCK_KEY_INT64);
        assert_true(b.id == ids[i]);
    }
    for (int ns = -3; ns <= 3; ns++) {
        pglock_key a, b;
        char buf[64];
        pglock_key_pair(&a, ns * 715827882, -ns);
        pglock_key_format(&a, buf, sizeof buf);
        assert_int_equal(pglock_key_parse(&b, buf, NULL), PGLOCK_OK);
        assert_int_equal(b.kind, PGLOCK_KEY_PAIR);
        assert_int_equal(b.ns, a.ns);
        assert_int_equal(b.nsid, a.nsid);
    }
}

/* ---------------------------------------------------------- UTF-8 */

static void test_utf8_validation(void **state)
{
    (void)state;
    static const struct {
        const char *s;
        size_t len;
        int ok;
    } cases[] = {
        {"", 0, 1},
        {"ascii", 5, 1},
        {"caf\xc3\xa9", 5, 1},
        {"\xc2\x80", 2, 1},         /* U+0080, lowest 2-byte */
        {"\xdf\xbf", 2, 1},         /* U+07FF */
        {"\xe0\xa0\x80", 3, 1},     /* U+0800, lowest 3-byte */
        {"\xed\x9f\xbf", 3, 1},     /* U+D7FF, below surrogates */
        {"\xee\x80\x80", 3, 1},     /* U+E000, above surrogates */
        {"\xef\xbf\xbf", 3, 1},     /* U+FFFF */
        {"\xf0\x90\x80\x80", 4, 1}, /* U+10000 */
        {"\xf4\x8f\xbf\xbf", 4, 1}, /* U+10FFFF */
        {"\xf0\x9f\x94\x92", 4, 1}, /* emoji */
        {"a\0b", 3, 0},             /* NUL */
        {"\x80", 1, 0},             /* lone continuation */
        {"\xbf", 1, 0},
        {"\xc0\x80", 2, 0},         /* overlong NUL */
        {"\xc1\xbf", 2, 0},         /* overlong */
        {"\xc2", 1, 0},             /* truncated */
        {"\xc2\x41", 2, 0},         /* bad continuation */
        {"\xe0\x9f\xbf", 3, 0},     /* overlong 3-byte */
        {"\xed\xa0\x80", 3, 0},     /* U+D800 surrogate */
        {"\xed\xbf\xbf", 3, 0},     /* U+DFFF surrogate */
        {"\xe2\x82", 2, 0},         /* truncated 3-byte */
        {"\xf0\x8f\xbf\xbf", 4, 0}, /* overlong 4-byte */
        {"\xf4\x90\x80\x80", 4, 0}, /* U+110000 */
        {"\xf5\x80\x80\x80", 4, 0},
        {"\xf8\x88\x80\x80\x80", 5, 0}, /* 5-byte form */
        {"\xfe", 1, 0},
        {"\xff", 1, 0},
        {"\xf0\x9f\x94", 3, 0}, /* truncated emoji */
        {"\xf0\x9f\x94\x41", 4, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        if (pglock__utf8_valid(cases[i].s, cases[i].len) != cases[i].ok)
            fail_msg("case %zu: expected %d", i, cases[i].ok);
    pglock_key k;
    assert_int_equal(pglock_key_text(&k, "\xed\xa0\x80"), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_hashtext(&k, "\xc0\x80"), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_hashtextextended(&k, "\xff", 1), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_text(&k, NULL), PGLOCK_EINVAL);
    assert_int_equal(pglock_key_text(&k, ""), PGLOCK_OK);
}

static void test_resolve_without_connection(void **state)
{
    (void)state;
    pglock_key k;
    pglock_error err = {0};
    pglock_key_hashtext(&k, "x");
    assert_int_equal(pglock_key_resolve(&k, NULL, &err), PGLOCK_ECONNLOST);
    assert_int_equal(err.code, PGLOCK_ECONNLOST);
    assert_int_equal(k.resolved, 0);
    /* Keys the client can compute need no server. */
    pglock_key_int64(&k, 5);
    assert_int_equal(pglock_key_resolve(&k, NULL, &err), PGLOCK_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_rule_matches_published_vectors),
        cmocka_unit_test(test_design_example),
        cmocka_unit_test(test_locktag_int64_extremes),
        cmocka_unit_test(test_locktag_pairs),
        cmocka_unit_test(test_locktag_legacy_needs_resolving),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_sql),
        cmocka_unit_test(test_parse_accepts),
        cmocka_unit_test(test_parse_rejects),
        cmocka_unit_test(test_parse_error_message_exact),
        cmocka_unit_test(test_format_parse_round_trip),
        cmocka_unit_test(test_utf8_validation),
        cmocka_unit_test(test_resolve_without_connection),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
