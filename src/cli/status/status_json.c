/* pglock status --json: one document, on one line (schema in pglock-status(1)). */
#include <string.h>
#include <time.h>
#include "json.h"
#include "status.h"

static void json_session(json_writer *w, const pglock_holder *e,
                         const char *host)
{
    json_int(w, "pid", e->pid);
    json_string(w, "mode",
                e->mode == PGLOCK_EXCLUSIVE ? "exclusive" : "shared");
    json_bool(w, "visible", e->has_session && !e->hidden);
    json_string(w, "user", e->user);
    json_string(w, "application_name", e->application_name);
    json_string(w, "host", host);
    if (e->has_session && !e->hidden &&
        (e->client_port == -1 || !e->client_addr))
        json_string(w, "client_addr", "local");
    else
        json_string(w, "client_addr", e->client_addr);
    if (e->client_port > 0)
        json_int(w, "client_port", e->client_port);
    else
        json_null(w, "client_port");
    json_string(w, "state", e->state);
}

static void json_holders(json_writer *w, const lock_view *v)
{
    json_array_begin(w, "holders");
    for (int k = 0; k < v->n; k++) {
        const pglock_holder *e = v->e[k];
        if (!e->granted)
            continue;
        json_object_begin(w, NULL);
        json_session(w, e, v->host[k]);
        json_seconds(w, "held_min_s", e->held_min_s);
        json_string(w, "held_min_source",
                    e->held_min_s >= 0 ? "state_change" : NULL);
        json_seconds(w, "held_max_s", e->held_max_s);
        json_string(w, "held_max_source",
                    e->held_max_s >= 0 ? "backend_start" : NULL);
        json_object_end(w);
    }
    json_array_end(w);
}

static void json_waiters(json_writer *w, const lock_view *v)
{
    json_array_begin(w, "waiters");
    for (int k = 0; k < v->n; k++) {
        const pglock_holder *e = v->e[k];
        if (e->granted)
            continue;
        json_object_begin(w, NULL);
        json_session(w, e, v->host[k]);
        json_seconds(w, "waiting_s", e->waiting_s);
        json_string(w, "waiting_source", e->waiting_source);
        json_array_begin(w, "blocked_by");
        for (int b = 0; b < e->n_blocked_by; b++)
            json_int(w, NULL, e->blocked_by[b]);
        json_array_end(w);
        int p = status_parent_of(v, k);
        if (p >= 0)
            json_int(w, "parent_pid", v->e[p]->pid);
        else
            json_null(w, "parent_pid");
        json_object_end(w);
    }
    json_array_end(w);
}

static void json_lock(json_writer *w, const lock_view *v)
{
    char key[64];
    status_key_text(&v->e[0]->key, key, sizeof key);
    uint32_t classid = 0, objid = 0;
    int objsubid = 0;
    pglock_key_locktag(&v->e[0]->key, &classid, &objid, &objsubid);
    json_object_begin(w, NULL);
    json_string(w, "key", key);
    json_string(w, "kind",
                v->e[0]->key.kind == PGLOCK_KEY_PAIR ? "pair" : "int64");
    json_int(w, "classid", classid);
    json_int(w, "objid", objid);
    json_int(w, "objsubid", objsubid);
    char name[64];
    json_string(w, "name", status_name(v, name, sizeof name));
    json_string(w, "name_source", v->name_source);
    json_string(w, "semaphore_part", v->part[0] ? v->part : NULL);
    json_string(w, "database", v->e[0]->database);
    json_string(w, "mode",
                v->holders == 0 ? NULL
                : v->exclusive  ? "exclusive"
                                : "shared");
    json_int(w, "holder_count", v->holders);
    json_int(w, "waiter_count", v->waiters);
    json_holders(w, v);
    json_waiters(w, v);
    json_object_end(w);
}

static void json_collision(const char *a, const char *b, const pglock_key *key,
                           void *arg)
{
    json_writer *w = arg;
    char k[64];
    status_key_text(key, k, sizeof k);
    json_object_begin(w, NULL);
    json_string(w, "key", k);
    json_array_begin(w, "names");
    json_string(w, NULL, a);
    json_string(w, NULL, b);
    json_array_end(w);
    json_object_end(w);
}

void status_render_json(FILE *out, const status_scene *s)
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
    json_int(&w, "server_version", PQserverVersion(s->conn));
    json_string(&w, "database", PQdb(s->conn));
    json_string(&w, "user", PQuser(s->conn));
    json_bool(&w, "all_databases", s->all_databases);
    json_array_begin(&w, "locks");
    for (int i = 0; i < s->nv; i++)
        json_lock(&w, &s->views[i]);
    json_array_end(&w);
    json_array_begin(&w, "registry_collisions");
    cli_registry_collisions(s->reg, json_collision, &w);
    json_array_end(&w);
    json_object_end(&w);
    json_end(&w);
}
