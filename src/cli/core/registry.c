/*
 * The key registry: one file of lock constants shared by every host.
 *
 * Format, one entry per line:
 *   name = KEY      KEY in pglock_key_parse() syntax (no @references)
 *   name            a bare name: its key is the name hashed by the rule
 *   # comment       only as a whole line; blank lines are ignored
 * Spaces and tabs around the name and the KEY are trimmed, and a final
 * '\r' is dropped (CRLF files).  A name is non-empty UTF-8 with no
 * whitespace, control character or '=' and does not begin with '@'.  A
 * name defined twice is an error (a host must not pick one silently).
 * Errors read "FILE:LINE: message".
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

/* A registry file larger than this is surely not a registry. */
#define REGISTRY_MAX_BYTES (16L * 1024 * 1024)

typedef struct entry {
    const char *name;
    pglock_key key;
    int line;
} entry;

struct cli_registry {
    char *origin; /* the file it came from; NULL for no registry */
    char *text;   /* our copy of the file; names and keys point into it */
    entry *entries;
    size_t count, cap;
};

/* Writes "ORIGIN:LINE: " and fmt (with one %s for arg, already one
 * line) into err; returns -1. */
static int fail(char *err, size_t errlen, const char *origin, int line,
                const char *fmt, const char *arg)
{
    if (err && errlen) {
        char shown[64 * 4 + 4];
        cli_echo_arg(arg ? arg : "", 0, shown, sizeof shown);
        int n = snprintf(err, errlen, "%s:%d: ", origin, line);
        if (n >= 0 && (size_t)n < errlen)
            snprintf(err + n, errlen - (size_t)n, fmt, shown);
    }
    return -1;
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

/* Trims spaces and tabs in place; returns the new start. */
static char *trim(char *s)
{
    while (is_blank(*s))
        s++;
    size_t n = strlen(s);
    while (n && is_blank(s[n - 1]))
        s[--n] = '\0';
    return s;
}

/* NULL if name is acceptable, else why not. */
static const char *bad_name(const char *name)
{
    pglock_key probe;
    if (!*name)
        return "missing name before '='";
    if (name[0] == '@')
        return "name \"%s\" must not begin with '@'";
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        if (*p <= 0x20 || *p == 0x7F)
            return "name \"%s\" contains whitespace or a control character";
    if (pglock_key_text(&probe, name) != PGLOCK_OK)
        return "name is not valid UTF-8";
    return NULL;
}

static const entry *find(const cli_registry *reg, const char *name)
{
    for (size_t i = 0; reg && i < reg->count; i++)
        if (!strcmp(reg->entries[i].name, name))
            return &reg->entries[i];
    return NULL;
}

static int add(cli_registry *reg, const char *name, const pglock_key *key,
               int line)
{
    if (reg->count == reg->cap) {
        size_t cap = reg->cap ? reg->cap * 2 : 16;
        entry *e = realloc(reg->entries, cap * sizeof *e);
        if (!e)
            return -1;
        reg->entries = e;
        reg->cap = cap;
    }
    reg->entries[reg->count++] = (entry){name, *key, line};
    return 0;
}

/* Parses one line (already cut at '\n', NUL-terminated, writable). */
static int parse_line(cli_registry *reg, char *line, int lineno,
                      const char *origin, char *err, size_t errlen)
{
    size_t n = strlen(line);
    if (n && line[n - 1] == '\r')
        line[n - 1] = '\0';
    char *s = trim(line);
    if (!*s || *s == '#')
        return 0;

    char *eq = strchr(s, '=');
    char *keytext = NULL;
    if (eq) {
        *eq = '\0';
        keytext = trim(eq + 1);
    }
    char *name = trim(s);
    const char *why = bad_name(name);
    if (why)
        return fail(err, errlen, origin, lineno, why, name);
    const entry *dup = find(reg, name);
    if (dup) {
        char msg[64];
        snprintf(msg, sizeof msg, "duplicate name \"%%s\" (first on line %d)",
                 dup->line);
        return fail(err, errlen, origin, lineno, msg, name);
    }

    pglock_key key;
    if (!keytext) {
        if (pglock_key_text(&key, name) != PGLOCK_OK)
            return fail(err, errlen, origin, lineno, "invalid name", NULL);
    } else if (!*keytext) {
        return fail(err, errlen, origin, lineno, "no key after '=' for \"%s\"",
                    name);
    } else if (keytext[0] == '@') {
        return fail(err, errlen, origin, lineno,
                    "a key cannot refer to another registry name (%s)",
                    keytext);
    } else {
        pglock_error why_key;
        if (pglock_key_parse(&key, keytext, &why_key) != PGLOCK_OK) {
            /* Already one line, escaped and bounded by the parser. */
            if (err && errlen)
                snprintf(err, errlen, "%s:%d: %s", origin, lineno,
                         why_key.message);
            return -1;
        }
    }
    if (add(reg, name, &key, lineno) < 0)
        return fail(err, errlen, origin, lineno, "out of memory", NULL);
    return 0;
}

int cli_registry_parse(cli_registry **out, const char *text, size_t len,
                       const char *origin, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    *out = NULL;
    if (!origin)
        origin = "registry";
    cli_registry *reg = calloc(1, sizeof *reg);
    if (!reg || !(reg->origin = strdup(origin)) ||
        !(reg->text = malloc(len + 1))) {
        cli_registry_free(reg);
        if (err && errlen)
            snprintf(err, errlen, "out of memory");
        return -1;
    }
    if (len)
        memcpy(reg->text, text, len);
    reg->text[len] = '\0';

    char *p = reg->text, *end = reg->text + len;
    for (int lineno = 1; p < end; lineno++) {
        char *nl = memchr(p, '\n', (size_t)(end - p));
        char *stop = nl ? nl : end;
        if (memchr(p, '\0', (size_t)(stop - p))) {
            fail(err, errlen, reg->origin, lineno, "contains a NUL byte", NULL);
            cli_registry_free(reg);
            return -1;
        }
        *stop = '\0';
        if (parse_line(reg, p, lineno, reg->origin, err, errlen) < 0) {
            cli_registry_free(reg);
            return -1;
        }
        p = stop + 1;
    }
    *out = reg;
    return 0;
}

/* Reads a whole file into a malloc'd buffer. */
static char *read_file(const char *path, size_t *len, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, errlen, "could not open registry \"%s\": %s", path,
                 strerror(errno));
        return NULL;
    }
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *b = cap * 2 <= (size_t)REGISTRY_MAX_BYTES
                          ? realloc(buf, cap * 2)
                          : NULL;
            if (!b) {
                snprintf(err, errlen, "registry \"%s\" is too large", path);
                free(buf);
                buf = NULL;
                break;
            }
            buf = b;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) {
            if (ferror(f)) {
                snprintf(err, errlen, "could not read registry \"%s\": %s",
                         path, strerror(errno));
                free(buf);
                buf = NULL;
            }
            break;
        }
    }
    fclose(f);
    *len = n;
    return buf;
}

int cli_registry_load(cli_registry **out, const char *path, char *err,
                      size_t errlen)
{
    char scratch[256];
    if (!err || !errlen) {
        err = scratch;
        errlen = sizeof scratch;
    }
    err[0] = '\0';
    *out = NULL;
    if (!path) {
        path = getenv("PGLOCK_KEYS");
        if (!path || !*path) {
            /* No registry: @NAME keys will say so when looked up. */
            *out = calloc(1, sizeof **out);
            if (!*out) {
                snprintf(err, errlen, "out of memory");
                return -1;
            }
            return 0;
        }
    }
    size_t len;
    char *text = read_file(path, &len, err, errlen);
    if (!text)
        return -1;
    int rc = cli_registry_parse(out, text, len, path, err, errlen);
    free(text);
    return rc;
}

void cli_registry_free(cli_registry *reg)
{
    if (!reg)
        return;
    free(reg->origin);
    free(reg->text);
    free(reg->entries);
    free(reg);
}

const char *cli_registry_origin(const cli_registry *reg)
{
    return reg ? reg->origin : NULL;
}

const pglock_key *cli_registry_lookup(const cli_registry *reg, const char *name)
{
    const entry *e = name ? find(reg, name) : NULL;
    return e ? &e->key : NULL;
}

const char *cli_registry_near(const cli_registry *reg, const char *name)
{
    if (!reg || !reg->count || !name)
        return NULL;
    const char **names = malloc(reg->count * sizeof *names);
    if (!names)
        return NULL; /* a hint is not worth an error */
    for (size_t i = 0; i < reg->count; i++)
        names[i] = reg->entries[i].name;
    const char *near = cli_did_you_mean(name, names, reg->count);
    free(names);
    return near;
}

const char *cli_registry_name_of(const cli_registry *reg, const pglock_key *key)
{
    for (size_t i = 0; reg && key && i < reg->count; i++)
        if (cli_same_lock(&reg->entries[i].key, key))
            return reg->entries[i].name;
    return NULL;
}

void cli_registry_collisions(const cli_registry *reg,
                             void (*fn)(const char *a, const char *b,
                                        const pglock_key *key, void *arg),
                             void *arg)
{
    /* Quadratic, and fine: registries hold tens or hundreds of names. */
    for (size_t i = 0; reg && i < reg->count; i++)
        for (size_t j = i + 1; j < reg->count; j++)
            if (cli_same_lock(&reg->entries[i].key, &reg->entries[j].key))
                fn(reg->entries[i].name, reg->entries[j].name,
                   &reg->entries[i].key, arg);
}
