/*
 * The application_name of a pglock connection, "pglock COMMAND KEYS on
 * HOST": written by run, lead and --record, read back by status, the busy
 * line, terminate and metrics.  It is the one thing about a session that
 * every role can read in pg_stat_activity, so it carries what a reader of
 * those outputs asks first: which lock, and which host holds it.
 *
 * 63 bytes (NAMEDATALEN - 1) are all the server keeps, counted after it
 * rewrites every byte outside printable ASCII ('?' before PostgreSQL 16,
 * "\xNN" from 16 on).  We count such a byte as its 4 bytes of "\xNN", so
 * the server never cuts what we wrote, whatever its version; the cut is
 * ours, by the rule in cli_application_name().
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"

#define APP_MAX 63 /* NAMEDATALEN - 1 */
static const char host_sep[] = " on ";
#define SEP_LEN (sizeof host_sep - 1)

/* What the server shows for byte c: itself, or "\xNN". */
static size_t shown_width(unsigned char c)
{
    return c >= 0x20 && c < 0x7F ? 1 : 4;
}

/* The longest start of s, in whole UTF-8 characters, that the server
 * shows in at most room bytes: its length in bytes; its width in *width. */
static size_t fit(const char *s, size_t room, size_t *width)
{
    size_t i = 0, w = 0;
    while (s[i]) {
        size_t j = i + 1, cw = shown_width((unsigned char)s[i]);
        while (((unsigned char)s[j] & 0xC0) == 0x80)
            cw += shown_width((unsigned char)s[j++]);
        if (w + cw > room)
            break;
        w += cw;
        i = j;
    }
    *width = w;
    return i;
}

static size_t shown_len(const char *s)
{
    size_t w;
    fit(s, (size_t)-1, &w);
    return w;
}

/* Printable ASCII only: the server shows it as written, so status can
 * hash it back to the key. */
static int plain(const char *s)
{
    return shown_len(s) == strlen(s);
}

/* See cli.h. */
void cli_application_name(char buf[64], const char *command, const char *keys,
                          const char *host)
{
    char prefix[32];
    snprintf(prefix, sizeof prefix, "pglock %.16s ", command);
    size_t room_alone = APP_MAX - strlen(prefix);
    size_t room = room_alone - SEP_LEN, name_w, host_w = 0, w;
    size_t name_bytes, host_bytes = 0;
    size_t wn = shown_len(keys), wh = host ? shown_len(host) : 0;
    if (!host || !*host) {
        name_bytes = fit(keys, room_alone, &name_w);
    } else if (wn + wh <= room) {
        name_bytes = strlen(keys);
        host_bytes = strlen(host);
    } else if (plain(keys) && wn < room) {
        /* the name whole, since only a whole name names the lock; the
         * host gets the rest */
        name_bytes = strlen(keys);
        host_bytes = fit(host, room - wn, &host_w);
    } else if (plain(keys) && wn <= room_alone) {
        name_bytes = strlen(keys); /* no room left for a host */
    } else {
        /* The name cannot name the lock here (too long, or rewritten by
         * the server): the host keeps at least half the room. */
        size_t host_room = wn < room && room - wn > room / 2 ? room - wn
                                                             : room / 2;
        host_bytes = fit(host, host_room, &host_w);
        name_bytes = fit(keys, room - host_w, &w);
    }
    int n = snprintf(buf, 64, "%s%.*s", prefix, (int)name_bytes, keys);
    if (host_bytes && n > 0)
        snprintf(buf + n, 64 - (size_t)n, "%s%.*s", host_sep, (int)host_bytes,
                 host);
}

/* pglock's commands that set one. */
static const char *const commands[] = {"run", "lead", "record", NULL};

/* See cli.h. */
int cli_app_read(const char *app, cli_app_check *check, void *arg,
                 cli_app_said *out)
{
    memset(out, 0, sizeof *out);
    if (!app || strncmp(app, "pglock ", 7) != 0)
        return 0;
    const char *rest = NULL;
    for (int i = 0; commands[i] && !rest; i++) {
        size_t len = strlen(commands[i]);
        if (!strncmp(app + 7, commands[i], len) && app[7 + len] == ' ') {
            out->command = commands[i];
            rest = app + 7 + len + 1;
        }
    }
    if (!rest || !*rest)
        return 0;
    out->keys = rest;
    out->keys_len = strlen(rest);
    /* Before each " on ", from the last, then whole (an older pglock
     * wrote no host, and a name may hold " on " itself): the split whose
     * keys check out wins.  Splits first: this version's names check out
     * on the first try, and each try may cost a SHA-256. */
    char text[256];
    if (check && out->keys_len < sizeof text) {
        for (size_t pos = out->keys_len; pos-- > 0;) {
            if (strncmp(rest + pos, host_sep, SEP_LEN) != 0)
                continue;
            memcpy(text, rest, pos);
            text[pos] = '\0';
            if (check(text, arg)) {
                out->keys_len = pos;
                out->host = rest + pos + SEP_LEN;
                out->checked = 1;
                return 1;
            }
        }
        if (check(rest, arg)) {
            out->checked = 1;
            return 1;
        }
    }
    /* Nothing checks out (a key that is no name, a name cut or
     * rewritten): the host is what follows the last " on ". */
    for (size_t pos = out->keys_len; pos-- > 0;) {
        if (!strncmp(rest + pos, host_sep, SEP_LEN) && rest[pos + SEP_LEN]) {
            out->keys_len = pos;
            out->host = rest + pos + SEP_LEN;
            break;
        }
    }
    return 1;
}

/* See cli.h. */
int cli_app_names_key(const char *text, const pglock_key *key,
                      const cli_registry *reg)
{
    pglock_key named;
    if (text[0] == '@') {
        const pglock_key *k = cli_registry_lookup(reg, text + 1);
        return k && cli_same_lock(k, key);
    }
    return pglock_key_parse(&named, text, NULL) == PGLOCK_OK &&
           named.kind == PGLOCK_KEY_TEXT && cli_same_lock(&named, key);
}

typedef struct names_arg {
    const pglock_key *key;
    const cli_registry *reg;
} names_arg;

static int names(const char *text, void *arg)
{
    const names_arg *a = arg;
    return cli_app_names_key(text, a->key, a->reg);
}

/* See cli.h. */
int cli_app_read_key(const char *app, const pglock_key *key,
                     const cli_registry *reg, cli_app_said *out)
{
    names_arg a = {key, reg};
    return cli_app_read(app, key ? names : NULL, &a, out);
}

/* See cli.h. */
int cli_app_read_holder(const char *app, const pglock_key *key,
                        const cli_registry *reg, cli_app_said *out)
{
    if (!cli_app_read_key(app, key, reg, out) ||
        !strcmp(out->command, "record"))
        return 0;
    return !key || out->checked;
}

/* See cli.h. */
const char *cli_app_host(const char *app, const pglock_key *key,
                         const cli_registry *reg, char *buf, size_t len)
{
    cli_app_said said;
    if (!cli_app_read_key(app, key, reg, &said) || !said.host)
        return NULL;
    snprintf(buf, len, "%s", said.host);
    return buf;
}
