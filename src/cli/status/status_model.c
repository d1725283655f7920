/*
 * status_model.c — what `pglock status` makes of one look, for whichever
 * renderer: the requests grouped by key (a lock_view each), each lock
 * named (registry, a pglock application_name that hashes back to the
 * key, a semaphore's part, a recorded run), and the waiters' tree.
 * cmd_status.c looks and calls status_group_locks(); status_text.c and
 * status_json.c read the views with status_parent_of() and
 * status_key_text().
 */
#include <stdio.h>
#include <string.h>
#include "database_name.h"
#include "history.h"
#include "status.h"

/* ------------------------------------------------------------ keys */

void status_key_text(const pglock_key *key, char *buf, size_t len)
{
    if (pglock_key_format(key, buf, len) < 0)
        snprintf(buf, len, "?");
}

/* ------------------------------------------------------------ naming */

/* The name in a pglock application_name ("pglock run NAME"), believed
 * only if it hashes back to key: application_name is cut at 63 bytes and
 * non-ASCII bytes arrive as '?', which changes the hash. */
/* The key named by a "pglock run NAME" or "pglock lead NAME"
 * application_name, into *out, and NAME (borrowed from app); NULL when
 * app names none. */
static const char *app_key(const char *app, const cli_registry *reg,
                           pglock_key *out)
{
    static const char *const prefixes[] = {"pglock run ", "pglock lead "};
    if (!app)
        return NULL;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t len = strlen(prefixes[i]);
        if (strncmp(app, prefixes[i], len) != 0)
            continue;
        const char *rest = app + len;
        if (rest[0] == '@') {
            const pglock_key *k = cli_registry_lookup(reg, rest + 1);
            if (!k)
                return NULL;
            *out = *k;
            return rest + 1;
        }
        if (pglock_key_parse(out, rest, NULL) != PGLOCK_OK ||
            out->kind != PGLOCK_KEY_TEXT)
            return NULL;
        return out->name;
    }
    return NULL;
}

const char *status_name_from_application(const char *app, const pglock_key *key,
                                         const cli_registry *reg)
{
    pglock_key named;
    const char *name = app_key(app, reg, &named);
    return name && cli_same_lock(&named, key) ? name : NULL;
}

/* Which part of the semaphore of name_key (run --slots) key is, in part
 * ("slot 2", "gate", "--slots=3": a user's declaration of N); 0 when
 * none.  The keys of the last name looked at are kept: a semaphore's
 * locks come one after another's application_name. */
static int semaphore_part(const pglock_key *name_key, const pglock_key *key,
                          char *part, size_t len)
{
    static run_slots s;
    static pglock_key last;
    static int have;
    if (!have || !cli_same_lock(&last, name_key)) {
        have = run_slots_make(&s, name_key, RUN_MAX_SLOTS) == 0;
        last = *name_key;
        if (!have)
            return 0;
    }
    if (cli_same_lock(key, &s.gate)) {
        snprintf(part, len, "gate");
        return 1;
    }
    for (int i = 0; i < RUN_MAX_SLOTS; i++) {
        if (cli_same_lock(key, &s.keys[i])) {
            snprintf(part, len, "slot %d", i);
            return 1;
        }
        if (cli_same_lock(key, &s.decls[i])) {
            snprintf(part, len, "--slots=%d", i + 1);
            return 1;
        }
    }
    return 0;
}

static void name_lock(lock_view *v, const cli_registry *reg)
{
    const char *n = cli_registry_name_of(reg, &v->e[0]->key);
    if (n) {
        v->name = n;
        v->name_source = "registry";
        return;
    }
    for (int i = 0; i < v->n; i++) {
        n = status_name_from_application(v->e[i]->application_name,
                                         &v->e[i]->key, reg);
        if (n) {
            v->name = n;
            v->name_source = "application_name";
            return;
        }
    }
    /* a semaphore's slot, gate or declaration, named after the name its
     * users give in their application_name */
    for (int i = 0; i < v->n; i++) {
        pglock_key named;
        n = app_key(v->e[i]->application_name, reg, &named);
        if (n && semaphore_part(&named, &v->e[i]->key, v->part,
                                sizeof v->part)) {
            v->name = n;
            v->name_source = "application_name";
            return;
        }
    }
    /* A recorded run's run lock (history.h) is held by its history
     * connection, "pglock record KEY": named after the run's key. */
    static const char record[] = "pglock record ";
    const pglock_key *k = &v->e[0]->key;
    if (k->kind != PGLOCK_KEY_PAIR || k->ns != HISTORY_RUN_LOCK_NS)
        return;
    for (int i = 0; i < v->n; i++) {
        const char *app = v->e[i]->application_name;
        if (app && !strncmp(app, record, sizeof record - 1) &&
            app[sizeof record - 1]) {
            v->name = app + sizeof record - 1;
            v->name_source = "history";
            return;
        }
    }
}

/* 1 if two entries of the list are requests for the same lock. */
static int same_entry_lock(const pglock_holder *a, const pglock_holder *b)
{
    return cli_same_lock(&a->key, &b->key) &&
           database_name_cmp(a->database, b->database) == 0;
}

/* Groups the list's entries (already in key order) into locks; returns
 * how many (views has room for one per entry). */
int status_group_locks(const pglock_holder *const *e, int n,
                       const cli_registry *reg, lock_view *views)
{
    int nv = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && same_entry_lock(e[j], e[i]))
            j++;
        lock_view *v = &views[nv++];
        memset(v, 0, sizeof *v);
        v->e = &e[i];
        v->n = j - i;
        for (int k = 0; k < v->n; k++) {
            if (v->e[k]->granted) {
                v->holders++;
                v->exclusive |= v->e[k]->mode == PGLOCK_EXCLUSIVE;
            } else {
                v->waiters++;
            }
        }
        name_lock(v, reg);
        i = j;
    }
    return nv;
}

/* ------------------------------------------------------- the tree */

int status_parent_of(const lock_view *v, int idx)
{
    const pglock_holder *e = v->e[idx];
    if (e->granted)
        return -1;
    /* Only entries before e can be parents, so the tree has no cycles.
     * Holders come first in v; a queue's waiters are few. */
    int holder = -1;
    for (int k = idx - 1; k >= 0; k--) {
        if (v->e[k]->pid == 0)
            continue;
        for (int b = 0; b < e->n_blocked_by; b++) {
            if (v->e[k]->pid != e->blocked_by[b])
                continue;
            if (!v->e[k]->granted)
                return k;
            holder = k;
        }
    }
    return holder;
}

