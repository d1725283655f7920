/*
 * The layout of every public struct, as a consumer compiled against
 * include/pglock.h sees it (size, each field's offset and size), compared
 * with the baseline committed in tests/data/abi-layout.txt.  Lines are
 * keyed by SONAME (with the data model: lp64), struct and the struct's
 * PGLOCK_*_VERSION ("-" for the structs that have none: pglock_key,
 * pglock_error, pglock_holder): a layout that changes while its key stays
 * the same breaks programs built against the old header, and fails here.
 * A new options version (or SONAME) is a new key: append its lines to the
 * baseline (`test_abi_layout --print`), keeping the old ones, which a
 * library of the same SONAME must still accept.  pglock_holder may also
 * grow at its end within a key (pglock.h, "Who holds what"): append the
 * new fields' lines, change its sizeof line, and nothing else.
 *
 * Which structs and fields there are is read from the header itself, so
 * a struct or field added to pglock.h and not listed in current() below
 * fails too.
 *
 * The error codes are part of the ABI as well: each code's value is a
 * line ("pglock_error_codes - PGLOCK_EBUSY 1 0", the value negated),
 * made from PGLOCK_ERRNO_MAP itself, so a value that changes or a code
 * that goes fails, and a new code is appended to the baseline.
 */
#include <ctype.h>
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

static void add(layout *l, const char *s, const char *version, const char *what,
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
        snprintf(soname, sizeof soname, "0.%d/%s", PGLOCK_VERSION_MINOR, model);
    else
        snprintf(soname, sizeof soname, "%d/%s", PGLOCK_VERSION_MAJOR, model);
    snprintf(l->line[l->n++], LINE_LEN, "%s %s %s %s %zu %zu", soname, s,
             version, what, a, b);
}

#define STR_(x) #x
#define STR(x) STR_(x)
#define SIZE(l, T, V) add(l, #T, V, "sizeof", sizeof(T), 0)
#define FIELD(l, T, V, f) add(l, #T, V, #f, offsetof(T, f), sizeof(((T *)0)->f))

/* The key of the error codes' lines (not a struct of the header's). */
#define ERROR_CODES "pglock_error_codes"

/* Every public struct and every one of its fields, and the error codes. */
static void current(layout *l)
{
    l->n = 0;
    const char *v = "-";
    SIZE(l, pglock_error, v);
    FIELD(l, pglock_error, v, code);
    FIELD(l, pglock_error, v, sqlstate);
    FIELD(l, pglock_error, v, message);
    SIZE(l, pglock_key, v);
    FIELD(l, pglock_key, v, kind);
    FIELD(l, pglock_key, v, id);
    FIELD(l, pglock_key, v, ns);
    FIELD(l, pglock_key, v, nsid);
    FIELD(l, pglock_key, v, seed);
    FIELD(l, pglock_key, v, name);
    FIELD(l, pglock_key, v, name_len);
    FIELD(l, pglock_key, v, resolved);
    FIELD(l, pglock_key, v, reserved);
    v = STR(PGLOCK_OPTIONS_VERSION);
    SIZE(l, pglock_options, v);
    FIELD(l, pglock_options, v, version);
    FIELD(l, pglock_options, v, lease_ms);
    FIELD(l, pglock_options, v, application_name);
    FIELD(l, pglock_options, v, interrupt_fd);
    FIELD(l, pglock_options, v, cancel_timeout_ms);
    FIELD(l, pglock_options, v, dead_peer_ms);
    FIELD(l, pglock_options, v, lifetime);
    FIELD(l, pglock_options, v, connect_timeout_ms);
    v = STR(PGLOCK_HOLD_OPTIONS_VERSION);
    SIZE(l, pglock_hold_options, v);
    FIELD(l, pglock_hold_options, v, version);
    FIELD(l, pglock_hold_options, v, drive);
    FIELD(l, pglock_hold_options, v, on_lost);
    FIELD(l, pglock_hold_options, v, arg);
    FIELD(l, pglock_hold_options, v, stop_budget_ms);
    FIELD(l, pglock_hold_options, v, watch_stop_requests);
    v = "-";
    SIZE(l, pglock_holder, v);
    FIELD(l, pglock_holder, v, key);
    FIELD(l, pglock_holder, v, database);
    FIELD(l, pglock_holder, v, pid);
    FIELD(l, pglock_holder, v, mode);
    FIELD(l, pglock_holder, v, granted);
    FIELD(l, pglock_holder, v, has_session);
    FIELD(l, pglock_holder, v, hidden);
    FIELD(l, pglock_holder, v, user);
    FIELD(l, pglock_holder, v, application_name);
    FIELD(l, pglock_holder, v, client_addr);
    FIELD(l, pglock_holder, v, client_port);
    FIELD(l, pglock_holder, v, state);
    FIELD(l, pglock_holder, v, held_min_s);
    FIELD(l, pglock_holder, v, held_max_s);
    FIELD(l, pglock_holder, v, waiting_s);
    FIELD(l, pglock_holder, v, waiting_source);
    FIELD(l, pglock_holder, v, blocked_by);
    FIELD(l, pglock_holder, v, n_blocked_by);
#define CODE(name, value, text) \
    add(l, ERROR_CODES, "-", "PGLOCK_" #name, (size_t) - (value), 0);
    PGLOCK_ERRNO_MAP(CODE)
#undef CODE
}

/* ------------------------------------------- what the header declares */

/* "STRUCT FIELD" for every field of every struct the header defines
 * (`typedef struct NAME { ... } NAME;`; opaque typedefs have no body). */
typedef struct names {
    char name[MAX_LINES][160];
    int n;
} names;

static char *read_header(void)
{
    FILE *f = fopen(PGLOCK_SOURCE_DIR "/include/pglock.h", "r");
    if (!f)
        fail_msg("cannot read include/pglock.h");
    static char text[1 << 17];
    size_t n = fread(text, 1, sizeof text - 1, f);
    assert_true(n < sizeof text - 1);
    fclose(f);
    text[n] = '\0';
    /* Comments out, so that only declarations are left. */
    char *w = text;
    for (const char *r = text; *r;) {
        if (r[0] == '/' && r[1] == '*') {
            const char *e = strstr(r + 2, "*/");
            assert_non_null(e);
            r = e + 2;
            *w++ = ' ';
        } else if (r[0] == '/' && r[1] == '/') {
            r += strcspn(r, "\n");
        } else {
            *w++ = *r++;
        }
    }
    *w = '\0';
    return text;
}

/* The name a declaration declares: its last identifier, array bounds
 * left out.  Fails on what this reader does not know (a declaration of
 * two fields, an inline function pointer, a nested struct). */
static void declared(char *out, size_t len, const char *decl, size_t n)
{
    char d[256];
    assert_true(n < sizeof d);
    memcpy(d, decl, n);
    d[n] = '\0';
    if (strpbrk(d, ",(){"))
        fail_msg("test_abi_layout cannot read the field \"%s\": declare "
                 "one field per statement, function pointers by typedef",
                 d);
    char *br = strchr(d, '[');
    if (br)
        *br = '\0';
    size_t e = strlen(d);
    while (e && isspace((unsigned char)d[e - 1]))
        e--;
    size_t b = e;
    while (b && (isalnum((unsigned char)d[b - 1]) || d[b - 1] == '_'))
        b--;
    assert_true(b < e);
    snprintf(out, len, "%.*s", (int)(e - b), d + b);
}

static void header_fields(names *out)
{
    const char *p = read_header();
    out->n = 0;
    while ((p = strstr(p, "typedef struct")) != NULL) {
        p += strlen("typedef struct");
        char sname[64];
        int used = 0;
        if (sscanf(p, " %63[A-Za-z0-9_] %n", sname, &used) != 1 || !used ||
            p[used] != '{')
            continue; /* opaque */
        const char *body = p + used + 1, *end = strchr(body, '}');
        assert_non_null(end);
        for (const char *d = body; d < end;) {
            const char *semi = memchr(d, ';', (size_t)(end - d));
            const char *stop = semi ? semi : end;
            const char *q = d;
            while (q < stop && isspace((unsigned char)*q))
                q++;
            if (q < stop) {
                if (!semi)
                    fail_msg("a field of %s has no ';'", sname);
                char field[64];
                declared(field, sizeof field, q, (size_t)(stop - q));
                assert_true(out->n < MAX_LINES);
                snprintf(out->name[out->n++], sizeof out->name[0], "%s %s",
                         sname, field);
            }
            d = stop + 1;
        }
        p = end;
    }
}

/* The same from current()'s lines: "STRUCT FIELD" of each field line. */
static void covered_fields(const layout *l, names *out)
{
    out->n = 0;
    for (int i = 0; i < l->n; i++) {
        char model[48], st[64], ver[16], field[64];
        assert_int_equal(sscanf(l->line[i], "%47s %63s %15s %63s", model, st,
                                ver, field),
                         4);
        if (strcmp(field, "sizeof") != 0 && strcmp(st, ERROR_CODES) != 0)
            snprintf(out->name[out->n++], sizeof out->name[0], "%s %s", st,
                     field);
    }
}

static int listed(const names *n, const char *s)
{
    for (int i = 0; i < n->n; i++)
        if (strcmp(n->name[i], s) == 0)
            return 1;
    return 0;
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
            printf(
                "# no baseline for \"%.*s\": a new struct or version; append the "
                "output of test_abi_layout --print for it to "
                "tests/data/abi-layout.txt\n",
                (int)key_len(k) - 1, k);
            failed = 1;
            continue;
        }
        printf("# checking \"%.*s\"\n", (int)key_len(k) - 1, k);
        int changed = missing(&now, &base, k) | missing(&base, &now, k);
        if (changed && strstr(k, " " ERROR_CODES " ")) {
            printf("# the error codes differ from the baseline (lines above):"
                   " a code's value never changes and no code goes within a "
                   "SONAME; a new code is appended to the baseline\n");
            failed = 1;
        } else if (changed && strstr(k, " - ")) {
            printf("# the layout of \"%.*s\" differs from the baseline (lines"
                   " above), but the SONAME did not change: a struct without "
                   "a version keeps its layout within a SONAME (pglock_holder"
                   " may gain fields at its end: append their lines, change "
                   "its sizeof line)\n",
                   (int)key_len(k) - 1, k);
            failed = 1;
        } else if (changed) {
            printf("# the layout of \"%.*s\" differs from the baseline (lines"
                   " above), but its version and the SONAME did not change: "
                   "bump its PGLOCK_*_VERSION (append fields only) or the "
                   "SONAME\n",
                   (int)key_len(k) - 1, k);
            failed = 1;
        }
    }
    assert_false(failed);
}

static void every_struct_and_field_of_the_header_is_checked(void **s)
{
    (void)s;
    static layout now;
    static names header, covered;
    current(&now);
    header_fields(&header);
    covered_fields(&now, &covered);
    assert_true(header.n > 0);
    int failed = 0;
    for (int i = 0; i < header.n; i++)
        if (!listed(&covered, header.name[i])) {
            printf("# pglock.h declares \"%s\", which current() in "
                   "test_abi_layout.c does not check: add it (SIZE for a "
                   "new struct, FIELD for each field), then its baseline\n",
                   header.name[i]);
            failed = 1;
        }
    for (int i = 0; i < covered.n; i++)
        if (!listed(&header, covered.name[i])) {
            printf("# test_abi_layout.c checks \"%s\", which pglock.h does "
                   "not declare (or this reader missed)\n",
                   covered.name[i]);
            failed = 1;
        }
    printf("# %d fields of the header, %d checked\n", header.n, covered.n);
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
        cmocka_unit_test(every_struct_and_field_of_the_header_is_checked),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
