/*
 * Several keys in one `pglock run`: parsed, put in one canonical order and
 * taken all or none.
 *
 * The canonical order is what keeps two runs from deadlocking: whatever
 * order the user gave, every run takes its keys from the smallest up, so
 * no run ever waits for a key while holding a larger one that the other
 * waits for.  The order: 64-bit keys (integers and names, by the bigint
 * the name hashes to) by signed value, then pairs by namespace, then id.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "run.h"

void run_join_keys(char *buf, size_t len, const char *const *texts, int n,
                   const char *sep)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int i = 0; i < n && used + 1 < len; i++) {
        int w = snprintf(buf + used, len - used, "%s%s", i ? sep : "",
                         texts[i]);
        if (w < 0)
            break;
        used += (size_t)w;
    }
}

/* Keys of one lock space compare by value; pairs after every bigint. */
static int compare_keys(const pglock_key *x, const pglock_key *y)
{
    int xp = x->kind == PGLOCK_KEY_PAIR, yp = y->kind == PGLOCK_KEY_PAIR;
    if (xp != yp)
        return xp - yp;
    if (xp) {
        if (x->ns != y->ns)
            return x->ns < y->ns ? -1 : 1;
        return x->nsid < y->nsid ? -1 : x->nsid > y->nsid;
    }
    return x->id < y->id ? -1 : x->id > y->id;
}

static int known(const pglock_key *k)
{
    uint32_t c, o;
    int s;
    return pglock_key_locktag(k, &c, &o, &s) == PGLOCK_OK;
}

/* The first pair of keys (of those whose value is known) that are the
 * same lock: -1 when none. */
static int find_duplicate(const pglock_key *keys, int n, int *other)
{
    for (int i = 1; i < n; i++)
        for (int j = 0; j < i; j++)
            if (known(&keys[i]) && known(&keys[j]) &&
                compare_keys(&keys[i], &keys[j]) == 0) {
                *other = j;
                return i;
            }
    return -1;
}

static int duplicate_error(const run_state *st, const pglock_key *keys,
                           char *err, size_t errlen)
{
    int j, i = find_duplicate(keys, st->nkeys, &j);
    if (i < 0)
        return 0;
    if (strcmp(st->key_texts[i], st->key_texts[j]) == 0)
        snprintf(err, errlen, "key \"%.200s\" given twice", st->key_texts[i]);
    else
        snprintf(err, errlen,
                 "keys \"%.200s\" and \"%.200s\" are the same lock",
                 st->key_texts[j], st->key_texts[i]);
    return -1;
}

int run_keys_parse(run_state *st, pglock_key *keys, char *err, size_t errlen)
{
    const run_args *a = st->args;
    int registry = a->common.keys_file != NULL;
    st->nkeys = a->nkeys;
    for (int i = 0; i < a->nkeys; i++) {
        st->key_texts[i] = a->keys[i];
        registry |= a->keys[i][0] == '@';
    }
    if (registry && !st->registry &&
        cli_registry_load(&st->registry, a->common.keys_file, err, errlen) < 0)
        return -1;
    size_t env = 0;
    for (int i = 0; i < st->nkeys; i++) {
        if (cli_parse_key(st->key_texts[i], st->registry, &keys[i], err,
                          errlen) < 0)
            return -1;
        env += strlen(st->key_texts[i]) + (i > 0);
    }
    /* The job reads them all in PGLOCK_KEY: never a part of them. */
    if (env > RUN_MAX_KEY_ENV) {
        snprintf(err, errlen,
                 "the key%s too long: PGLOCK_KEY would be %zu "
                 "bytes (at most %d)",
                 st->nkeys > 1 ? "s are" : " is", env, RUN_MAX_KEY_ENV);
        return -1;
    }
    /* legacy keys are compared once the server has given their value */
    return duplicate_error(st, keys, err, errlen);
}

int run_keys_order(run_state *st, pglock_key *keys, char *err, size_t errlen)
{
    /* insertion sort: at most RUN_MAX_KEYS, and it keeps texts alongside */
    for (int i = 1; i < st->nkeys; i++) {
        pglock_key k = keys[i];
        const char *t = st->key_texts[i];
        int j = i;
        for (; j > 0 && compare_keys(&keys[j - 1], &k) > 0; j--) {
            keys[j] = keys[j - 1];
            st->key_texts[j] = st->key_texts[j - 1];
        }
        keys[j] = k;
        st->key_texts[j] = t;
    }
    if (duplicate_error(st, keys, err, errlen) < 0)
        return -1;
    size_t used = 0;
    st->key_id[0] = '\0';
    for (int i = 0; i < st->nkeys; i++) {
        char id[32];
        if (pglock_key_format(&keys[i], id, sizeof id) < 0)
            snprintf(id, sizeof id, "?");
        used += (size_t)snprintf(st->key_id + used, sizeof st->key_id - used,
                                 "%s%s", i ? " " : "", id);
    }
    if (st->nkeys > 1) {
        run_join_keys(st->label_buf, sizeof st->label_buf, st->key_texts,
                      st->nkeys, ", ");
        st->key_label = st->label_buf;
    }
    return 0;
}

int run_lock_all(run_state *st, const pglock_key *keys, pglock_mode mode,
                 long timeout_ms, int *failed, run_error *err)
{
    /* one budget for the whole set: each wait gets what is left of it */
    int64_t deadline = timeout_ms > 0 ? pglock_now_ms() + timeout_ms : 0;
    int replace = st->args->replace, queue = st->args->queue;
    if (replace || queue) {
        int rc = queue ? run_queue_enter(st, keys, err) : 0;
        if (rc == 0 && replace)
            rc = run_replace_ask(st, keys, st->nkeys, timeout_ms, err);
        if (rc < 0) {
            *failed = 0;
            if (rc != PGLOCK_ECONNLOST)
                pglock_unlock_all(st->client);
            return rc;
        }
    }
    for (int i = 0; i < st->nkeys; i++) {
        long t = timeout_ms;
        if (timeout_ms > 0) {
            int64_t left = deadline - pglock_now_ms();
            t = left > 0 ? (long)left : PGLOCK_TRY;
        }
        if (st->nkeys > 1)
            cli_verbose("acquiring \"%s\" (%d of %d)", st->key_texts[i], i + 1,
                        st->nkeys);
        int rc = pglock_lock(st->client, &keys[i], mode, t);
        if (rc == PGLOCK_EBUSY && timeout_ms > 0)
            rc = PGLOCK_ETIMEDOUT; /* the budget ran out: a wait's end */
        if (rc < 0) {
            *failed = i;
            /* why, before the unlock empties the client's last error */
            run_error_of(err, rc, st->client);
            /* all or none: give back what was taken (a lost connection
             * has freed it already) */
            if ((i > 0 || replace || queue) && rc != PGLOCK_ECONNLOST)
                pglock_unlock_all(st->client);
            return rc;
        }
    }
    /* --queue: granted, so no longer waiting: the place goes to the next */
    int rc = queue ? run_queue_leave(st, err) : 0;
    if (rc < 0 && rc != PGLOCK_ECONNLOST)
        pglock_unlock_all(st->client);
    return rc;
}
