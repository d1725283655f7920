/* Fuzzes cli_registry_parse(): errors are one printable line starting
 * "ORIGIN:LINE: "; a parsed registry answers lookups for every name it
 * reports, names_of agrees with locktags, and @NAME keys resolve. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "fuzz.h"

static int same_tag(const pglock_key *a, const pglock_key *b)
{
    uint32_t ca, oa, cb, ob;
    int sa, sb;
    if (pglock_key_locktag(a, &ca, &oa, &sa) ||
        pglock_key_locktag(b, &cb, &ob, &sb))
        return -1; /* unresolved legacy key: no coordinates */
    return ca == cb && oa == ob && sa == sb;
}

static void on_collision(const char *a, const char *b, const pglock_key *key,
                         void *arg)
{
    const cli_registry *reg = arg;
    const pglock_key *ka = cli_registry_lookup(reg, a);
    const pglock_key *kb = cli_registry_lookup(reg, b);
    CHECK(ka && kb && ka == key);
    CHECK(strcmp(a, b) != 0);
    CHECK(same_tag(ka, kb) != 0);
    /* The name reported for a key takes that same lock. */
    const char *first = cli_registry_name_of(reg, kb);
    CHECK(first);
    CHECK(same_tag(cli_registry_lookup(reg, first), kb) != 0);

    char at[512];
    pglock_key k;
    char err[256];
    snprintf(at, sizeof at, "@%s", b);
    if (strlen(b) < 500) {
        CHECK(cli_parse_key(at, reg, &k, err, sizeof err) == 0);
        CHECK(k.kind == kb->kind && k.id == kb->id);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    cli_registry *reg = NULL;
    char err[512];
    int rc = cli_registry_parse(&reg, (const char *)data, size, "fuzz.keys",
                                err, sizeof err);
    if (rc != 0) {
        CHECK(rc == -1 && reg == NULL);
        CHECK(!strncmp(err, "fuzz.keys:", 10));
        char *end;
        long line = strtol(err + 10, &end, 10);
        CHECK(line >= 1 && !strncmp(end, ": ", 2));
        for (const char *p = err; *p; p++)
            CHECK((unsigned char)*p >= 0x20 && *p != 0x7F);
        return 0;
    }
    CHECK(reg);
    /* Every line's name, as the user would write it after '@'. */
    const char *p = (const char *)data, *end = p + size;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        size_t n = (size_t)(stop - p);
        char *line = malloc(n + 1);
        memcpy(line, p, n);
        line[n] = '\0';
        char *s = line + strspn(line, " \t");
        char *eq = strchr(s, '=');
        if (eq)
            *eq = '\0';
        s[strcspn(s, " \t\r")] = '\0';
        if (*s && *s != '#') {
            const pglock_key *k = cli_registry_lookup(reg, s);
            CHECK(k);
            if (k->kind == PGLOCK_KEY_TEXT && !eq)
                CHECK(!strcmp(k->name, s));
            CHECK(cli_registry_name_of(reg, k));
        }
        free(line);
        p = stop + 1;
    }
    cli_registry_collisions(reg, on_collision, reg);
    cli_registry_free(reg);
    return 0;
}
