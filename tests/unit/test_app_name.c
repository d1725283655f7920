/* The application_name "pglock COMMAND KEYS on HOST" (app_name.c):
 * written within the 63 bytes the server keeps, as the server shows it
 * (non-ASCII rewritten), cut by the documented rule when the name and the
 * host do not both fit, and read back by status, the busy line, terminate
 * and metrics, for holders of this version and of older ones. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "cli.h"

/* What PostgreSQL 16+ keeps of app: each byte outside printable ASCII as
 * "\xNN" (15 and older: '?', never longer), then 63 bytes. */
static void server16(const char *app, char *out, size_t len)
{
    size_t n = 0;
    for (const unsigned char *p = (const unsigned char *)app; *p; p++)
        n += (size_t)snprintf(out + n, len - n,
                              *p >= 0x20 && *p < 0x7F ? "%c" : "\\x%02x", *p);
    if (n > 63)
        out[63] = '\0';
}

static int names_key(const char *text, void *arg)
{
    return cli_app_names_key(text, arg, NULL);
}

/* Reads app as status does, for a holder of the name's key. */
static int read_for(const char *app, const char *name, cli_app_said *said)
{
    static pglock_key key;
    assert_int_equal(pglock_key_text(&key, name), 0);
    return cli_app_read(app, names_key, &key, said);
}

static void assert_host(const cli_app_said *said, const char *host)
{
    if (!host) {
        assert_null(said->host);
        return;
    }
    assert_non_null(said->host);
    assert_string_equal(said->host, host);
}

static void assert_keys(const cli_app_said *said, const char *keys)
{
    assert_int_equal(said->keys_len, strlen(keys));
    assert_memory_equal(said->keys, keys, said->keys_len);
}

static void test_name_and_host_whole(void **state)
{
    (void)state;
    char app[64];
    cli_app_said said;
    cli_application_name(app, "run", "nightly-billing", "cron-3");
    assert_string_equal(app, "pglock run nightly-billing on cron-3");
    assert_int_equal(read_for(app, "nightly-billing", &said), 1);
    assert_true(said.checked);
    assert_string_equal(said.command, "run");
    assert_keys(&said, "nightly-billing");
    assert_host(&said, "cron-3");
    cli_application_name(app, "lead", "scheduler", "cron-3.prod.example.com");
    assert_string_equal(app,
                        "pglock lead scheduler on cron-3.prod.example.com");
    cli_application_name(app, "record", "nightly-billing", "cron-3");
    assert_string_equal(app, "pglock record nightly-billing on cron-3");
    /* no host: the format of older versions */
    cli_application_name(app, "run", "nightly-billing", NULL);
    assert_string_equal(app, "pglock run nightly-billing");
    cli_application_name(app, "run", "nightly-billing", "");
    assert_string_equal(app, "pglock run nightly-billing");
}

/* A name that can name the lock is kept whole; the host is cut first. */
static void test_host_cut_first(void **state)
{
    (void)state;
    char app[64];
    cli_app_said said;
    const char *name = "nightly-billing-customer-export-eu"; /* 34 */
    cli_application_name(app, "run", name, "ip-10-0-12-34.ec2.internal");
    assert_string_equal(
        app, "pglock run nightly-billing-customer-export-eu on ip-10-0-12-34.");
    assert_int_equal(strlen(app), 63);
    assert_int_equal(read_for(app, name, &said), 1);
    assert_true(said.checked);
    assert_keys(&said, name);
    assert_host(&said, "ip-10-0-12-34.");
    /* 47 bytes: one byte of host is left */
    const char *n47 = "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abc";
    cli_application_name(app, "run", n47, "cron-3");
    assert_int_equal(strlen(app), 63);
    assert_int_equal(read_for(app, n47, &said), 1);
    assert_true(said.checked);
    assert_host(&said, "c");
    /* 50 bytes: whole without a host, none with one */
    const char *n50 = "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdef";
    cli_application_name(app, "run", n50, "cron-3");
    assert_int_equal(strlen(app), 61);
    assert_int_equal(read_for(app, n50, &said), 1);
    assert_true(said.checked);
    assert_host(&said, NULL);
}

/* A name that cannot name the lock (too long, or non-ASCII, which the
 * server rewrites): the host keeps at least half the room. */
static void test_name_cut_when_it_cannot_name(void **state)
{
    (void)state;
    char app[64], shown[512];
    cli_app_said said;
    const char
        *n60 = "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcde";
    cli_application_name(app, "run", n60, "cron-3");
    assert_string_equal(
        app, "pglock run abcdefghij-abcdefghij-abcdefghij-abcdefghi on cron-3");
    assert_int_equal(read_for(app, n60, &said), 1);
    assert_false(said.checked);
    assert_host(&said, "cron-3");
    /* a long name and a long host: half the room each (48 / 2) */
    const char *host40 = "a-very-long-host-name.region.example.com";
    cli_application_name(app, "run", n60, host40);
    assert_string_equal(
        app, "pglock run abcdefghij-abcdefghij-ab on a-very-long-host-name.re");
    assert_int_equal(read_for(app, n60, &said), 1);
    assert_host(&said, "a-very-long-host-name.re");
    /* non-ASCII: each of the 6 bytes of "żół" is shown as its \xNN */
    const char *nonascii = "żółw-raport-dzienny";
    cli_application_name(app, "run", nonascii, host40);
    server16(app, shown, sizeof shown);
    assert_true(strlen(shown) <= 63);
    /* 40 shown bytes each: half the room each, "żół" being 24 */
    assert_string_equal(app, "pglock run żół on a-very-long-host-name.re");
    assert_string_equal(
        shown,
        "pglock run \\xc5\\xbc\\xc3\\xb3\\xc5\\x82 on a-very-long-host-name.re");
    /* the server kept it whole: the host reads back as written */
    assert_int_equal(read_for(shown, nonascii, &said), 1);
    assert_false(said.checked);
    assert_true(strncmp(said.host, host40, strlen(said.host)) == 0);
    assert_true(strlen(said.host) >= 24);
}

/* Whatever the pieces, the server never has to cut (PostgreSQL 16's
 * rewriting counted), every cut is on a character, and the host reads
 * back as a start of the one written (as 16 shows it). */
static void test_never_cut_by_the_server(void **state)
{
    (void)state;
    static const char *const names[] = {
        "k",
        "nightly-billing",
        "żółw",
        "名前のとても長いロックの名前です",
        "abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij-abcdefghij",
        "backup on sunday",
        "a b c",
        "@billing",
    };
    static const char *const hosts[] = {
        "h",
        "cron-3",
        "król-1",
        "ホスト名",
        "ip-10-0-12-34.ec2.internal",
        "a-very-long-host-name.region.example.com.and-then-some-more-of-it",
    };
    static const char *const commands[] = {"run", "lead", "record"};
    for (size_t c = 0; c < 3; c++)
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            for (size_t h = 0; h < sizeof hosts / sizeof hosts[0]; h++) {
                char app[64], shown[512], host16[512];
                cli_app_said said;
                cli_application_name(app, commands[c], names[i], hosts[h]);
                server16(app, shown, sizeof shown);
                assert_true(strlen(shown) <= 63);
                /* no character split: valid UTF-8 as a name is */
                pglock_key probe;
                assert_int_equal(pglock_key_text(&probe, app), 0);
                assert_int_equal(cli_app_read(shown, NULL, NULL, &said), 1);
                assert_string_equal(said.command, commands[c]);
                if (!said.host)
                    continue;
                server16(hosts[h], host16, sizeof host16);
                assert_true(strncmp(host16, said.host, strlen(said.host)) == 0);
            }
}

/* Older holders (no host) and names holding " on " read right. */
static void test_reads_old_and_new(void **state)
{
    (void)state;
    cli_app_said said;
    /* an older pglock's holder: its name whole, no host */
    assert_int_equal(
        read_for("pglock run nightly-billing", "nightly-billing", &said), 1);
    assert_true(said.checked);
    assert_host(&said, NULL);
    assert_int_equal(
        read_for("pglock run backup on sunday", "backup on sunday", &said), 1);
    assert_true(said.checked);
    assert_keys(&said, "backup on sunday");
    assert_host(&said, NULL);
    /* this version's, with " on " in the name and in the host */
    assert_int_equal(read_for("pglock run backup on sunday on cron-3",
                              "backup on sunday", &said),
                     1);
    assert_true(said.checked);
    assert_keys(&said, "backup on sunday");
    assert_host(&said, "cron-3");
    assert_int_equal(read_for("pglock run job on box on rack", "job", &said),
                     1);
    assert_true(said.checked);
    assert_host(&said, "box on rack");
    /* keys that are no name: the host after the last " on " */
    assert_int_equal(read_for("pglock run 72001 on cron-3", "x", &said), 1);
    assert_false(said.checked);
    assert_keys(&said, "72001");
    assert_host(&said, "cron-3");
    assert_int_equal(read_for("pglock lead 42:7 a b on cron-3", "x", &said), 1);
    assert_host(&said, "cron-3");
    /* a name the server rewrote ('?' before 16, \xNN from 16) */
    assert_int_equal(read_for("pglock run k-?? on kr??l-1", "k-é", &said), 1);
    assert_false(said.checked);
    assert_host(&said, "kr??l-1");
    assert_int_equal(read_for("pglock run k-\\xc3\\xa9 on kr\\xc3\\xb3l-1",
                              "k-é", &said),
                     1);
    assert_host(&said, "kr\\xc3\\xb3l-1");
    /* the record connection's */
    assert_int_equal(cli_app_read("pglock record nightly-billing on cron-3",
                                  NULL, NULL, &said),
                     1);
    assert_string_equal(said.command, "record");
    assert_keys(&said, "nightly-billing");
    assert_host(&said, "cron-3");
    /* not pglock's */
    assert_int_equal(cli_app_read("psql", NULL, NULL, &said), 0);
    assert_int_equal(cli_app_read("pglock runner x", NULL, NULL, &said), 0);
    assert_int_equal(cli_app_read("pglock terminate", NULL, NULL, &said), 0);
    assert_int_equal(cli_app_read("pglock run ", NULL, NULL, &said), 0);
    assert_int_equal(cli_app_read(NULL, NULL, NULL, &said), 0);
    /* an empty host is none */
    assert_int_equal(cli_app_read("pglock run k on ", NULL, NULL, &said), 1);
    assert_host(&said, NULL);
    char host[64];
    pglock_key k;
    assert_int_equal(pglock_key_text(&k, "nightly-billing"), 0);
    assert_string_equal(cli_app_host("pglock run nightly-billing on cron-3", &k,
                                     NULL, host, sizeof host),
                        "cron-3");
    assert_null(cli_app_host("pglock run nightly-billing", &k, NULL, host,
                             sizeof host));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_name_and_host_whole),
        cmocka_unit_test(test_host_cut_first),
        cmocka_unit_test(test_name_cut_when_it_cannot_name),
        cmocka_unit_test(test_never_cut_by_the_server),
        cmocka_unit_test(test_reads_old_and_new),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
