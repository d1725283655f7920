/* pglock status's pure parts: pg_locks locktags back to keys (signedness
 * of oid vs int4, in the library's holders.c), and JSON string escaping of whatever bytes the server
 * sends. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "cli.h"
#include "internal.h"
#include "status.h"
#include "json.h"

/* The same pg_locks coordinates. */
static int same_lock(const pglock_key *a, const pglock_key *b)
{
    uint32_t ca, oa, cb, ob;
    int sa, sb;
    return pglock_key_locktag(a, &ca, &oa, &sa) == 0 &&
           pglock_key_locktag(b, &cb, &ob, &sb) == 0 && ca == cb && oa == ob &&
           sa == sb;
}

static void test_bigint_locktags_decode_with_sign(void **state)
{
    (void)state;
    static const struct {
        uint32_t classid, objid;
        int64_t id;
        const char *text;
    } cases[] = {
        {0, 72001, 72001, "72001"},
        {0, 4294967295u, 4294967295LL, "4294967295"},
        {1, 0, 4294967296LL, "4294967296"},
        {4294967295u, 4294967295u, -1, "-1"},
        {4294967295u, 4294967291u, -5, "-5"},
        {0x80000000u, 0, INT64_MIN, "-9223372036854775808"},
        {0x7FFFFFFFu, 0xFFFFFFFFu, INT64_MAX, "9223372036854775807"},
        /* nightly-billing by the SHA-256 rule (docs/keys.md) */
        {3595566995u, 1535581631u, -3003901418071974465LL,
         "-3003901418071974465"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        pglock_key k;
        char buf[64];
        assert_int_equal(pglock__key_from_locktag(cases[i].classid,
                                                  cases[i].objid, 1, &k),
                         0);
        assert_int_equal(k.kind, PGLOCK_KEY_INT64);
        assert_true(k.id == cases[i].id);
        status_key_text(&k, buf, sizeof buf);
        assert_string_equal(buf, cases[i].text);
        /* the same lock pglock_key_parse() makes from the text */
        pglock_key parsed;
        assert_int_equal(pglock_key_parse(&parsed, buf, NULL), 0);
        assert_true(same_lock(&parsed, &k));
    }
    pglock_key named;
    assert_int_equal(pglock_key_text(&named, "nightly-billing"), 0);
    pglock_key decoded;
    pglock__key_from_locktag(3595566995u, 1535581631u, 1, &decoded);
    assert_true(same_lock(&named, &decoded));
}

static void test_pair_locktags_decode_as_int4(void **state)
{
    (void)state;
    pglock_key k;
    char buf[64];
    assert_int_equal(pglock__key_from_locktag(42, 9, 2, &k), 0);
    assert_int_equal(k.kind, PGLOCK_KEY_PAIR);
    status_key_text(&k, buf, sizeof buf);
    assert_string_equal(buf, "42:9");
    /* pg_advisory_lock(-1, -2) shows classid 4294967295 objid 4294967294 */
    assert_int_equal(pglock__key_from_locktag(4294967295u, 4294967294u, 2, &k),
                     0);
    status_key_text(&k, buf, sizeof buf);
    assert_string_equal(buf, "-1:-2");
    assert_int_equal(pglock__key_from_locktag(0x80000000u, 0x7FFFFFFFu, 2, &k),
                     0);
    status_key_text(&k, buf, sizeof buf);
    assert_string_equal(buf, "-2147483648:2147483647");
    /* a pair and a bigint with the same numbers are different locks */
    pglock_key big;
    pglock__key_from_locktag(42, 9, 1, &big);
    assert_false(same_lock(&k, &big));
    /* objsubid other than 1 and 2 is not pg_advisory_lock()'s */
    assert_int_equal(pglock__key_from_locktag(1, 2, 3, &k), -1);
}

/* A lock row's list of locktags as the server writes them (bigints,
 * classid:objid, one space between), read back with the sign's bits. */
static void test_locktag_lists_decode_every_bigint(void **state)
{
    (void)state;
    const char *list = "72001 -1 -9223372036854775808 9223372036854775807 "
                       "4294967296 0 -3003901418071974465";
    static const struct {
        uint32_t classid, objid;
    } want[] = {
        {0, 72001},
        {4294967295u, 4294967295u},
        {0x80000000u, 0},
        {0x7FFFFFFFu, 0xFFFFFFFFu},
        {1, 0},
        {0, 0},
        {3595566995u, 1535581631u},
    };
    uint32_t classid, objid;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        assert_int_equal(pglock__locktag_next(&list, &classid, &objid), 0);
        assert_int_equal(classid, want[i].classid);
        assert_int_equal(objid, want[i].objid);
    }
    assert_int_equal(pglock__locktag_next(&list, &classid, &objid), -1);
    /* anything but a bigint ends the list */
    static const char *const bad[] = {
        "",
        " ",
        "-",
        "9223372036854775808",
        "-9223372036854775809",
        "18446744073709551616",
        "12x",
        "1.5",
        "+1",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const char *b = bad[i];
        assert_int_equal(pglock__locktag_next(&b, &classid, &objid), -1);
        assert_ptr_equal(b, bad[i]);
    }
}

/* s written as a JSON string literal */
static char *json_of(const char *s)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    json_write_string(f, s);
    fclose(f);
    return buf;
}

static void test_json_strings_are_escaped_and_valid_utf8(void **state)
{
    (void)state;
    static const struct {
        const char *in, *out;
    } cases[] = {
        {"plain", "\"plain\""},
        {"quote\" back\\slash", "\"quote\\\" back\\\\slash\""},
        {"nl\ntab\tcr\r", "\"nl\\ntab\\tcr\\r\""},
        {"\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\""},
        {"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\x92",
         "\"caf\xc3\xa9 \xe2\x9c\x93 \xf0\x9f\x94\x92\""},
        {"bad \xff end", "\"bad \\ufffd end\""},
        {"cut \xe2\x9c", "\"cut \\ufffd\\ufffd\""},
        {"overlong \xc0\xaf", "\"overlong \\ufffd\\ufffd\""},
        {"surrogate \xed\xa0\x80", "\"surrogate \\ufffd\\ufffd\\ufffd\""},
        {"", "\"\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *got = json_of(cases[i].in);
        assert_string_equal(got, cases[i].out);
        free(got);
    }
}

static void test_json_writer_places_commas(void **state)
{
    (void)state;
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    json_writer w;
    json_init(&w, f);
    json_object_begin(&w, NULL);
    json_int(&w, "a", 1);
    json_array_begin(&w, "b");
    json_int(&w, NULL, 2);
    json_string(&w, NULL, NULL);
    json_object_begin(&w, NULL);
    json_object_end(&w);
    json_array_end(&w);
    json_seconds(&w, "c", -1);
    json_seconds(&w, "d", 1.5);
    json_bool(&w, "e", 1);
    json_object_end(&w);
    json_end(&w);
    fclose(f);
    assert_string_equal(
        buf, "{\"a\":1,\"b\":[2,null,{}],\"c\":null,\"d\":1.500,\"e\":true}\n");
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bigint_locktags_decode_with_sign),
        cmocka_unit_test(test_pair_locktags_decode_as_int4),
        cmocka_unit_test(test_locktag_lists_decode_every_bigint),
        cmocka_unit_test(test_json_strings_are_escaped_and_valid_utf8),
        cmocka_unit_test(test_json_writer_places_commas),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
