/* DURATION arguments: accepted forms and values, rejected forms; and
 * durations written for people. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "cli.h"

static void test_accepts(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        long ms;
    } goods[] = {
        {"0", 0},         {"30", 30000},
        {"500ms", 500},   {"0ms", 0},
        {"30s", 30000},   {"5m", 300000},
        {"2h", 7200000},  {"05s", 5000},
        {"1ms", 1},       {"86400", 86400000L},
        {"1.5s", 1500},   {"1.5", 1500},
        {"0.25m", 15000}, {"2.5h", 9000000L},
        {"0.001s", 1},    {"1.000s", 1000},
    };
    for (size_t i = 0; i < sizeof goods / sizeof goods[0]; i++) {
        long ms = -1;
        char err[128] = "unset";
        if (cli_parse_duration(goods[i].text, &ms, err, sizeof err) != 0)
            fail_msg("\"%s\" rejected: %s", goods[i].text, err);
        assert_int_equal(ms, goods[i].ms);
        assert_string_equal(err, "");
    }
}

static void test_rejects(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        const char *why;
    } bads[] = {
        {"", "empty"},
        {"-5s", "expected a number"},
        {"+5s", "expected a number"},
        {" 5s", "expected a number"},
        {"5s ", "unknown unit"},
        {"5 s", "unknown unit"},
        {"1.5ms", "finer than a millisecond"},
        {"0.0005s", "finer than a millisecond"},
        {"1.", "expected digits after the decimal point"},
        {"1.s", "expected digits after the decimal point"},
        {".5s", "expected a number"},
        {"1.0000000001s", "too many decimals"},
        {"1.5.5s", "unknown unit"},
        {"2147483.648s", "too large"},
        {"5x", "unknown unit"},
        {"5S", "unknown unit"},
        {"5sec", "unknown unit"},
        {"5d", "unknown unit"},
        {"5mss", "unknown unit"},
        {"s", "expected a number"},
        {"ms", "expected a number"},
        {"99999999999999999999999", "too large"},
        {"9223372036854775807h", "too large"},
        {"9223372036854775807", "too large"}, /* seconds -> ms overflows */
        {"9223372035854775807ms", "too large"},
        {"2147483648ms", "too large"},
        {"25d", "unknown unit"},
    };
    for (size_t i = 0; i < sizeof bads / sizeof bads[0]; i++) {
        long ms = 1234;
        char err[128] = "";
        if (cli_parse_duration(bads[i].text, &ms, err, sizeof err) != -1)
            fail_msg("\"%s\" accepted as %ld", bads[i].text, ms);
        assert_int_equal(ms, 1234);
        if (!strstr(err, bads[i].why) ||
            strncmp(err, "invalid duration \"", 18))
            fail_msg("\"%s\": message \"%s\" lacks \"%s\"", bads[i].text, err,
                     bads[i].why);
    }
    assert_int_equal(cli_parse_duration(NULL, NULL, NULL, 0), -1);
}

static void test_largest(void **state)
{
    (void)state;
    long ms;
    char text[64];
    /* the largest accepted: PostgreSQL's timeouts stop at INT_MAX ms too */
    snprintf(text, sizeof text, "%ldms", CLI_DURATION_MAX_MS);
    assert_int_equal(cli_parse_duration(text, &ms, NULL, 0), 0);
    assert_true(ms == CLI_DURATION_MAX_MS);
    snprintf(text, sizeof text, "%ldms", CLI_DURATION_MAX_MS + 1);
    assert_int_equal(cli_parse_duration(text, &ms, NULL, 0), -1);
    assert_int_equal(cli_parse_duration("2147483s", &ms, NULL, 0), 0);
    assert_int_equal(cli_parse_duration("2147484s", &ms, NULL, 0), -1);
    assert_int_equal(cli_parse_duration("596h", &ms, NULL, 0), 0);
    assert_int_equal(cli_parse_duration("597h", &ms, NULL, 0), -1);
    /* so that three durations added together never overflow a long */
    assert_true(3 * (CLI_DURATION_MAX_MS / 1) <= LONG_MAX);
}

static void test_formats(void **state)
{
    (void)state;
    static const struct {
        double s;
        int tenths;
        const char *text;
    } cases[] = {
        {0, 0, "0s"},
        {0.4, 0, "0s"},
        {41.5, 0, "42s"},
        {59.4, 0, "59s"},
        {59.6, 0, "1m00s"},
        {133, 0, "2m13s"},
        {3599.4, 0, "59m59s"},
        {3600, 0, "1h00m"},
        {11100, 0, "3h05m"},
        {86399, 0, "23h59m"},
        {86400, 0, "1d00h"},
        {187200, 0, "2d04h"},
        {12.34, 1, "12.3s"},
        {0, 1, "0.0s"},
        {59.94, 1, "59.9s"},
        {59.96, 1, "1m00s"},
        {65, 1, "1m05s"},
        {-1, 1, "0.0s"},
        {1e300, 0, "11574074d01h"},
        {NAN, 1, "0.0s"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char buf[32];
        cli_format_duration(cases[i].s, cases[i].tenths, buf, sizeof buf);
        if (strcmp(buf, cases[i].text))
            fail_msg("%g s (tenths %d): \"%s\", expected \"%s\"", cases[i].s,
                     cases[i].tenths, buf, cases[i].text);
    }
    char small[4];
    cli_format_duration(133, 0, small, sizeof small);
    assert_string_equal(small, "2m1"); /* cut to fit, like snprintf */
}

/* The decimal writer status's table shares with the durations. */
static void test_decimals(void **state)
{
    (void)state;
    char buf[24];
    *cli_put_decimal(buf, 0, 1) = '\0';
    assert_string_equal(buf, "0");
    *cli_put_decimal(buf, 7, 2) = '\0';
    assert_string_equal(buf, "07");
    *cli_put_decimal(buf, 65535, 1) = '\0';
    assert_string_equal(buf, "65535");
    *cli_put_decimal(buf, -42, 1) = '\0';
    assert_string_equal(buf, "-42");
    *cli_put_decimal(buf, LLONG_MIN, 1) = '\0';
    assert_string_equal(buf, "-9223372036854775808");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepts),  cmocka_unit_test(test_rejects),
        cmocka_unit_test(test_largest),  cmocka_unit_test(test_formats),
        cmocka_unit_test(test_decimals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
