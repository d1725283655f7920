/*
 * The layout of every public struct, as a consumer compiled against
 * include/pglock.h sees it (size, each field's offset and size), compared
 * with the baseline committed in tests/data/abi-layout.txt.  Lines are
 * keyed by SONAME (with the data model: lp64), struct and the struct's
 * PGLOCK_*_VERSION: a layout that
 * changes while its key stays the same breaks programs built against the
 * old header, and fails here.  A new version (or SONAME) is a new key:
 * append its lines to the baseline (`test_abi_layout --print`), keeping
 * the old ones, which a library of the same SONAME must still accept.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support.h"

#define MAX_LINES 256
#define LINE_LEN 160

typedef struct layout {
    char line[MAX_LINES][LINE_LEN];
    int n;
} layout;

static void add(layout *l, const char *s, unsigned version, const char *what,
                size_t a, size_t b)
{
    assert_true(l->n < MAX_LINES);
    /* The SONAME, and the data model: an ILP32 build has layouts of its
     * own (a key of its own in the baseline). */
    char soname[32];
    const char *model = sizeof(void *) == 8 && sizeof(long) == 8 ? "lp64"
                        : sizeof(void *) == 4                    ? "ilp32"
                                                                 : "other";
    if (PGLOCK_VERSION_MAJOR == 0)
        snprintf(soname, sizeof soname, "0.%d/%s", PGLOCK_VERSION_MINOR,
                 model);
    else
        snprintf(soname, sizeof soname, "%d/%s", PGLOCK_VERSION_MAJOR, model);
    snprintf(l->line[l->n++], LINE_LEN, "%s %s %u %s %zu %zu", soname, s,
             version, what, a, b);
}

#define SIZE(l, T, V) add(l, #T, V, "sizeof", sizeof(T), 0)
#define FIELD(l, T, V, f) \
    add(l, #T, V, #f, offsetof(T, f), sizeof(((T *)0)->f))

/* Every public struct and every one of its fields. */
static void current(layout *l)
{
    l->n = 0;
    unsigned v = PGLOCK_ERROR_VERSION;
    SIZE(l, pglock_error, v);
    FIELD(l, pglock_error, v, version);
    FIELD(l, pglock_error, v, code);
    FIELD(l, pglock_error, v, sqlstate);
    FIELD(l, pglock_error, v, message);
    v = PGLOCK_KEY_VERSION;
    SIZE(l, pglock_key, v);
    FIELD(l, pglock_key, v, version);
    FIELD(l, pglock_key, v, kind);
    FIELD(l, pglock_key, v, id);
    FIELD(l, pglock_key, v, ns);
    FIELD(l, pglock_key, v, nsid);
    FIELD(l, pglock_key, v, seed);
    FIELD(l, pglock_key, v, name);
    FIELD(l, pglock_key, v, name_len);
    FIELD(l, pglock_key, v, resolved);
    v = PGLOCK_OPTIONS_VERSION;
    SIZE(l, pglock_options, v);
    FIELD(l, pglock_options, v, version);
    FIELD(l, pglock_options, v, lease_ms);
    FIELD(l, pglock_options, v, application_name);
    FIELD(l, pglock_options, v, interrupt);
    FIELD(l, pglock_options, v, interrupt_fd);
    FIELD(l, pglock_options, v, cancel_timeout_ms);
    FIELD(l, pglock_options, v, dead_peer_ms);
    FIELD(l, pglock_options, v, hold);
    v = PGLOCK_HOLD_OPTIONS_VERSION;
    SIZE(l, pglock_hold_options, v);
    FIELD(l, pglock_hold_options, v, version);
    FIELD(l, pglock_hold_options, v, drive);
    FIELD(l, pglock_hold_options, v, on_lost);
    FIELD(l, pglock_hold_options, v, arg);
}

static void baseline(layout *l)
{
    FILE *f = fopen(PGLOCK_SOURCE_DIR "/tests/data/abi-layout.txt", "r");
    if (!f)
        fail_msg("cannot read tests/data/abi-layout.txt");
    char buf[LINE_LEN];
    l->n = 0;
    while (fgets(buf, sizeof buf, f)) {
        buf[strcspn(buf, "\n")] = '\0';
        if (!*buf || *buf == '#')
            continue;
        assert_true(l->n < MAX_LINES);
        snprintf(l->line[l->n++], LINE_LEN, "%s", buf);
    }
    fclose(f);
}

/* The key of a line: "SONAME STRUCT VERSION ". */
static size_t key_len(const char *line)
{
    const char *p = line;
    for (int spaces = 0; *p && spaces < 3; p++)
        spaces += *p == ' ';
    return (size_t)(p - line);
}

static int has(const layout *l, const char *line)
{
    for (int i = 0; i < l->n; i++)
        if (strcmp(l->line[i], line) == 0)
            return 1;
    return 0;
}

/* Lines of a with the key of line k that b lacks; 0 if none. */
static int missing(const layout *a, const layout *b, const char *k)
{
    int bad = 0;
    for (int i = 0; i < a->n; i++)
        if (strncmp(a->line[i], k, key_len(k)) == 0 && !has(b, a->line[i])) {
            printf("#   %s\n", a->line[i]);
            bad = 1;
        }
    return bad;
}

static int key_known(const layout *l, const char *k)
{
    for (int i = 0; i < l->n; i++)
        if (strncmp(l->line[i], k, key_len(k)) == 0)
            return 1;
    return 0;
}

static void every_public_struct_keeps_the_layout_of_its_version(void **s)
{
    (void)s;
    static layout now, base;
    current(&now);
    baseline(&base);
    int failed = 0;
    for (int i = 0; i < now.n; i++) {
        const char *k = now.line[i];
        if (i > 0 && strncmp(now.line[i - 1], k, key_len(k)) == 0)
            continue; /* one check per key */
        if (!key_known(&base, k)) {
            printf("# no baseline for \"%.*s\": a new version; append the "
                   "output of test_abi_layout --print for it to "
                   "tests/data/abi-layout.txt\n", (int)key_len(k) - 1, k);
            failed = 1;
            continue;
        }
        printf("# checking \"%.*s\"\n", (int)key_len(k) - 1, k);
        int changed = missing(&now, &base, k) | missing(&base, &now, k);
        if (changed) {
            printf("# the layout of \"%.*s\" differs from the baseline (lines"
                   " above), but its version and the SONAME did not change: "
                   "bump its PGLOCK_*_VERSION (append fields only) or the "
                   "SONAME\n", (int)key_len(k) - 1, k);
            failed = 1;
        }
    }
    assert_false(failed);
}

int main(int argc, char **argv)
{
    if (argc == 2 && strcmp(argv[1], "--print") == 0) {
        static layout now;
        current(&now);
        for (int i = 0; i < now.n; i++)
            printf("%s\n", now.line[i]);
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_public_struct_keeps_the_layout_of_its_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
