/* cli_opt_parse(): each type of option fills the field its entry names,
 * the shared options fill cli_common, a refused value or option ends
 * the command with 64 and leaves the fields it has not reached alone,
 * and the operands start where the parser says. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "cli.h"

typedef struct test_options {
    cli_common common;
    int flag, set, count, number, choice;
    const char *string;
    long duration_ms;
    const char *called; /* the value the CLI_OPT_CALL saw */
    int calls;
} test_options;
CLI_COMMON_FIRST(test_options);

static cli_step record_call(const char *command, const cli_opt *o,
                            cli_common *target, const char *value)
{
    test_options *t = (test_options *)target;
    (void)command, (void)o;
    t->called = value ? value : "(none)";
    t->calls++;
    return CLI_GO_ON;
}

static const cli_opt_choice colours[] = {{"red", 1}, {"green", 2}, {NULL, 0}};

static const cli_opt test_opts[] = {{.type = CLI_OPT_HEADING, .help = "Test:"},
                                    {.type = CLI_OPT_FLAG,
                                     .short_name = 'f',
                                     .long_name = "flag",
                                     .field = offsetof(test_options, flag),
                                     .help = "a flag"},
                                    {.type = CLI_OPT_SET,
                                     .long_name = "seven",
                                     .field = offsetof(test_options, set),
                                     .set = 7,
                                     .help = "sets 7"},
                                    {.type = CLI_OPT_COUNT,
                                     .short_name = 'c',
                                     .long_name = "count",
                                     .field = offsetof(test_options, count),
                                     .help = "counts"},
                                    {.type = CLI_OPT_STRING,
                                     .short_name = 's',
                                     .long_name = "string",
                                     .field = offsetof(test_options, string),
                                     .value_name = "S",
                                     .help = "a string"},
                                    {.type = CLI_OPT_DURATION,
                                     .long_name = "duration",
                                     .field = offsetof(test_options,
                                                       duration_ms),
                                     .value_name = "DURATION",
                                     .help = "a duration"},
                                    {.type = CLI_OPT_INT,
                                     .long_name = "number",
                                     .field = offsetof(test_options, number),
                                     .value_name = "N",
                                     .min = 1,
                                     .max = 99,
                                     .help = "1 to 99"},
                                    {.type = CLI_OPT_CHOICE,
                                     .long_name = "colour",
                                     .field = offsetof(test_options, choice),
                                     .value_name = "C",
                                     .choices = colours,
                                     .help = "red or green"},
                                    {.type = CLI_OPT_CALL,
                                     .long_name = "call",
                                     .value_name = "V",
                                     .optional = 1,
                                     .call = record_call,
                                     .help = "calls"},
                                    {.type = CLI_OPT_END}};

static const cli_opt *const test_tables[] = {test_opts,     cli_output_heading,
                                             cli_json_opts, cli_quiet_opts,
                                             cli_keys_opts, cli_conn_opts,
                                             cli_help_opts, NULL};

static int helps; /* print_help() calls */

static void print_help(const cli_common *target)
{
    (void)target;
    helps++;
}

/* cli_opt_parse() of the words (NULL-terminated) after "test", into *t
 * (zeroed first); *operand is the first operand's index. */
static cli_step parse(test_options *t, unsigned flags, int *operand, ...)
{
    static char words[16][64];
    static char *argv[17];
    int argc = 0;
    va_list ap;
    va_start(ap, operand);
    snprintf(words[argc], sizeof words[argc], "test");
    argv[argc] = words[argc];
    argc++;
    for (const char *w; (w = va_arg(ap, const char *)) && argc < 16; argc++) {
        snprintf(words[argc], sizeof words[argc], "%s", w);
        argv[argc] = words[argc];
    }
    va_end(ap);
    argv[argc] = NULL;
    memset(t, 0, sizeof *t);
    cli_quiet = 0;
    const cli_opt_command cmd = {"test", test_tables, print_help, flags};
    *operand = -1;
    return cli_opt_parse(&cmd, argc, argv, &t->common, operand);
}

static void test_each_type_fills_its_field(void **state)
{
    (void)state;
    test_options t;
    int at;
    cli_step step = parse(&t, 0, &at, "-f", "--seven", "-cc", "--count",
                          "--string=x y", "--duration=1.5s", "--number", "42",
                          "--colour=green", "--call", "OP", NULL);
    assert_int_equal(step, CLI_GO_ON);
    assert_int_equal(t.flag, 1);
    assert_int_equal(t.set, 7);
    assert_int_equal(t.count, 3);
    assert_string_equal(t.string, "x y");
    assert_int_equal(t.duration_ms, 1500);
    assert_int_equal(t.number, 42);
    assert_int_equal(t.choice, 2);
    assert_string_equal(t.called, "(none)"); /* an optional value: none */
    assert_int_equal(at, 11);                /* "OP" */
}

static void test_shared_options_fill_common(void **state)
{
    (void)state;
    test_options t;
    int at;
    cli_step step = parse(&t, 0, &at, "-h", "H", "--port=5", "-U", "u",
                          "--dbname", "d", "--keys=K", "--json", "-q",
                          "--call=v", NULL);
    assert_int_equal(step, CLI_GO_ON);
    assert_string_equal(t.common.conn.host, "H");
    assert_string_equal(t.common.conn.port, "5");
    assert_string_equal(t.common.conn.user, "u");
    assert_string_equal(t.common.conn.dbname, "d");
    assert_string_equal(t.common.keys_file, "K");
    assert_int_equal(t.common.json, 1);
    assert_int_equal(cli_quiet, 1);
    assert_string_equal(t.called, "v");
    cli_quiet = 0;
}

static void test_bad_values_end_with_usage(void **state)
{
    (void)state;
    /* each, then --call, which must not be read */
    static const char *const bad[] = {
        "--duration=5x", "--duration=-1", "--number=0",  "--number=100",
        "--number=+5",   "--number= 5",   "--number=5x", "--colour=blue",
        "--unknown",     "--flag=1",      "-Z",          "--flga"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        test_options t;
        int at;
        cli_step step = parse(&t, 0, &at, bad[i], "--call", NULL);
        if (step != CLI_EXIT_USAGE)
            fail_msg("%s: %d, not 64", bad[i], step);
        assert_int_equal(t.calls, 0);
    }
    /* a value missing at the end */
    static const char *const missing[] = {"--string", "-s", "--number"};
    for (size_t i = 0; i < sizeof missing / sizeof missing[0]; i++) {
        test_options t;
        int at;
        if (parse(&t, 0, &at, "--call", missing[i], NULL) != CLI_EXIT_USAGE)
            fail_msg("%s without a value was taken", missing[i]);
    }
}

static void test_stop_at_operand(void **state)
{
    (void)state;
    test_options t;
    int at;
    /* the job's own options, after the operand, are not ours */
    cli_step step = parse(&t, CLI_OPT_STOP_AT_OPERAND, &at, "-f", "KEY", "-c",
                          "--help", NULL);
    assert_int_equal(step, CLI_GO_ON);
    assert_int_equal(at, 2);
    assert_int_equal(t.count, 0);
    /* mixed: options after an operand are read, and help anywhere wins */
    step = parse(&t, 0, &at, "OP", "-c", NULL);
    assert_int_equal(step, CLI_GO_ON);
    assert_int_equal(t.count, 1);
    int before = helps;
    step = parse(&t, 0, &at, "--bogus", "OP", "-?", NULL);
    assert_int_equal(step, 0);
    assert_int_equal(helps, before + 1);
    step = parse(&t, CLI_OPT_STOP_AT_OPERAND, &at, "-f", "--help", NULL);
    assert_int_equal(step, 0);
    assert_int_equal(helps, before + 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_each_type_fills_its_field),
        cmocka_unit_test(test_shared_options_fill_common),
        cmocka_unit_test(test_bad_values_end_with_usage),
        cmocka_unit_test(test_stop_at_operand),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
