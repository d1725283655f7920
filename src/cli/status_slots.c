/*
 * `pglock status --slots=N NAME`: a semaphore as one entry.  The server
 * knows only advisory keys, not that N of them make a semaphore, so N is
 * given (as to `pglock run --slots=N`); the slot keys and the gate are
 * derived by run_slots_make() and looked at in one pglock_holders_list()
 * call: which slots are held and by whom, how many are free, and how many
 * jobs wait (the gate's holder, the head of the queue, and its waiters).
 */
#include <stdio.h>
#include <string.h>
#include "json.h"
#include "run.h"
#include "status.h"

typedef struct slots_view {
    int n, held, waiters;
    const pglock_holder *holder[RUN_MAX_SLOTS]; /* NULL: free */
} slots_view;

static int same_tag(const pglock_key *a, const pglock_key *b)
{
    uint32_t ca, oa, cb, ob;
    int sa, sb;
    return pglock_key_locktag(a, &ca, &oa, &sa) == 0 &&
           pglock_key_locktag(b, &cb, &ob, &sb) == 0 && ca == cb &&
           oa == ob && sa == sb;
}

static void tally(const pglock_holders *list, const run_slots *s,
                  slots_view *v)
{
    memset(v, 0, sizeof *v);
    v->n = s->n;
    for (int i = 0; i < pglock_holders_count(list); i++) {
        const pglock_holder *h = pglock_holders_get(list, i);
        if (same_tag(&h->key, &s->gate)) {
            v->waiters++;  /* the head (granted) and the queue */
            continue;
        }
        for (int k = 0; k < s->n; k++)
            if (h->granted && same_tag(&h->key, &s->keys[k]) && !v->holder[k]) {
                v->holder[k] = h;
                v->held++;
            }
    }
}

static void render_text(const char *name, const char *id, const slots_view *v)
{
    printf("%s (%s): semaphore of %d slots, %d held, %d free, %d waiting\n",
           name, id, v->n, v->held, v->n - v->held, v->waiters);
    for (int k = 0; k < v->n; k++) {
        const pglock_holder *h = v->holder[k];
        if (h)
            printf("  slot %d  pid %d  %s\n", k, h->pid,
                   h->application_name ? h->application_name : "?");
    }
}

static void render_json(const char *name, const char *id, const slots_view *v)
{
    json_writer w;
    json_init(&w, stdout);
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
        if (v->holder[k]->application_name)
            json_string(&w, "application_name", v->holder[k]->application_name);
        else
            json_null(&w, "application_name");
        json_object_end(&w);
    }
    json_array_end(&w);
    json_object_end(&w);
    json_object_end(&w);
    json_end(&w);
}

int status_slots(PGconn *conn, const pglock_key *key, const char *name,
                 int n, int json)
{
    run_slots s;
    char id[24];
    if (pglock_key_format(key, id, sizeof id) < 0 || run_slots_make(&s, key, n) < 0)
        return cli_error(CLI_EXIT_USAGE, "cannot derive the slots of \"%s\"", name);
    pglock_key keys[RUN_MAX_SLOTS + 1];
    memcpy(keys, s.keys, sizeof keys[0] * (size_t)n);
    keys[n] = s.gate;
    pglock_holders *list = NULL;
    pglock_error err;
    pglock_error_init(&err, PGLOCK_ERROR_VERSION);
    if (pglock_holders_list(&list, conn, keys, n + 1, 0,
                            cli_query_timeout_ms(conn), &err))
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", err.message);
    slots_view v;
    tally(list, &s, &v);
    if (!cli_quiet) {
        if (json)
            render_json(name, id, &v);
        else
            render_text(name, id, &v);
    }
    pglock_holders_free(list);
    /* as for a lock: 0 when a new job would have to wait */
    return v.held == v.n ? 0 : 1;
}

int status_slots_count(const char *value)
{
    return run_slots_parse(value);
}
