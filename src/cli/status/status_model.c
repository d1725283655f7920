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

const char *status_name(const lock_view *v, char *buf, size_t len)
{
    if (!v->name || v->name[v->name_len] == '\0')
        return v->name;
    snprintf(buf, len, "%.*s", v->name_len, v->name);
    return buf;
}

/* said's KEYS as a name, into v (a registry's "@NAME": NAME). */
static void name_from(lock_view *v, const cli_app_said *said,
                      const char *source)
{
    int at = said->keys[0] == '@' && strcmp(source, "history") != 0;
    v->name = said->keys + at;
    v->name_len = (int)said->keys_len - at;
    v->name_source = source;
}

/* The keys of the last semaphore name looked at, kept by one grouping:
 * a semaphore's locks come one after another's application_name, and
 * making its keys is a gate's, RUN_MAX_SLOTS slots' and as many
 * declarations' work. */
typedef struct semaphore_memo {
    run_slots s; /* 9 kB */
    pglock_key last;
    int have; /* s and last are set, and s was made */
} semaphore_memo;

/* Which part of the semaphore of name_key (run --slots) key is, in part
 * ("slot 2", "gate", "--slots=3": a user's declaration of N); 0 when
 * none. */
static int semaphore_part(semaphore_memo *m, const pglock_key *name_key,
                          const pglock_key *key, char *part, size_t len)
{
    run_slots *s = &m->s;
    if (!m->have || !cli_same_lock(&m->last, name_key)) {
        m->have = run_slots_make(s, name_key, RUN_MAX_SLOTS) == 0;
        m->last = *name_key;
        if (!m->have)
            return 0;
    }
    if (cli_same_lock(key, &s->gate)) {
        snprintf(part, len, "gate");
        return 1;
    }
    for (int i = 0; i < RUN_MAX_SLOTS; i++) {
        if (cli_same_lock(key, &s->keys[i])) {
            snprintf(part, len, "slot %d", i);
            return 1;
        }
        if (cli_same_lock(key, &s->decls[i])) {
            snprintf(part, len, "--slots=%d", i + 1);
            return 1;
        }
    }
    return 0;
}

/* Names v: from the registry, else from named (the first of its
 * requests' application_names whose NAME hashes back, or NULL), else a
 * semaphore's part or a recorded run's run lock. */
static void name_lock(lock_view *v, const cli_registry *reg,
                      const cli_app_said *named, semaphore_memo *memo)
{
    const char *n = cli_registry_name_of(reg, &v->e[0]->key);
    cli_app_said said;
    if (n) {
        v->name = n;
        v->name_len = (int)strlen(n);
        v->name_source = "registry";
        return;
    }
    if (named) {
        name_from(v, named, "application_name");
        return;
    }
    /* a semaphore's slot, gate or declaration, named after the name its
     * users give in their application_name */
    for (int i = 0; i < v->n; i++) {
        char text[256];
        pglock_key sem_key; /* its id is made now: text may go */
        if (!cli_app_read_holder(v->e[i]->application_name, NULL, reg, &said) ||
            said.keys_len >= sizeof text)
            continue;
        memcpy(text, said.keys, said.keys_len);
        text[said.keys_len] = '\0';
        const pglock_key *k = &sem_key;
        if (text[0] == '@')
            k = cli_registry_lookup(reg, text + 1);
        else if (pglock_key_parse(&sem_key, text, NULL) != PGLOCK_OK ||
                 sem_key.kind != PGLOCK_KEY_TEXT)
            k = NULL;
        if (k &&
            semaphore_part(memo, k, &v->e[i]->key, v->part, sizeof v->part)) {
            name_from(v, &said, "application_name");
            return;
        }
    }
    /* A recorded run's run lock (history.h) is held by its history
     * connection, "pglock record KEY on HOST": named after the run's key. */
    const pglock_key *k = &v->e[0]->key;
    if (k->kind != PGLOCK_KEY_PAIR || k->ns != HISTORY_RUN_LOCK_NS)
        return;
    for (int i = 0; i < v->n; i++) {
        if (cli_app_read(v->e[i]->application_name, NULL, NULL, &said) &&
            !strcmp(said.command, "record")) {
            name_from(v, &said, "history");
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
int status_group_locks(const pglock_holder *const *e, const char **hosts, int n,
                       const cli_registry *reg, lock_view *views)
{
    semaphore_memo memo;
    memo.have = 0;
    int nv = 0;
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && same_entry_lock(e[j], e[i]))
            j++;
        lock_view *v = &views[nv++];
        memset(v, 0, sizeof *v);
        v->e = &e[i];
        v->host = &hosts[i];
        v->n = j - i;
        /* One read of each application_name (a read may hash a name or
         * two): its host, and the lock's name from the first that names
         * it. */
        cli_app_said said, named;
        int have_name = 0;
        for (int k = 0; k < v->n; k++) {
            int ours = cli_app_read_holder(v->e[k]->application_name,
                                           &v->e[k]->key, reg, &said);
            hosts[i + k] = said.host;
            if (ours && !have_name) {
                named = said;
                have_name = 1;
            }
            if (v->e[k]->granted) {
                v->holders++;
                v->exclusive |= v->e[k]->mode == PGLOCK_EXCLUSIVE;
            } else {
                v->waiters++;
            }
        }
        name_lock(v, reg, have_name ? &named : NULL, &memo);
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
