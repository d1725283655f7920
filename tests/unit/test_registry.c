/* The key registry: format, errors with FILE:LINE, lookups, collisions,
 * and @NAME keys on the command line. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "cli.h"

static cli_registry *parse_ok(const char *text)
{
    cli_registry *reg = NULL;
    char err[256] = "";
    if (cli_registry_parse(&reg, text, strlen(text), "keys.conf", err,
                           sizeof err) != 0)
        fail_msg("registry rejected: %s", err);
    return reg;
}

static void expect_error(const char *text, size_t len, const char *want)
{
    cli_registry *reg = (cli_registry *)1;
    char err[256] = "";
    assert_int_equal(
        cli_registry_parse(&reg, text, len, "keys.conf", err, sizeof err), -1);
    assert_null(reg);
    if (strcmp(err, want) != 0)
        fail_msg("got \"%s\", want \"%s\"", err, want);
}

static void test_format_and_lookup(void **state)
{
    (void)state;
    cli_registry *reg = parse_ok("# lock constants for billing\n"
                                 "\n"
                                 "nightly-billing = 72001\n"
                                 "  report\t=\t42:9  \r\n"
                                 "migrations\n"
                                 "legacy = hashtext:old-name\n"
                                 "spaced-name = text: padded \n"
                                 "café = text:café\n");
    const pglock_key *k = cli_registry_lookup(reg, "nightly-billing");
    assert_non_null(k);
    assert_int_equal(k->kind, PGLOCK_KEY_INT64);
    assert_true(k->id == 72001);
    k = cli_registry_lookup(reg, "report");
    assert_non_null(k);
    assert_int_equal(k->kind, PGLOCK_KEY_PAIR);
    assert_int_equal(k->ns, 42);
    assert_int_equal(k->nsid, 9);
    k = cli_registry_lookup(reg, "migrations");
    assert_non_null(k);
    assert_int_equal(k->kind, PGLOCK_KEY_TEXT);
    assert_true(k->id == pglock_name_to_int64("migrations", 10));
    k = cli_registry_lookup(reg, "legacy");
    assert_non_null(k);
    assert_int_equal(k->kind, PGLOCK_KEY_HASHTEXT);
    assert_string_equal(k->name, "old-name");
    /* Trimming applies around the KEY; "text:" then takes it verbatim. */
    k = cli_registry_lookup(reg, "spaced-name");
    assert_string_equal(k->name, " padded");
    assert_non_null(cli_registry_lookup(reg, "café"));
    assert_null(cli_registry_lookup(reg, "nightly"));
    assert_null(cli_registry_lookup(reg, "# lock constants for billing"));
    assert_string_equal(cli_registry_origin(reg), "keys.conf");

    pglock_key probe;
    pglock_key_int64(&probe, 72001);
    assert_string_equal(cli_registry_name_of(reg, &probe), "nightly-billing");
    pglock_key_pair(&probe, 0, 72001); /* a pair is a different lock */
    assert_null(cli_registry_name_of(reg, &probe));
    pglock_key_text(&probe, "migrations");
    assert_string_equal(cli_registry_name_of(reg, &probe), "migrations");
    pglock_key_int64(&probe, pglock_name_to_int64("migrations", 10));
    assert_string_equal(cli_registry_name_of(reg, &probe), "migrations");
    cli_registry_free(reg);
}

static void test_errors_name_file_and_line(void **state)
{
    (void)state;
    expect_error("a = 1\nb = 2\na = 3\n", 18,
                 "keys.conf:3: duplicate name \"a\" (first on line 1)");
    expect_error("a = 1\nb = 42:x\n", 15,
                 "keys.conf:2: invalid key \"42:x\": the id after ':' is not "
                 "an integer; for a name write text:42:x");
    expect_error("= 5\n", 4, "keys.conf:1: missing name before '='");
    expect_error("a =\n", 4, "keys.conf:1: no key after '=' for \"a\"");
    expect_error("two words = 5\n", 14,
                 "keys.conf:1: name \"two words\" contains whitespace or a "
                 "control character");
    expect_error("@a = 5\n", 7,
                 "keys.conf:1: name \"@a\" must not begin with '@'");
    expect_error(
        "a = @b\n", 7,
        "keys.conf:1: a key cannot refer to another registry name (@b)");
    expect_error("ok\nbad\xff\n", 8, "keys.conf:2: name is not valid UTF-8");
    expect_error("ok\nx\0y\n", 6, "keys.conf:2: contains a NUL byte");
    expect_error("a = 007 # comment\n", 18,
                 "keys.conf:1: invalid key \"007 # comment\": the key is not "
                 "an integer; for a name write text:007 # comment");
    expect_error("a = 1 = 2\n", 10,
                 "keys.conf:1: invalid key \"1 = 2\": the key is not an "
                 "integer; for a name write text:1 = 2");
}

static void test_empty_and_comment_only(void **state)
{
    (void)state;
    cli_registry *reg = parse_ok("");
    assert_null(cli_registry_lookup(reg, "x"));
    cli_registry_free(reg);
    reg = parse_ok("# nothing\n   \n\t# indented comment\n");
    assert_null(cli_registry_lookup(reg, "x"));
    cli_registry_free(reg);
    /* No final newline. */
    reg = parse_ok("last = 5");
    assert_non_null(cli_registry_lookup(reg, "last"));
    cli_registry_free(reg);
}

static void count_pair(const char *a, const char *b, const pglock_key *key,
                       void *arg)
{
    char *seen = arg;
    char line[128];
    snprintf(line, sizeof line, "%s=%s/%d;", a, b, (int)key->kind);
    strcat(seen, line);
}

static void test_collisions(void **state)
{
    (void)state;
    char text[512];
    snprintf(text, sizeof text,
             "billing = 72001\n"
             "billing-again = int:72001\n"
             "pair = 0:72001\n"
             "hashed\n"
             "hashed-number = %lld\n"
             "legacy-a = hashtext:x\n"
             "legacy-b = hashtext:x\n"
             "legacy-c = hashtextextended:1:x\n",
             (long long)pglock_name_to_int64("hashed", 6));
    cli_registry *reg = parse_ok(text);
    char seen[512] = "";
    cli_registry_collisions(reg, count_pair, seen);
    assert_string_equal(seen, "billing=billing-again/1;hashed=hashed-number/3;"
                              "legacy-a=legacy-b/4;");
    cli_registry_free(reg);
}

static void test_cli_parse_key(void **state)
{
    (void)state;
    cli_registry *reg = parse_ok("nightly-billing = 72001\n");
    pglock_key k;
    char err[256];
    assert_int_equal(
        cli_parse_key("@nightly-billing", reg, &k, err, sizeof err), 0);
    assert_true(k.id == 72001);
    assert_int_equal(cli_parse_key("@nope", reg, &k, err, sizeof err), -1);
    assert_string_equal(err,
                        "unknown key \"@nope\": not in registry \"keys.conf\"");
    assert_int_equal(cli_parse_key("42:9", reg, &k, err, sizeof err), 0);
    assert_int_equal(k.kind, PGLOCK_KEY_PAIR);
    assert_int_equal(cli_parse_key("42:x", reg, &k, err, sizeof err), -1);
    assert_non_null(strstr(err, "invalid key \"42:x\""));
    /* The name is not a key by itself: without '@' it is hashed. */
    assert_int_equal(cli_parse_key("nightly-billing", reg, &k, err, sizeof err),
                     0);
    assert_int_equal(k.kind, PGLOCK_KEY_TEXT);
    cli_registry_free(reg);

    assert_int_equal(cli_parse_key("@x", NULL, &k, err, sizeof err), -1);
    assert_string_equal(err, "unknown key \"@x\": no registry given (use "
                             "--keys FILE or PGLOCK_KEYS)");
}

static void test_load_file_and_env(void **state)
{
    (void)state;
    char path[] = "/tmp/pglock-test-registry-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char body[] = "a = 1\nb = 2 x\n";
    assert_int_equal(write(fd, body, sizeof body - 1),
                     (ssize_t)(sizeof body - 1));
    close(fd);

    cli_registry *reg = NULL;
    char err[512], want[600];
    assert_int_equal(cli_registry_load(&reg, path, err, sizeof err), -1);
    snprintf(want, sizeof want, "%s:2: invalid key", path);
    assert_true(strncmp(err, want, strlen(want)) == 0);

    FILE *f = fopen(path, "w");
    fputs("a = 1\n", f);
    fclose(f);
    setenv("PGLOCK_KEYS", path, 1);
    assert_int_equal(cli_registry_load(&reg, NULL, err, sizeof err), 0);
    assert_non_null(cli_registry_lookup(reg, "a"));
    assert_string_equal(cli_registry_origin(reg), path);
    cli_registry_free(reg);

    unsetenv("PGLOCK_KEYS");
    assert_int_equal(cli_registry_load(&reg, NULL, err, sizeof err), 0);
    assert_null(cli_registry_origin(reg));
    pglock_key k;
    assert_int_equal(cli_parse_key("@a", reg, &k, err, sizeof err), -1);
    assert_non_null(strstr(err, "no registry given"));
    cli_registry_free(reg);

    unlink(path);
    assert_int_equal(cli_registry_load(&reg, path, err, sizeof err), -1);
    assert_non_null(strstr(err, "could not open registry"));
    assert_non_null(strstr(err, "No such file"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_and_lookup),
        cmocka_unit_test(test_errors_name_file_and_line),
        cmocka_unit_test(test_empty_and_comment_only),
        cmocka_unit_test(test_collisions),
        cmocka_unit_test(test_cli_parse_key),
        cmocka_unit_test(test_load_file_and_env),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
