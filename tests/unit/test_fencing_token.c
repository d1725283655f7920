/*
 * The fencing token's arithmetic (fencing.c): timeline << 48 | xid8,
 * refused past its budget rather than wrapped below earlier tokens.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include "internal.h"

#define T48 (INT64_C(1) << 48)

static int64_t make(const char *xid8, const char *walfile)
{
    int64_t t = -1;
    assert_int_equal(pglock__token_make(xid8, walfile, &t), 0);
    return t;
}

static void the_timeline_is_the_high_bits(void **state)
{
    (void)state;
    assert_true(make("728", "000000010000000000000001") == T48 + 728);
    assert_true(make("728", "000000020000000000000001") == 2 * T48 + 728);
    /* hex: timeline 0x1A is 26 */
    assert_true(make("5", "0000001A00000003000000FF") == 26 * T48 + 5);
    /* an epoch-extended xid: epoch 3, xid 7 */
    assert_true(make("12884901895", "000000010000000000000001") ==
                T48 + 3 * (INT64_C(1) << 32) + 7);
}

static void a_new_timeline_beats_every_xid_of_the_last(void **state)
{
    (void)state;
    int64_t last_of_1 = make("281474976710655", "000000010000000000000001");
    int64_t first_of_2 = make("3", "000000020000000000000001");
    assert_true(first_of_2 > last_of_1);
    /* and every token of the old scheme (the xid8 alone, below 2^48) */
    assert_true(make("3", "000000010000000000000001") > T48 - 1);
    /* the highest timeline stays positive */
    assert_true(make("281474976710655", "00007FFF0000000000000001") ==
                INT64_MAX);
}

static void past_the_budget_or_malformed_is_refused(void **state)
{
    (void)state;
    int64_t t = 42;
    const char *bad[][2] = {
        {"281474976710656", "000000010000000000000001"}, /* xid8 = 2^48 */
        {"1", "000080000000000000000001"},               /* timeline 32768 */
        {"1", "000000000000000000000001"},               /* timeline 0 */
        {"-1", "000000010000000000000001"},
        {"", "000000010000000000000001"},
        {"12x", "000000010000000000000001"},
        {"99999999999999999999", "000000010000000000000001"},
        {"1", "00000001000000000000001"},   /* 23 digits */
        {"1", "0000000100000000000000011"}, /* 25 */
        {"1", "00000001000000000000000g"},
        {"1", ""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        if (pglock__token_make(bad[i][0], bad[i][1], &t) != -1)
            fail_msg("accepted xid8 \"%s\", WAL file \"%s\"", bad[i][0],
                     bad[i][1]);
        assert_true(t == 42);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(the_timeline_is_the_high_bits),
        cmocka_unit_test(a_new_timeline_beats_every_xid_of_the_last),
        cmocka_unit_test(past_the_budget_or_malformed_is_refused),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
