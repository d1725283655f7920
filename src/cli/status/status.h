/*
 * status.h — what `pglock status`'s files share: the locks of one look
 * (from pglock_holders_list()), grouped by key and named, and the two
 * renderers.  cmd_status.c looks; status_model.c groups and names;
 * status_text.c prints the table; status_json.c the JSON document.  A new kind of entry (a
 * semaphore's slots, say) is a new lock_view field that both renderers
 * read, next to the ones below.
 */
#ifndef PGLOCK_CLI_STATUS_H
#define PGLOCK_CLI_STATUS_H

#include <stdio.h>
#include <libpq-fe.h>
#include "cli.h"
#include "run.h"

/* One key's requests: a run of the list's entries with the same key. */
typedef struct lock_view {
    const pglock_holder *const *e;
    const char *const *host; /* per request: the host its application_name
                                names (borrowed from it), or NULL */
    const char *name;        /* NULL when unknown; name_len bytes, not
                                NUL-terminated when from an application_name */
    const char *name_source; /* "registry", "application_name", "history" */
    int name_len;
    int n; /* (the ints last: 40 bytes, not 48) */
    int holders, waiters, exclusive;
    char part[16]; /* of name's semaphore: "slot 2", "gate",
                                "--slots=3" (a declaration); "" */
} lock_view;

/* What the renderers need to know besides the locks. */
typedef struct status_scene {
    const lock_view *views;
    int nv;
    int all_databases;
    int filtered; /* KEYs were given */
    PGconn *conn;
    const cli_registry *reg;
} status_scene;

/* Groups the list's entries (already in key order) into locks, each
 * named (status_model.c), and reads each entry's host into hosts (room
 * for n); returns how many (views has room for one per entry). */
int status_group_locks(const pglock_holder *const *e, const char **hosts, int n,
                       const cli_registry *reg, lock_view *views);

/* Index in v of the request whose child v->e[idx] is in the tree: a
 * waiter ahead of it that blocks it (the nearest), else the first holder
 * that blocks it; -1 for none (a root). */
int status_parent_of(const lock_view *v, int idx);

/* v's name, NUL-terminated (in buf when it must be copied: len 64 holds
 * any from an application_name); NULL when it has none. */
const char *status_name(const lock_view *v, char *buf, size_t len);

/* "123" or "42:9", as a user writes the key. */
void status_key_text(const pglock_key *key, char *buf, size_t len);

/* The table (status_text.c).  0, or -1 when out of memory. */
int status_render_text(FILE *out, const status_scene *s);
/* The JSON document, on one line (status_json.c). */
void status_render_json(FILE *out, const status_scene *s);
/* `status --slots=N KEY` (status_slots.c): the semaphore as one entry,
 * text or JSON (nothing with --quiet).  The exit status: 0 when every
 * slot is held, 1 when one is free, 64 (another N in use) or 69
 * (printed). */
int status_slots(PGconn *conn, const pglock_key *key, const char *name, int n,
                 int json);
/* What one look at a semaphore reads: its RUN_MAX_SLOTS possible slots,
 * the gate and the RUN_MAX_SLOTS declarations of N. */
#define STATUS_SLOTS_NKEYS (2 * RUN_MAX_SLOTS + 1)
/* The gate's requests listed by name, the rest counted. */
#define STATUS_SLOTS_MAX_WAITERS 32
/* Fills s (all RUN_MAX_SLOTS slots) and keys (STATUS_SLOTS_NKEYS) for
 * key.  STATUS_SLOTS_NKEYS, or -1 (a key with no format). */
int status_slots_keys(run_slots *s, const pglock_key *key, pglock_key *keys);
/* The N in use by the list's declarations (a list of status_slots_keys()'
 * keys, or more), or 0: not a semaphore in use. */
int status_slots_declared(const pglock_holders *list, const run_slots *s);
/* Renders the semaphore of n slots of s from list to out.  1 when every
 * slot is held, else 0. */
int status_slots_render(FILE *out, const pglock_holders *list,
                        const run_slots *s, int n, const char *name, int json);
/* --slots=N's reader (CLI_OPT_CALL, an int field), as run's. */
cli_step status_slots_option(const char *command, const cli_opt *o,
                             cli_common *target, const char *value);

/* "pglock: warning: ..." for each registry collision. */
void status_warn_collisions(const cli_registry *reg);

#endif
