/*
 * A semaphore (`pglock run --slots=N NAME`) in `pglock status`, as one
 * entry: which slots are held and by whom, how many are free, and who
 * waits (the gate's holder, the head of the queue, and its queue).
 *
 * N is learnt from the declarations "<KEY_ID>#n=<N>" that every user of
 * the name holds (run_slots.c): one pglock_holders_list() call reads the
 * 64 possible slots, the gate and the 64 declarations at once, so that
 * `status NAME` stays one round trip and tells a semaphore from a plain
 * lock by what it reads.  `--slots=N` given with another N in use is a
 * usage error, as for `run`.
 */
#include <stdio.h>
#include <string.h>
#include "json.h"
#include "run.h"
#include "status.h"

typedef struct slots_view {
    int n, held, waiters;
    const pglock_holder *holder[RUN_MAX_SLOTS];            /* NULL: free */
    const pglock_holder *waiter[STATUS_SLOTS_MAX_WAITERS]; /* the gate's */
    int listed; /* waiters in waiter[] */
} slots_view;

static int same_tag(const pglock_key *a, const pglock_key *b)
{
    uint32_t ca, oa, cb, ob;
    int sa, sb;
    return pglock_key_locktag(a, &ca, &oa, &sa) == 0 &&
           pglock_key_locktag(b, &cb, &ob, &sb) == 0 && ca == cb && oa == ob &&
           sa == sb;
}

int status_slots_keys(run_slots *s, const pglock_key *key, pglock_key *keys)
{
    if (run_slots_make(s, key, RUN_MAX_SLOTS) < 0)
        return -1;
    memcpy(keys, s->keys, sizeof keys[0] * RUN_MAX_SLOTS);
    keys[RUN_MAX_SLOTS] = s->gate;
    memcpy(keys + RUN_MAX_SLOTS + 1, s->decls, sizeof keys[0] * RUN_MAX_SLOTS);
    return STATUS_SLOTS_NKEYS;
}

int status_slots_declared(const pglock_holders *list, const run_slots *s)
{
    return run_slots_in_use(s, list, 0);
}

/* The list's requests for the n slots and the gate of s.  Holders come
 * before waiters for one key, waiters in the order they began to wait
 * (pglock_holders_list()), so the gate's holder, the head, is first. */
static void tally(const pglock_holders *list, const run_slots *s, int n,
                  slots_view *v)
{
    memset(v, 0, sizeof *v);
    v->n = n;
    for (int i = 0; i < pglock_holders_count(list); i++) {
        const pglock_holder *h = pglock_holders_get(list, i);
        if (same_tag(&h->key, &s->gate)) {
            v->waiters++; /* the head (granted) and the queue */
            if (v->listed < STATUS_SLOTS_MAX_WAITERS)
                v->waiter[v->listed++] = h;
            continue;
        }
        for (int k = 0; k < n; k++)
            if (h->granted && same_tag(&h->key, &s->keys[k]) && !v->holder[k]) {
                v->holder[k] = h;
                v->held++;
            }
    }
}

static const char *app_of(const pglock_holder *h)
{
    return h->application_name ? h->application_name : "?";
}

/* "  host HOST" when h's application_name names one (a slot's key is no
 * name: the host is what follows the last " on "), else "". */
static const char *host_of(const pglock_holder *h, char *buf, size_t len)
{
    char host[64];
    if (!cli_app_host(h->application_name, &h->key, NULL, host, sizeof host))
        return "";
    snprintf(buf, len, "  host %s", host);
    return buf;
}

static void render_text(FILE *out, const char *name, const char *id,
                        const slots_view *v)
{
    fprintf(out,
            "%s (%s): semaphore of %d slots, %d held, %d free, "
            "%d waiting\n",
            name, id, v->n, v->held, v->n - v->held, v->waiters);
    char host[80];
    for (int k = 0; k < v->n; k++) {
        const pglock_holder *h = v->holder[k];
        if (h)
            fprintf(out, "  slot %d  backend pid %d%s  %s\n", k, h->pid,
                    host_of(h, host, sizeof host), app_of(h));
    }
    for (int i = 0; i < v->listed; i++) {
        const pglock_holder *h = v->waiter[i];
        fprintf(out, "  %-6s  backend pid %d%s  %s\n",
                h->granted ? "head" : "queued", h->pid,
                host_of(h, host, sizeof host), app_of(h));
    }
    if (v->waiters > v->listed)
        fprintf(out, "  ... and %d more waiting\n", v->waiters - v->listed);
}

static void json_app(json_writer *w, const pglock_holder *h)
{
    char host[64];
    if (h->application_name)
        json_string(w, "application_name", h->application_name);
    else
        json_null(w, "application_name");
    json_string(w, "host",
                cli_app_host(h->application_name, &h->key, NULL, host,
                             sizeof host));
}

static void render_json(FILE *out, const char *name, const char *id,
                        const slots_view *v)
{
    json_writer w;
    json_init(&w, out);
    json_object_begin(&w, NULL);
    json_int(&w, "format", 1);
    json_object_begin(&w, "semaphore");
    json_string(&w, "key", id);
    json_string(&w, "name", name);
    json_int(&w, "slots", v->n);
    json_int(&w, "held", v->held);
    json_int(&w, "free", v->n - v->held);
    json_int(&w, "waiting", v->waiters);
    json_array_begin(&w, "holders");
    for (int k = 0; k < v->n; k++) {
        if (!v->holder[k])
            continue;
        json_object_begin(&w, NULL);
        json_int(&w, "slot", k);
        json_int(&w, "pid", v->holder[k]->pid);
        json_app(&w, v->holder[k]);
        json_object_end(&w);
    }
    json_array_end(&w);
    /* the head (it holds the gate) first, then the queue in order */
    json_array_begin(&w, "waiters");
    for (int i = 0; i < v->listed; i++) {
        json_object_begin(&w, NULL);
        json_int(&w, "pid", v->waiter[i]->pid);
        json_bool(&w, "head", v->waiter[i]->granted);
        json_app(&w, v->waiter[i]);
        json_object_end(&w);
    }
    json_array_end(&w);
    json_object_end(&w);
    json_object_end(&w);
    json_end(&w);
}

int status_slots_render(FILE *out, const pglock_holders *list,
                        const run_slots *s, int n, const char *name, int json)
{
    /* the name's key id: the gate name's part before '#' */
    char id[24];
    snprintf(id, sizeof id, "%.*s", (int)strcspn(s->gate_name, "#"),
             s->gate_name);
    slots_view v;
    tally(list, s, n, &v);
    if (json)
        render_json(out, name, id, &v);
    else
        render_text(out, name, id, &v);
    return v.held == v.n;
}

int status_slots(PGconn *conn, const pglock_key *key, const char *name, int n,
                 int json)
{
    run_slots s; /* 9 kB: no state outlives the call */
    pglock_key keys[STATUS_SLOTS_NKEYS];
    if (status_slots_keys(&s, key, keys) < 0)
        return cli_error(CLI_EXIT_USAGE, "cannot derive the slots of \"%s\"",
                         name);
    pglock_holders *list = NULL;
    pglock_error err = {0};
    if (pglock_holders_list(&list, conn, keys, STATUS_SLOTS_NKEYS, 0,
                            cli_query_timeout_ms(conn), &err))
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", err.message);
    int in_use = status_slots_declared(list, &s);
    if (in_use && in_use != n) {
        pglock_holders_free(list);
        return cli_error(CLI_EXIT_USAGE,
                         "--slots=%d given, but lock \"%s\" "
                         "is in use with --slots=%d",
                         n, name, in_use);
    }
    FILE *out = cli_quiet ? fopen("/dev/null", "w") : stdout;
    int full = out ? status_slots_render(out, list, &s, n, name, json) : 0;
    if (out && out != stdout)
        fclose(out);
    pglock_holders_free(list);
    /* as for a lock: 0 when a new job would have to wait */
    return full ? 0 : 1;
}

cli_step status_slots_option(const char *command, const cli_opt *o,
                             cli_common *target, const char *value)
{
    return run_slots_option(command, o, target, value);
}
