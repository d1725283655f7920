/*
 * pglock status's table: a title line per lock, then its sessions, each
 * waiter under whoever blocks it, in columns sized to what they hold (no
 * fixed limit: a name of any length prints whole).
 *
 * Cost.  With 10,000 locks the table is 20,000 lines, so nothing here is
 * done per cell that need not be: the rows are walked twice, once to size
 * the columns and once to write them, each row made in the same few
 * reused buffers (no allocation per row or cell, no table kept), and the
 * output leaves in large writes.  Memory is what costs most on a small
 * machine: every page first touched is a page fault.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "status.h"

enum {
    COL_SESSION,
    COL_HOST,
    COL_USER,
    COL_CLIENT,
    COL_HOW_LONG,
    COL_APP,
    NCOLS
};
/* SESSION's pid is the server's: BACKEND PID. */
static const char *const heads[NCOLS] = {"BACKEND PID", "HOST",
                                         "USER",        "CLIENT",
                                         "HOW LONG",    "APPLICATION"};
/* A chain of waiters deeper than this is cut (a pathological queue). */
#define MAX_DEPTH 32
/* The tree's indent: "  ", then at most "│  " (5 bytes) per level. */
#define PREFIX_MAX (2 + MAX_DEPTH * 5 + 1)
/* Output is written when this much has gathered. */
#define OUT_CHUNK 65536

/* A growable string; failed once an allocation failed. */
typedef struct strbuf {
    char *s;
    size_t len, cap;
    int failed;
} strbuf;

static int sb_room(strbuf *b, size_t more)
{
    if (b->failed)
        return -1;
    if (b->len + more + 1 <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 16; /* small: growth is tested */
    while (cap < b->len + more + 1)
        cap *= 2;
    char *s = realloc(b->s, cap);
    if (!s) {
        b->failed = 1;
        return -1;
    }
    b->s = s;
    b->cap = cap;
    return 0;
}

static void sb_put(strbuf *b, const char *s, size_t n)
{
    if (sb_room(b, n))
        return;
    memcpy(b->s + b->len, s, n);
    b->len += n;
    b->s[b->len] = '\0';
}

static void sb_puts(strbuf *b, const char *s)
{
    sb_put(b, s, strlen(s));
}

static void sb_spaces(strbuf *b, int n)
{
    if (n <= 0 || sb_room(b, (size_t)n))
        return;
    memset(b->s + b->len, ' ', (size_t)n);
    b->len += (size_t)n;
    b->s[b->len] = '\0';
}

static void sb_printf(strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void sb_printf(strbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || sb_room(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->s + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

/* v in decimal, at least min_digits of them (zeros in front). */
static void sb_putl(strbuf *b, long v, int min_digits)
{
    char digits[24];
    sb_put(b, digits,
           (size_t)(cli_put_decimal(digits, v, min_digits) - digits));
}

/* s (UTF-8) for a terminal: control characters become '?', the C0 ones
 * and DEL, and the C1 ones too (U+0080..U+009F, bytes C2 80..C2 9F: a
 * terminal reads U+009B as CSI, as it reads ESC [).  NULL is "?". */
static void sb_clean(strbuf *b, const char *s)
{
    if (!s)
        s = "?";
    if (sb_room(b, strlen(s)))
        return;
    char *o = b->s + b->len;
    for (size_t i = 0; s[i]; i++) {
        unsigned char c = (unsigned char)s[i];
        unsigned char next = (unsigned char)s[i + 1];
        if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {
            *o++ = '?';
            i++;
        } else {
            *o++ = (char)((c < 0x20 || c == 0x7F) ? '?' : c);
        }
    }
    *o = '\0';
    b->len = (size_t)(o - b->s);
}

/* Display width: code points (UTF-8 lead bytes). */
static int width(const char *s, size_t len)
{
    int w = 0;
    for (size_t i = 0; i < len; i++)
        w += ((unsigned char)s[i] & 0xC0) != 0x80;
    return w;
}

/* The two passes over the rows, and what they share. */
typedef struct text_pass {
    int writing; /* 0: sizing the columns; 1: writing */
    int w[NCOLS];
    strbuf cell[NCOLS]; /* the row being made; "" prints as "-" */
    char prefix[PREFIX_MAX];
    strbuf out; /* written to file in chunks */
    FILE *file;
    int *hidden; /* pids whose details were hidden */
    int n_hidden, cap_hidden;
    int failed; /* out of memory somewhere */
} text_pass;

static void pass_flush(text_pass *p)
{
    if (p->out.len)
        fwrite(p->out.s, 1, p->out.len, p->file);
    p->out.len = 0;
}

static void note_hidden(text_pass *p, int pid)
{
    for (int i = 0; i < p->n_hidden; i++)
        if (p->hidden[i] == pid)
            return;
    if (p->n_hidden == p->cap_hidden) {
        int cap = p->cap_hidden ? p->cap_hidden * 2 : 16;
        int *h = realloc(p->hidden, (size_t)cap * sizeof *h);
        if (!h) {
            p->failed = 1;
            return;
        }
        p->hidden = h;
        p->cap_hidden = cap;
    }
    p->hidden[p->n_hidden++] = pid;
}

static void fill_session_cells(text_pass *p, const pglock_holder *e,
                               const char *host)
{
    strbuf *client = &p->cell[COL_CLIENT];
    sb_clean(&p->cell[COL_USER], e->user);
    if (host)
        sb_clean(&p->cell[COL_HOST], host);
    if (e->application_name)
        sb_clean(&p->cell[COL_APP], e->application_name);
    char words[80];
    cli_holder_client(e, words, sizeof words);
    sb_puts(client, words);
    if (e->pid != 0 && e->hidden && !p->writing)
        note_hidden(p, e->pid);
    if (e->pid == 0)
        snprintf(words, sizeof words, "unknown");
    else
        cli_holder_how_long(e, words, sizeof words);
    sb_puts(&p->cell[COL_HOW_LONG], words);
}

static void row_begin(text_pass *p)
{
    for (int c = 0; c < NCOLS; c++) {
        p->cell[c].len = 0;
        if (p->cell[c].s)
            p->cell[c].s[0] = '\0';
    }
}

/* The row made in p->cell: sized, or written. */
static void row_end(text_pass *p)
{
    for (int c = 0; c < NCOLS; c++)
        if (p->cell[c].failed)
            p->failed = 1;
    if (!p->writing) {
        for (int c = 0; c < NCOLS; c++) {
            int w = width(p->cell[c].s, p->cell[c].len);
            if (w > p->w[c])
                p->w[c] = w;
        }
        return;
    }
    for (int c = 0; c < NCOLS; c++) {
        const strbuf *cell = &p->cell[c];
        const char *s = cell->len ? cell->s : "-";
        size_t len = cell->len ? cell->len : 1;
        if (c)
            sb_put(&p->out, "  ", 2);
        sb_put(&p->out, s, len);
        if (c < NCOLS - 1)
            sb_spaces(&p->out, p->w[c] - width(s, len));
    }
    sb_put(&p->out, "\n", 1);
    if (p->out.len >= OUT_CHUNK)
        pass_flush(p);
}

/* Makes the row of v->e[idx] (plen bytes of p->prefix are its indent)
 * and, under it, the requests it blocks. */
static void add_subtree(text_pass *p, const lock_view *v, const int *parent,
                        const int *nchildren, int idx, size_t plen, int last,
                        int depth)
{
    const pglock_holder *e = v->e[idx];
    strbuf *session = &p->cell[COL_SESSION];
    row_begin(p);
    sb_put(session, p->prefix, plen);
    if (depth)
        sb_puts(session, last ? "└─ " : "├─ ");
    sb_puts(session, e->granted ? "holds " : "waits ");
    if (e->pid)
        sb_putl(session, e->pid, 1);
    else
        sb_puts(session, "-");
    /* A waiter says what it asks for; holders share the lock's mode. */
    if (!e->granted)
        sb_puts(session,
                e->mode == PGLOCK_EXCLUSIVE ? " (exclusive)" : " (shared)");
    fill_session_cells(p, e, v->host[idx]);
    row_end(p);
    if (depth >= MAX_DEPTH || nchildren[idx] == 0)
        return; /* (a pathological chain is cut: keep it readable) */
    size_t child_plen = plen;
    if (depth) {
        const char *indent = last ? "   " : "│  ";
        memcpy(p->prefix + plen, indent, strlen(indent));
        child_plen += strlen(indent);
    }
    for (int k = 0, seen = 0; k < v->n && seen < nchildren[idx]; k++) {
        if (parent[k] != idx)
            continue;
        seen++;
        add_subtree(p, v, parent, nchildren, k, child_plen,
                    seen == nchildren[idx], depth + 1);
    }
}

/* The lock's title line, as is (writing only). */
static void add_title(text_pass *p, const lock_view *v, int all_databases)
{
    char key[64];
    status_key_text(&v->e[0]->key, key, sizeof key);
    strbuf *o = &p->out;
    char name[64];
    if (v->name) {
        sb_clean(o, status_name(v, name, sizeof name));
        if (v->part[0]) {
            sb_puts(o, " ");
            sb_puts(o, v->part);
        }
        sb_puts(o, " (");
        sb_puts(o, v->name_source);
        sb_puts(o, ") = ");
    }
    sb_puts(o, "key ");
    sb_puts(o, key);
    if (all_databases) {
        sb_puts(o, ", database ");
        sb_clean(o, v->e[0]->database);
    }
    sb_puts(o, ": ");
    if (v->holders == 0) {
        sb_puts(o, "not held");
    } else if (v->exclusive) {
        sb_puts(o, "exclusive");
    } else {
        sb_puts(o, "shared by ");
        sb_putl(o, v->holders, 1);
    }
    if (v->waiters) {
        sb_puts(o, ", ");
        sb_putl(o, v->waiters, 1);
        sb_puts(o, " waiting");
    }
    sb_puts(o, "\n");
}

static void add_lock(text_pass *p, const lock_view *v, int all_databases)
{
    if (p->writing)
        add_title(p, v, all_databases);
    /* Each request's parent in the tree, and how many children each has
     * (a lock is mostly one holder: no allocation then). */
    int small[2 * 8];
    int *parent = v->n <= 8 ? small : malloc((size_t)v->n * 2 * sizeof *parent);
    if (!parent) {
        p->failed = 1;
        return;
    }
    int *nchildren = parent + v->n;
    for (int k = 0; k < v->n; k++)
        nchildren[k] = 0;
    for (int k = 0; k < v->n; k++) {
        parent[k] = status_parent_of(v, k);
        if (parent[k] >= 0)
            nchildren[parent[k]]++;
    }
    for (int k = 0; k < v->n; k++)
        if (parent[k] < 0)
            add_subtree(p, v, parent, nchildren, k, 2, 1, 0);
    if (parent != small)
        free(parent);
}

static void add_header(text_pass *p)
{
    strbuf *o = &p->out;
    for (int c = 0; c < NCOLS; c++) {
        int len = (int)strlen(heads[c]);
        sb_puts(o, "  ");
        sb_puts(o, heads[c]);
        if (c < NCOLS - 1)
            sb_spaces(o, (c == 0 ? p->w[c] - 2 : p->w[c]) - len);
    }
    sb_puts(o, "\n");
}

static void add_summary(text_pass *p, const status_scene *s, const char *db)
{
    int waiting = 0;
    for (int i = 0; i < s->nv; i++)
        waiting += s->views[i].waiters;
    sb_printf(&p->out, "%d lock%s (%d waiting) in %s%s\n", s->nv,
              s->nv == 1 ? "" : "s", waiting,
              s->all_databases ? "all databases" : "database ",
              s->all_databases ? "" : db);
}

static void add_hidden_note(text_pass *p, PGconn *conn)
{
    strbuf user = {0};
    sb_clean(&user, PQuser(conn));
    const char *u = user.s ? user.s : "?";
    if (p->n_hidden == 1)
        sb_printf(&p->out,
                  "note: the client, state and times of 1 session of "
                  "another role are hidden from role \"%s\" (grant it "
                  "pg_read_all_stats)\n",
                  u);
    else
        sb_printf(&p->out,
                  "note: the client, state and times of %d sessions of "
                  "other roles are hidden from role \"%s\" (grant it "
                  "pg_read_all_stats)\n",
                  p->n_hidden, u);
    free(user.s);
}

static void pass_free(text_pass *p)
{
    for (int c = 0; c < NCOLS; c++)
        free(p->cell[c].s);
    free(p->out.s);
    free(p->hidden);
}

/* Sizes the columns, then writes everything; -1 when out of memory
 * while sizing (nothing is written then). */
static int render_table(text_pass *p, const status_scene *s, const char *db)
{
    for (int c = 0; c < NCOLS; c++)
        p->w[c] = (int)strlen(heads[c]) + (c == 0 ? 2 : 0);
    memcpy(p->prefix, "  ", 2);
    if (sb_room(&p->out, OUT_CHUNK + 4096))
        return -1;
    for (int i = 0; i < s->nv && !p->failed; i++)
        add_lock(p, &s->views[i], s->all_databases);
    if (p->failed)
        return -1;
    p->writing = 1;
    add_summary(p, s, db);
    add_header(p);
    for (int i = 0; i < s->nv; i++)
        add_lock(p, &s->views[i], s->all_databases);
    if (p->n_hidden)
        add_hidden_note(p, s->conn);
    pass_flush(p);
    return p->failed || p->out.failed ? -1 : 0;
}

int status_render_text(FILE *out, const status_scene *s)
{
    text_pass p;
    memset(&p, 0, sizeof p);
    p.file = out;
    strbuf db = {0};
    sb_clean(&db, PQdb(s->conn));
    const char *dbname = db.s ? db.s : "?";
    int rc = 0;
    if (s->nv == 0)
        fprintf(out, "%s held or awaited in %s%s\n",
                s->filtered ? "none of the given keys is" : "no advisory locks",
                s->all_databases ? "any database" : "database ",
                s->all_databases ? "" : dbname);
    else
        rc = render_table(&p, s, dbname);
    free(db.s);
    pass_free(&p);
    return rc;
}

static void print_collision(const char *a, const char *b, const pglock_key *key,
                            void *arg)
{
    strbuf ca = {0}, cb = {0};
    char k[64];
    status_key_text(key, k, sizeof k);
    sb_clean(&ca, a);
    sb_clean(&cb, b);
    (void)arg;
    cli_warning("registry names \"%s\" and \"%s\" are the same key %s",
                ca.s ? ca.s : "?", cb.s ? cb.s : "?", k);
    free(ca.s);
    free(cb.s);
}

void status_warn_collisions(const cli_registry *reg)
{
    cli_registry_collisions(reg, print_collision, NULL);
}
