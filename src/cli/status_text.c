/*
 * pglock status's table: a title line per lock, then its sessions, each
 * waiter under whoever blocks it, in columns sized to what they hold (no
 * fixed limit: a name of any length prints whole).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "status.h"

enum { COL_SESSION, COL_USER, COL_CLIENT, COL_HOW_LONG, COL_APP, NCOLS };
static const char *const heads[NCOLS] = {"SESSION", "USER", "CLIENT",
                                         "HOW LONG", "APPLICATION"};
/* A chain of waiters deeper than this is cut (a pathological queue). */
#define MAX_DEPTH 32

typedef struct text_row {
    int is_title;          /* a lock's title line, printed as is */
    char *cell[NCOLS];     /* owned; NULL prints as "-" */
} text_row;

typedef struct text_table {
    text_row *rows;
    int n, cap;
    int failed;            /* out of memory somewhere */
    int *hidden;           /* pids whose details were hidden */
    int n_hidden, cap_hidden;
} text_table;

static char *dupf(text_table *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static char *dupf(text_table *t, const char *fmt, ...)
{
    va_list ap;
    char *s = NULL;
    va_start(ap, fmt);
    if (vasprintf(&s, fmt, ap) < 0) {
        s = NULL;
        t->failed = 1;
    }
    va_end(ap);
    return s;
}

/* A copy of s (UTF-8) for a terminal: control characters become '?', the
 * C0 ones and DEL, and the C1 ones too (U+0080..U+009F, bytes C2 80..C2
 * 9F: a terminal reads U+009B as CSI, as it reads ESC [). */
static char *clean(text_table *t, const char *s)
{
    if (!s)
        s = "?";
    char *buf = malloc(strlen(s) + 1);
    if (!buf) {
        t->failed = 1;
        return NULL;
    }
    size_t o = 0;
    for (size_t i = 0; s[i]; i++) {
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
    return buf;
}

/* Display width: code points (UTF-8 lead bytes). */
static int width(const char *s)
{
    int w = 0;
    for (; s && *s; s++)
        if (((unsigned char)*s & 0xC0) != 0x80)
            w++;
    return w;
}

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

static void note_hidden(text_table *t, int pid)
{
    for (int i = 0; i < t->n_hidden; i++)
        if (t->hidden[i] == pid)
            return;
    if (t->n_hidden == t->cap_hidden) {
        int cap = t->cap_hidden ? t->cap_hidden * 2 : 16;
        int *h = realloc(t->hidden, (size_t)cap * sizeof *h);
        if (!h) {
            t->failed = 1;
            return;
        }
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
        if (!r) {
            t->failed = 1;
            return NULL;
        }
        t->rows = r;
        t->cap = cap;
    }
    text_row *r = &t->rows[t->n++];
    memset(r, 0, sizeof *r);
    return r;
}

/* How long, in words: "41s to 2m13s" (an idle holder: the lock is older
 * than its last statement's end and younger than its session), "up to
 * 2m13s" (an upper bound alone), "1m02s" (a waiter's exact waitstart).
 * The columns the bounds come from are in --json. */
static char *how_long(text_table *t, const pglock_holder *e)
{
    char a[32], b[32];
    if (e->granted) {
        if (e->held_max_s < 0)
            return dupf(t, "%s", e->hidden ? "hidden" : "unknown");
        format_duration(e->held_max_s, b, sizeof b);
        if (e->held_min_s < 0)
            return dupf(t, "up to %s", b);
        format_duration(e->held_min_s, a, sizeof a);
        return strcmp(a, b) ? dupf(t, "%s to %s", a, b) : dupf(t, "%s", a);
    }
    if (e->waiting_s < 0 || !e->waiting_source)
        return dupf(t, "%s", e->hidden ? "hidden" : "unknown");
    format_duration(e->waiting_s, a, sizeof a);
    if (!strcmp(e->waiting_source, "waitstart"))
        return dupf(t, "%s", a);
    return dupf(t, "up to %s", a);
}

static void fill_session_cells(text_table *t, text_row *r, const pglock_holder *e)
{
    r->cell[COL_USER] = clean(t, e->user);
    if (e->application_name)
        r->cell[COL_APP] = clean(t, e->application_name);
    if (e->pid == 0) {
        r->cell[COL_CLIENT] = dupf(t, "prepared transaction");
        r->cell[COL_HOW_LONG] = dupf(t, "unknown");
        return;
    }
    if (e->hidden)
        note_hidden(t, e->pid);
    if (e->hidden || !e->has_session)
        r->cell[COL_CLIENT] = dupf(t, "%s", e->hidden ? "hidden" : "no session");
    else if (e->client_port == -1 || !e->client_addr)
        r->cell[COL_CLIENT] = dupf(t, "local");
    else if (strchr(e->client_addr, ':'))
        r->cell[COL_CLIENT] = dupf(t, "[%s]:%d", e->client_addr, e->client_port);
    else
        r->cell[COL_CLIENT] = dupf(t, "%s:%d", e->client_addr, e->client_port);
    r->cell[COL_HOW_LONG] = how_long(t, e);
}

/* Adds v->e[idx] and, under it, the requests it blocks. */
static void add_subtree(text_table *t, const lock_view *v, const int *parent,
                        int idx, const char *prefix, int last, int depth)
{
    text_row *r = table_add(t);
    if (!r)
        return;
    const pglock_holder *e = v->e[idx];
    char pid[24];
    if (e->pid)
        snprintf(pid, sizeof pid, "%d", e->pid);
    else
        snprintf(pid, sizeof pid, "-");
    /* A waiter says what it asks for; holders share the lock's mode. */
    const char *mode = e->granted ? ""
                       : e->mode == PGLOCK_EXCLUSIVE ? " (exclusive)" : " (shared)";
    r->cell[COL_SESSION] = dupf(t, "%s%s%s %s%s", prefix,
                                depth == 0 ? "" : (last ? "└─ " : "├─ "),
                                e->granted ? "holds" : "waits", pid, mode);
    fill_session_cells(t, r, e);
    if (depth >= MAX_DEPTH) /* a pathological chain: keep it readable */
        return;
    char *child_prefix = dupf(t, "%s%s", prefix,
                              depth == 0 ? "" : (last ? "   " : "│  "));
    if (!child_prefix)
        return;
    int nchildren = 0, seen = 0;
    for (int k = 0; k < v->n; k++)
        nchildren += parent[k] == idx;
    for (int k = 0; k < v->n && seen < nchildren; k++) {
        if (parent[k] != idx)
            continue;
        seen++;
        add_subtree(t, v, parent, k, child_prefix, seen == nchildren, depth + 1);
    }
    free(child_prefix);
}

static void add_lock(text_table *t, const lock_view *v, int all_databases)
{
    char key[64], mode[64], waiting[32] = "";
    status_key_text(&v->e[0]->key, key, sizeof key);
    if (v->holders == 0)
        snprintf(mode, sizeof mode, "not held");
    else if (v->exclusive)
        snprintf(mode, sizeof mode, "exclusive");
    else
        snprintf(mode, sizeof mode, "shared by %d", v->holders);
    if (v->waiters)
        snprintf(waiting, sizeof waiting, ", %d waiting", v->waiters);
    text_row *r = table_add(t);
    if (!r)
        return;
    r->is_title = 1;
    if (v->name) {
        char *name = clean(t, v->name);
        r->cell[0] = dupf(t, "%s (%s) = ", name ? name : "", v->name_source);
        free(name);
    }
    char *db = all_databases ? clean(t, v->e[0]->database) : NULL;
    r->cell[1] = dupf(t, "key %s%s%s: %s%s", key, db ? ", database " : "",
                      db ? db : "", mode, waiting);
    free(db);
    int *parent = malloc((size_t)v->n * sizeof *parent);
    if (!parent) {
        t->failed = 1;
        return;
    }
    for (int k = 0; k < v->n; k++)
        parent[k] = status_parent_of(v, k);
    for (int k = 0; k < v->n; k++)
        if (parent[k] < 0)
            add_subtree(t, v, parent, k, "  ", 1, 0);
    free(parent);
}

static void print_table(FILE *out, const text_table *t)
{
    int w[NCOLS];
    for (int c = 0; c < NCOLS; c++)
        w[c] = width(heads[c]) + (c == 0 ? 2 : 0);
    for (int i = 0; i < t->n; i++)
        for (int c = 0; c < NCOLS && !t->rows[i].is_title; c++)
            if (width(t->rows[i].cell[c]) > w[c])
                w[c] = width(t->rows[i].cell[c]);
    fprintf(out, "  %-*s", w[0] - 2, heads[0]);
    for (int c = 1; c < NCOLS; c++)
        fprintf(out, "  %-*s", c == NCOLS - 1 ? 0 : w[c], heads[c]);
    fputc('\n', out);
    for (int i = 0; i < t->n; i++) {
        const text_row *r = &t->rows[i];
        if (r->is_title) {
            fprintf(out, "%s%s\n", r->cell[0] ? r->cell[0] : "",
                    r->cell[1] ? r->cell[1] : "");
            continue;
        }
        for (int c = 0; c < NCOLS; c++) {
            const char *s = r->cell[c] && r->cell[c][0] ? r->cell[c] : "-";
            if (c == NCOLS - 1)
                fprintf(out, "  %s", s);
            else
                fprintf(out, "%s%s%*s", c ? "  " : "", s, w[c] - width(s), "");
        }
        fputc('\n', out);
    }
}

static void table_free(text_table *t)
{
    for (int i = 0; i < t->n; i++)
        for (int c = 0; c < NCOLS; c++)
            free(t->rows[i].cell[c]);
    free(t->rows);
    free(t->hidden);
}

static void print_summary(FILE *out, const status_scene *s, const char *db)
{
    int waiting = 0;
    for (int i = 0; i < s->nv; i++)
        waiting += s->views[i].waiters;
    fprintf(out, "%d lock%s (%d waiting) in %s%s\n", s->nv,
            s->nv == 1 ? "" : "s", waiting,
            s->all_databases ? "all databases" : "database ",
            s->all_databases ? "" : db);
}

static void print_hidden_note(FILE *out, const text_table *t, PGconn *conn)
{
    text_table scratch = {0};
    char *user = clean(&scratch, PQuser(conn));
    if (t->n_hidden == 1)
        fprintf(out, "note: the client, state and times of 1 session of "
                "another role are hidden from role \"%s\" (grant it "
                "pg_read_all_stats)\n", user ? user : "?");
    else
        fprintf(out, "note: the client, state and times of %d sessions of "
                "other roles are hidden from role \"%s\" (grant it "
                "pg_read_all_stats)\n", t->n_hidden, user ? user : "?");
    free(user);
}

int status_render_text(FILE *out, const status_scene *s)
{
    text_table t = {0};
    char *db = clean(&t, PQdb(s->conn));
    if (s->nv == 0) {
        fprintf(out, "%s held or awaited in %s%s\n",
                s->filtered ? "none of the given keys is"
                            : "no advisory locks",
                s->all_databases ? "any database" : "database ",
                s->all_databases ? "" : (db ? db : "?"));
        free(db);
        return t.failed ? -1 : 0;
    }
    for (int i = 0; i < s->nv && !t.failed; i++)
        add_lock(&t, &s->views[i], s->all_databases);
    int rc = t.failed ? -1 : 0;
    if (rc == 0) {
        print_summary(out, s, db ? db : "?");
        print_table(out, &t);
        if (t.n_hidden)
            print_hidden_note(out, &t, s->conn);
    }
    free(db);
    table_free(&t);
    return rc;
}

static void print_collision(const char *a, const char *b, const pglock_key *key,
                            void *arg)
{
    text_table t = {0};
    char k[64];
    status_key_text(key, k, sizeof k);
    char *ca = clean(&t, a), *cb = clean(&t, b);
    (void)arg;
    cli_warning("registry names \"%s\" and \"%s\" are the same key %s",
                ca ? ca : "?", cb ? cb : "?", k);
    free(ca);
    free(cb);
}

void status_warn_collisions(const cli_registry *reg)
{
    cli_registry_collisions(reg, print_collision, NULL);
}
