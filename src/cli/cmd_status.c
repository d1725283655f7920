/*
 * pglock status — who holds and who waits, by name.
 *
 * One query per refresh (inspect.c) gives every advisory lock request in
 * the database; this file names the keys (registry, or a pglock
 * application_name that hashes back to the key), groups the requests by
 * key, arranges waiters under whoever blocks them, and prints a table with
 * a tree, a JSON document, or a live --watch view.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include "cli.h"
#include "inspect.h"
#include "json.h"

#define DEFAULT_WATCH_MS 2000L

typedef struct status_options {
    cli_conn conn;
    const char *keys_path;
    int json;
    int watch;
    long watch_ms;
    int all_databases;
    pglock_key *filter; /* the KEYs given; NULL: every key */
    int n_filter;
} status_options;

/* One key's requests: a run of snapshot entries with the same key. */
typedef struct lock_view {
    inspect_entry *e;
    int n;
    const char *name;        /* NULL when unknown */
    const char *name_source; /* "registry" or "application_name" */
    int holders, waiters, exclusive;
} lock_view;

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

enum { OPT_KEYS = 256, OPT_JSON, OPT_WATCH, OPT_ALL_DATABASES };

static const cli_opt status_opts[] = {
    {0, 0, NULL, 0, NULL, "Options:"},
    {OPT_ALL_DATABASES, 0, "all-databases", CLI_OPT_NO_VALUE, NULL,
     "every database, not only the current one"},
    {OPT_KEYS, 0, "keys", CLI_OPT_VALUE, "FILE",
     "registry of key names (default: $PGLOCK_KEYS)"},
    {OPT_JSON, 0, "json", CLI_OPT_NO_VALUE, NULL,
     "one JSON document (schema in pglock(1))"},
    {OPT_WATCH, 0, "watch", CLI_OPT_OPTIONAL, "INTERVAL",
     "redraw every INTERVAL (default 2s) until ^C"},
    CLI_OPT_END};

static const cli_opt *const status_tables[] = {
    status_opts, cli_conn_opts, cli_help_opts, NULL};

static void print_help(void)
{
    printf("pglock status shows who holds and who waits for advisory locks.\n\n"
           "Usage:\n"
           "  pglock status [OPTION]... [KEY]...\n\n"
           "With no KEY, every advisory lock held or awaited in the database.\n\n");
    cli_opt_help(stdout, status_tables);
    printf("\nExit status: 0 when it could look, 64 for bad options or keys,\n"
           "69 when it could not connect.\n");
}

/* ------------------------------------------------------------ naming */

/* The name in a pglock application_name ("pglock run NAME"), believed
 * only if it hashes back to key: application_name is cut at 63 bytes and
 * non-ASCII bytes arrive as '?', which changes the hash. */
static const char *name_from_application(const char *app, const pglock_key *key,
                                         const cli_registry *reg)
{
    static const char *const prefixes[] = {"pglock run ", "pglock lead "};
    if (!app)
        return NULL;
    for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
        size_t len = strlen(prefixes[i]);
        if (strncmp(app, prefixes[i], len) != 0)
            continue;
        const char *rest = app + len;
        pglock_key parsed;
        if (rest[0] == '@') {
            const pglock_key *k = cli_registry_lookup(reg, rest + 1);
            if (k && inspect_same_lock(k, key))
                return rest + 1;
            return NULL;
        }
        if (pglock_key_parse(&parsed, rest, NULL, 0) != PGLOCK_OK ||
            parsed.kind != PGLOCK_KEY_TEXT || !inspect_same_lock(&parsed, key))
            return NULL;
        return parsed.name;
    }
    return NULL;
}

static void name_lock(lock_view *v, const cli_registry *reg)
{
    const char *n = cli_registry_name_of(reg, &v->e[0].key);
    if (n) {
        v->name = n;
        v->name_source = "registry";
        return;
    }
    for (int i = 0; i < v->n; i++) {
        n = name_from_application(v->e[i].application_name, &v->e[i].key, reg);
        if (n) {
            v->name = n;
            v->name_source = "application_name";
            return;
        }
    }
}

static int wanted(const status_options *o, const pglock_key *key)
{
    if (!o->n_filter)
        return 1;
    for (int i = 0; i < o->n_filter; i++)
        if (inspect_same_lock(&o->filter[i], key))
            return 1;
    return 0;
}

/* Groups the snapshot into locks; returns how many (views has room for
 * snap->n). */
static int group_locks(inspect_snapshot *snap, const status_options *o,
                       const cli_registry *reg, lock_view *views)
{
    int nv = 0;
    for (int i = 0; i < snap->n;) {
        int j = i + 1;
        while (j < snap->n && inspect_same_lock(&snap->entries[j].key,
                                                &snap->entries[i].key) &&
               !strcmp(snap->entries[j].database ? snap->entries[j].database : "",
                       snap->entries[i].database ? snap->entries[i].database : ""))
            j++;
        if (wanted(o, &snap->entries[i].key)) {
            lock_view *v = &views[nv++];
            memset(v, 0, sizeof *v);
            v->e = &snap->entries[i];
            v->n = j - i;
            for (int k = 0; k < v->n; k++) {
                if (v->e[k].granted) {
                    v->holders++;
                    v->exclusive |= v->e[k].exclusive;
                } else {
                    v->waiters++;
                }
            }
            name_lock(v, reg);
        }
        i = j;
    }
    return nv;
}

/* ------------------------------------------------------- the tree */

/* Index in v of the request whose child e is: a waiter ahead of it in the
 * queue that blocks it (the nearest), else a holder that blocks it; -1
 * for none (a root).  Only entries before e can be waiter parents, so the
 * tree has no cycles. */
static int parent_of(const lock_view *v, int idx)
{
    const inspect_entry *e = &v->e[idx];
    if (e->granted)
        return -1;
    int holder = -1;
    for (int k = idx - 1; k >= 0; k--) {
        for (int b = 0; b < e->n_blocked_by; b++) {
            if (v->e[k].pid != e->blocked_by[b] || v->e[k].pid == 0)
                continue;
            if (!v->e[k].granted)
                return k;
            if (holder < 0 || k < holder)
                holder = k;
        }
    }
    return holder;
}

/* ------------------------------------------------------ text output */

static void format_duration(double s, char *buf, size_t len)
{
    long t = (long)(s + 0.5);
    if (t < 60)
        snprintf(buf, len, "%lds", t);
    else if (t < 3600)
        snprintf(buf, len, "%ldm%02lds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, len, "%ldh%02ldm", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, len, "%ldd%02ldh", t / 86400, t % 86400 / 3600);
}

/* Copies s (UTF-8) for a terminal: control characters become '?', the
 * C0 ones and DEL, and the C1 ones too (U+0080..U+009F, bytes C2 80..C2
 * 9F: a terminal reads U+009B as CSI, as it reads ESC [). */
static void clean(const char *s, char *buf, size_t len)
{
    size_t i = 0, o = 0;
    for (; s && s[i] && o + 1 < len; i++) {
        unsigned char c = (unsigned char)s[i];
        unsigned char next = (unsigned char)s[i + 1];
        if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {
            buf[o++] = '?';
            i++;
        } else {
            buf[o++] = (c < 0x20 || c == 0x7F) ? '?' : (char)c;
        }
    }
    buf[o] = '\0';
}

/* Display width: code points (UTF-8 lead bytes). */
static int width(const char *s)
{
    int w = 0;
    for (; *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            w++;
    return w;
}

enum { COL_SESSION, COL_USER, COL_CLIENT, COL_FOR, COL_SINCE, COL_APP, NCOLS };
#define CELL 160
/* The longest session cell after its tree prefix: "└─ waits " (13 bytes),
 * a pid (at most 11), " (exclusive)" (12). */
#define SESSION_REST 36

/* snprintf into a table cell; long values are cut. */
static void cellf(char *cell, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void cellf(char *cell, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cell, CELL, fmt, ap);
    va_end(ap);
}

typedef struct text_row {
    int is_header;         /* a lock's title line, printed as is */
    char cell[NCOLS][CELL];
} text_row;

typedef struct text_table {
    text_row *rows;
    int n, cap;
    int *hidden;           /* pids whose details were hidden */
    int n_hidden, cap_hidden;
} text_table;

static void note_hidden(text_table *t, int pid)
{
    for (int i = 0; i < t->n_hidden; i++)
        if (t->hidden[i] == pid)
            return;
    if (t->n_hidden == t->cap_hidden) {
        int cap = t->cap_hidden ? t->cap_hidden * 2 : 16;
        int *h = realloc(t->hidden, (size_t)cap * sizeof *h);
        if (!h)
            return;
        t->hidden = h;
        t->cap_hidden = cap;
    }
    t->hidden[t->n_hidden++] = pid;
}

static text_row *table_add(text_table *t)
{
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        text_row *r = realloc(t->rows, (size_t)cap * sizeof *r);
        if (!r)
            return NULL;
        t->rows = r;
        t->cap = cap;
    }
    text_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    return r;
}

static void fill_session_cells(text_row *r, const inspect_entry *e,
                               text_table *t)
{
    char a[64], b[64];
    clean(e->user ? e->user : "?", r->cell[COL_USER], CELL);
    if (e->application_name)
        clean(e->application_name, r->cell[COL_APP], CELL);
    if (e->pid == 0) {
        cellf(r->cell[COL_CLIENT], "-");
        cellf(r->cell[COL_FOR], "?");
        cellf(r->cell[COL_SINCE], "prepared transaction");
        return;
    }
    if (e->hidden || !e->has_session) {
        if (e->hidden)
            note_hidden(t, e->pid);
        cellf(r->cell[COL_CLIENT], "hidden");
        /* pg_locks.waitstart is not hidden, the session's columns are */
        if (!e->granted && e->waiting_source &&
            !strcmp(e->waiting_source, "waitstart")) {
            char a[64];
            format_duration(e->waiting_s, a, sizeof a);
            cellf(r->cell[COL_FOR], "%s", a);
            cellf(r->cell[COL_SINCE], "waitstart");
        } else {
            cellf(r->cell[COL_FOR], "?");
            cellf(r->cell[COL_SINCE], "%s",
                  e->hidden ? "hidden: no privilege" : "no session");
        }
        return;
    }
    if (e->client_port == -1 || !e->client_addr)
        cellf(r->cell[COL_CLIENT], "local");
    else if (strchr(e->client_addr, ':'))
        cellf(r->cell[COL_CLIENT], "[%s]:%d", e->client_addr, e->client_port);
    else
        cellf(r->cell[COL_CLIENT], "%s:%d", e->client_addr, e->client_port);
    if (e->granted) {
        if (e->held_max_s < 0) {
            cellf(r->cell[COL_FOR], "?");
        } else if (e->held_min_s >= 0) {
            format_duration(e->held_min_s, a, sizeof a);
            format_duration(e->held_max_s, b, sizeof b);
            cellf(r->cell[COL_FOR], "%s-%s", a, b);
            cellf(r->cell[COL_SINCE], "state_change-backend_start");
        } else {
            format_duration(e->held_max_s, b, sizeof b);
            cellf(r->cell[COL_FOR], "<=%s", b);
            cellf(r->cell[COL_SINCE], "backend_start");
        }
    } else if (e->waiting_s >= 0 && e->waiting_source) {
        format_duration(e->waiting_s, a, sizeof a);
        int exact = !strcmp(e->waiting_source, "waitstart");
        cellf(r->cell[COL_FOR], "%s%s", exact ? "" : "<=", a);
        cellf(r->cell[COL_SINCE], "%s", e->waiting_source);
    } else {
        cellf(r->cell[COL_FOR], "?");
    }
}

/* Adds v->e[idx] and, under it, the requests it blocks. */
static int add_subtree(text_table *t, const lock_view *v, const int *parent,
                       int idx, const char *prefix, int last, int depth)
{
    text_row *r = table_add(t);
    if (!r)
        return -1;
    const inspect_entry *e = &v->e[idx];
    char pid[24];
    if (e->pid)
        snprintf(pid, sizeof pid, "%d", e->pid);
    else
        snprintf(pid, sizeof pid, "-");
    const char *what = e->granted ? "holds" : "waits";
    /* A waiter says what it asks for; holders share the lock's mode. */
    const char *mode = e->granted ? "" : e->exclusive ? " (exclusive)" : " (shared)";
    cellf(r->cell[COL_SESSION], "%s%s%s %s%s", prefix,
             depth == 0 ? "" : (last ? "└─ " : "├─ "), what, pid, mode);
    fill_session_cells(r, e, t);

    /* The rows below start with child_prefix.  A chain too deep for them
     * to fit a cell is cut here, as a chain deeper than 32 is, rather than
     * printed cut short (maybe inside a character). */
    char child_prefix[CELL];
    int len = snprintf(child_prefix, sizeof child_prefix, "%s%s", prefix,
                       depth == 0 ? "" : (last ? "   " : "│  "));
    int deeper = depth < 32 && len >= 0 && len + SESSION_REST < CELL;
    int nchildren = 0, seen = 0;
    for (int k = 0; k < v->n; k++)
        nchildren += parent[k] == idx;
    for (int k = 0; k < v->n; k++) {
        if (parent[k] != idx)
            continue;
        seen++;
        if (!deeper) /* a pathological chain: keep it readable */
            continue;
        if (add_subtree(t, v, parent, k, child_prefix, seen == nchildren,
                        depth + 1))
            return -1;
    }
    return 0;
}

static int add_lock(text_table *t, const lock_view *v, int all_databases)
{
    char key[64], name[CELL], db[CELL], mode[64];
    inspect_key_text(&v->e[0].key, key, sizeof key);
    clean(v->e[0].database ? v->e[0].database : "?", db, sizeof db);
    if (v->holders == 0)
        snprintf(mode, sizeof mode, "not held");
    else if (v->exclusive)
        snprintf(mode, sizeof mode, "exclusive");
    else
        snprintf(mode, sizeof mode, "shared by %d", v->holders);
    char waiting[32] = "";
    if (v->waiters)
        snprintf(waiting, sizeof waiting, ", %d waiting", v->waiters);
    text_row *r = table_add(t);
    if (!r)
        return -1;
    r->is_header = 1;
    /* The title spans two cells: the name (cut at CELL bytes), the rest. */
    if (v->name) {
        clean(v->name, name, sizeof name);
        cellf(r->cell[0], "%s (%s) = ", name, v->name_source);
    }
    cellf(r->cell[1], "key %s%s%s: %s%s", key, all_databases ? ", database " : "",
          all_databases ? db : "", mode, waiting);
    int *parent = malloc((size_t)v->n * sizeof *parent);
    if (!parent)
        return -1;
    for (int k = 0; k < v->n; k++)
        parent[k] = parent_of(v, k);
    int rc = 0;
    for (int k = 0; k < v->n && rc == 0; k++)
        if (parent[k] < 0)
            rc = add_subtree(t, v, parent, k, "  ", 1, 0);
    free(parent);
    return rc;
}

static void print_table(FILE *out, const text_table *t)
{
    static const char *const heads[NCOLS] = {"SESSION", "USER", "CLIENT", "FOR",
                                             "SINCE (server column)", "APPLICATION"};
    int w[NCOLS];
    for (int c = 0; c < NCOLS; c++)
        w[c] = width(heads[c]) + (c == 0 ? 2 : 0);
    for (int i = 0; i < t->n; i++)
        for (int c = 0; c < NCOLS && !t->rows[i].is_header; c++)
            if (width(t->rows[i].cell[c]) > w[c])
                w[c] = width(t->rows[i].cell[c]);
    fprintf(out, "  %-*s", w[0] - 2, heads[0]);
    for (int c = 1; c < NCOLS; c++)
        fprintf(out, "  %-*s", c == NCOLS - 1 ? 0 : w[c], heads[c]);
    fputc('\n', out);
    for (int i = 0; i < t->n; i++) {
        const text_row *r = &t->rows[i];
        if (r->is_header) {
            fprintf(out, "%s%s\n", r->cell[0], r->cell[1]);
            continue;
        }
        for (int c = 0; c < NCOLS; c++) {
            const char *s = r->cell[c][0] ? r->cell[c] : "-";
            if (c == NCOLS - 1)
                fprintf(out, "  %s", s);
            else
                fprintf(out, "%s%s%*s", c ? "  " : "", s, w[c] - width(s), "");
        }
        fputc('\n', out);
    }
}

static void print_collision(const char *a, const char *b, const pglock_key *key,
                            void *arg)
{
    char k[64], ca[CELL], cb[CELL];
    inspect_key_text(key, k, sizeof k);
    clean(a, ca, sizeof ca);
    clean(b, cb, sizeof cb);
    (void)arg;
    cli_warning("registry names \"%s\" and \"%s\" are the same key %s", ca, cb, k);
}

static int render_text(FILE *out, const lock_view *views, int nv,
                       const status_options *o, PGconn *conn)
{
    char db[CELL];
    clean(PQdb(conn), db, sizeof db);
    if (nv == 0) {
        if (o->n_filter)
            fprintf(out, "none of the given keys is held or awaited in %s%s\n",
                    o->all_databases ? "any database" : "database ",
                    o->all_databases ? "" : db);
        else
            fprintf(out, "no advisory locks held or awaited in %s%s\n",
                    o->all_databases ? "any database" : "database ",
                    o->all_databases ? "" : db);
        return 0;
    }
    text_table t = {0};
    int rc = 0;
    for (int i = 0; i < nv && rc == 0; i++)
        rc = add_lock(&t, &views[i], o->all_databases);
    if (rc == 0) {
        int waiting = 0;
        for (int i = 0; i < nv; i++)
            waiting += views[i].waiters;
        if (o->all_databases)
            fprintf(out, "%d lock%s (%d waiting) in all databases\n", nv,
                    nv == 1 ? "" : "s", waiting);
        else
            fprintf(out, "%d lock%s (%d waiting) in database %s\n", nv,
                    nv == 1 ? "" : "s", waiting, db);
        print_table(out, &t);
        if (t.n_hidden) {
            char user[CELL];
            clean(PQuser(conn), user, sizeof user);
            fprintf(out, "note: %d session%s of other roles hide client, state "
                    "and times from role \"%s\" (grant it pg_read_all_stats)\n",
                    t.n_hidden, t.n_hidden == 1 ? "" : "s", user);
        }
    }
    free(t.rows);
    free(t.hidden);
    return rc;
}

/* ------------------------------------------------------ JSON output */

static void json_session(json_writer *w, const inspect_entry *e)
{
    json_int(w, "pid", e->pid);
    json_string(w, "mode", e->exclusive ? "exclusive" : "shared");
    json_bool(w, "visible", e->has_session && !e->hidden);
    json_string(w, "user", e->user);
    json_string(w, "application_name", e->application_name);
    if (e->has_session && !e->hidden && (e->client_port == -1 || !e->client_addr))
        json_string(w, "client_addr", "local");
    else
        json_string(w, "client_addr", e->client_addr);
    if (e->client_port > 0)
        json_int(w, "client_port", e->client_port);
    else
        json_null(w, "client_port");
    json_string(w, "state", e->state);
}

static void json_lock(json_writer *w, const lock_view *v)
{
    char key[64];
    inspect_key_text(&v->e[0].key, key, sizeof key);
    uint32_t classid = 0, objid = 0;
    int objsubid = 0;
    pglock_key_locktag(&v->e[0].key, &classid, &objid, &objsubid);
    json_object_begin(w, NULL);
    json_string(w, "key", key);
    json_string(w, "kind", v->e[0].key.kind == PGLOCK_KEY_PAIR ? "pair" : "int64");
    json_int(w, "classid", classid);
    json_int(w, "objid", objid);
    json_int(w, "objsubid", objsubid);
    json_string(w, "name", v->name);
    json_string(w, "name_source", v->name_source);
    json_string(w, "database", v->e[0].database);
    json_string(w, "mode", v->holders == 0 ? NULL : v->exclusive ? "exclusive" : "shared");
    json_int(w, "holder_count", v->holders);
    json_int(w, "waiter_count", v->waiters);
    json_array_begin(w, "holders");
    for (int k = 0; k < v->n; k++) {
        const inspect_entry *e = &v->e[k];
        if (!e->granted)
            continue;
        json_object_begin(w, NULL);
        json_session(w, e);
        json_seconds(w, "held_min_s", e->held_min_s);
        json_string(w, "held_min_source", e->held_min_s >= 0 ? "state_change" : NULL);
        json_seconds(w, "held_max_s", e->held_max_s);
        json_string(w, "held_max_source", e->held_max_s >= 0 ? "backend_start" : NULL);
        json_object_end(w);
    }
    json_array_end(w);
    json_array_begin(w, "waiters");
    for (int k = 0; k < v->n; k++) {
        const inspect_entry *e = &v->e[k];
        if (e->granted)
            continue;
        json_object_begin(w, NULL);
        json_session(w, e);
        json_seconds(w, "waiting_s", e->waiting_s);
        json_string(w, "waiting_source", e->waiting_source);
        json_array_begin(w, "blocked_by");
        for (int b = 0; b < e->n_blocked_by; b++)
            json_int(w, NULL, e->blocked_by[b]);
        json_array_end(w);
        int p = parent_of(v, k);
        if (p >= 0)
            json_int(w, "parent_pid", v->e[p].pid);
        else
            json_null(w, "parent_pid");
        json_object_end(w);
    }
    json_array_end(w);
    json_object_end(w);
}

static void json_collision(const char *a, const char *b, const pglock_key *key,
                           void *arg)
{
    json_writer *w = arg;
    char k[64];
    inspect_key_text(key, k, sizeof k);
    json_object_begin(w, NULL);
    json_string(w, "key", k);
    json_array_begin(w, "names");
    json_string(w, NULL, a);
    json_string(w, NULL, b);
    json_array_end(w);
    json_object_end(w);
}

static void render_json(FILE *out, const lock_view *views, int nv,
                        const status_options *o, PGconn *conn,
                        const cli_registry *reg)
{
    json_writer w;
    json_init(&w, out);
    char stamp[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%SZ", &tm);
    json_object_begin(&w, NULL);
    json_int(&w, "format", 1);
    json_string(&w, "generated_at", stamp);
    json_int(&w, "server_version", PQserverVersion(conn));
    json_string(&w, "database", PQdb(conn));
    json_string(&w, "user", PQuser(conn));
    json_bool(&w, "all_databases", o->all_databases);
    json_array_begin(&w, "locks");
    for (int i = 0; i < nv; i++)
        json_lock(&w, &views[i]);
    json_array_end(&w);
    json_array_begin(&w, "registry_collisions");
    cli_registry_collisions(reg, json_collision, &w);
    json_array_end(&w);
    json_object_end(&w);
    json_end(&w);
}

/* ------------------------------------------------------ one refresh */

/* Looks once and renders to out.  0, or -1 with one line in err. */
static int refresh(FILE *out, PGconn *conn, const status_options *o,
                   const cli_registry *reg, char *err, size_t errlen)
{
    inspect_snapshot snap;
    if (inspect_advisory_locks(conn, o->all_databases, &snap, err, errlen))
        return -1;
    lock_view *views = calloc((size_t)snap.n + 1, sizeof *views);
    if (!views) {
        inspect_snapshot_clear(&snap);
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    int nv = group_locks(&snap, o, reg, views);
    int rc = 0;
    if (o->json)
        render_json(out, views, nv, o, conn, reg);
    else if (render_text(out, views, nv, o, conn))
        rc = -1, snprintf(err, errlen, "out of memory");
    free(views);
    inspect_snapshot_clear(&snap);
    return rc;
}

/* Sleeps ms, returning early on SIGINT/SIGTERM. */
static void nap(long ms)
{
    int64_t end = pglock_now_ms() + ms;
    while (!interrupted) {
        int64_t left = end - pglock_now_ms();
        if (left <= 0)
            break;
        poll(NULL, 0, left > 1000 ? 1000 : (int)left);
    }
}

/* Draws a frame over the previous one: home the cursor, write each line
 * and clear the rest of it, then clear below.  One write, no blank
 * screen in between, so nothing flickers.  Like watch(1), the frame is
 * cut to the terminal's size: a line that wrapped or a screen that
 * scrolled would leave the next frame misplaced. */
static void draw_frame(const char *frame, size_t len, int tty)
{
    if (!tty) {
        fwrite(frame, 1, len, stdout);
        fputc('\n', stdout);
        fflush(stdout);
        return;
    }
    struct winsize ws;
    int rows = 24, cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        rows = ws.ws_row;
        cols = ws.ws_col;
    }
    char *buf = malloc(len + (size_t)rows * 4 + 16);
    if (!buf)
        return;
    size_t n = 0;
    memcpy(buf + n, "\033[H", 3);
    n += 3;
    int row = 0, col = 0;
    for (size_t i = 0; i < len && row < rows - 1; i++) {
        if (frame[i] == '\n') {
            memcpy(buf + n, "\033[K\n", 4);
            n += 4;
            row++;
            col = 0;
            continue;
        }
        if (((unsigned char)frame[i] & 0xC0) != 0x80)
            col++; /* a new code point */
        if (col <= cols)
            buf[n++] = frame[i];
    }
    memcpy(buf + n, "\033[J", 3);
    n += 3;
    fwrite(buf, 1, n, stdout);
    fflush(stdout);
    free(buf);
}

static int watch(PGconn *conn, const status_options *o, const cli_registry *reg)
{
    int tty = isatty(STDOUT_FILENO) && !o->json;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt; /* no SA_RESTART: wake the nap */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (tty)
        fputs("\033[?25l\033[H\033[2J", stdout); /* hide cursor, clear once */
    while (!interrupted) {
        char *frame = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&frame, &len);
        if (!mem)
            break;
        if (!o->json) {
            char stamp[32];
            time_t now = time(NULL);
            struct tm tm;
            localtime_r(&now, &tm);
            strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
            fprintf(mem, "Every %.1fs: pglock status    %s\n\n",
                    (double)o->watch_ms / 1000.0, stamp);
        }
        char err[512];
        if (PQstatus(conn) != CONNECTION_OK)
            PQreset(conn);
        if (refresh(mem, conn, o, reg, err, sizeof err)) {
            if (o->json) { /* still one document per line */
                json_writer w;
                json_init(&w, mem);
                json_object_begin(&w, NULL);
                json_int(&w, "format", 1);
                json_string(&w, "error", err);
                json_object_end(&w);
                json_end(&w);
            } else
                fprintf(mem, "error: %s\n", err);
        }
        fclose(mem);
        if (!interrupted)
            draw_frame(frame, len, tty);
        free(frame);
        nap(o->watch_ms);
    }
    if (tty)
        fputs("\033[?25h\n", stdout); /* the cursor back */
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------ options */

static int parse_options(int argc, char **argv, status_options *o,
                         int *help)
{
    char err[256];
    if (cli_help_asked(argc, argv)) {
        *help = 1;
        return 0;
    }
    cli_opt_parser p;
    const char *value;
    int id;
    cli_opt_init(&p, "status", argc, argv, status_tables, 0);
    while ((id = cli_opt_next(&p, &value)) != 0) {
        switch (id) {
        case OPT_KEYS: o->keys_path = value; break;
        case OPT_JSON: o->json = 1; break;
        case OPT_ALL_DATABASES: o->all_databases = 1; break;
        case OPT_WATCH:
            o->watch = 1;
            if (value) {
                if (cli_parse_duration(value, &o->watch_ms, err, sizeof err))
                    return cli_usage_error("status", "invalid --watch interval: %s", err);
                if (o->watch_ms < 100)
                    return cli_usage_error("status", "invalid --watch interval \"%s\": "
                                           "less than 100ms", value);
            }
            break;
        case 'V':
            cli_print_version();
            *help = -1;
            return 0;
        default:
            if (id < 0)
                return -id;
            cli_conn_option(&o->conn, id, value);
        }
    }
    return 0;
}

/* ------------------------------------------------------ the command */

static PGconn *connect_or_fail(const status_options *o, int *code)
{
    /* Names and application_names arrive as UTF-8 whatever the server's
     * encoding: a startup parameter, not a SET (safe through a pooler). */
    pglock_error err;
    PGconn *conn = cli_connect(&o->conn, "pglock status", "UTF8", &err);
    if (!conn)
        *code = cli_connect_error(&err, NULL);
    return conn;
}

int cmd_status(int argc, char **argv)
{
    status_options o;
    memset(&o, 0, sizeof o);
    o.watch_ms = DEFAULT_WATCH_MS;
    int help = 0;
    int rc = parse_options(argc, argv, &o, &help);
    if (rc)
        return rc;
    if (help) {
        if (help > 0)
            print_help();
        return 0;
    }
    char err[512];
    cli_registry *reg = NULL;
    if (cli_registry_load(&reg, o.keys_path, err, sizeof err))
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    cli_registry_collisions(reg, print_collision, stderr);

    int nkeys = argc - optind;
    pglock_key *keys = calloc((size_t)nkeys + 1, sizeof *keys);
    if (!keys) {
        cli_registry_free(reg);
        return cli_error(CLI_EXIT_SOFTWARE, "out of memory");
    }
    for (int i = 0; i < nkeys; i++) {
        if (cli_parse_key(argv[optind + i], reg, &keys[i], err, sizeof err)) {
            rc = cli_usage_error("status", "%s", err);
            goto out;
        }
    }
    o.filter = keys;
    o.n_filter = nkeys;

    PGconn *conn = connect_or_fail(&o, &rc);
    if (!conn)
        goto out;
    for (int i = 0; i < nkeys; i++) {
        /* legacy keys' values come from the server; others need nothing */
        pglock_error perr;
        if (pglock_key_resolve(&keys[i], conn, &perr)) {
            rc = cli_error(CLI_EXIT_UNAVAILABLE, "%s", perr.message);
            PQfinish(conn);
            goto out;
        }
    }
    if (o.watch) {
        rc = watch(conn, &o, reg);
    } else if (refresh(stdout, conn, &o, reg, err, sizeof err)) {
        /* The server would not tell (an error, no answer in time, a lost
         * connection): unavailable.  Only our own failure is 70. */
        rc = cli_error(strcmp(err, "out of memory") == 0 ? CLI_EXIT_SOFTWARE
                                                         : CLI_EXIT_UNAVAILABLE,
                       "%s", err);
    }
    PQfinish(conn);
out:
    free(keys);
    cli_registry_free(reg);
    return rc;
}
