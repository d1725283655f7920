/*
 * `pglock run --slots=N NAME`: a semaphore, at most N jobs holding NAME.
 *
 * The slots are N ordinary advisory keys derived from NAME, so that every
 * client (pglock, psql, another library) can take one: slot i is the
 * text key named "<KEY_ID>#<i>" (0 <= i < N), where KEY_ID is NAME's key
 * as pglock prints it (PGLOCK_KEY_ID: "123" or "42:9"), so two spellings
 * of one lock share their slots.  Each slot is held exclusively by one
 * job, which is what bounds the holders to N; the gate "<KEY_ID>#gate"
 * only queues the waiters (run_slots_wait.c).
 *
 * Every user of a name must give the same N, and a user with another N
 * is refused (N=2 and N=3 users together would let 3 in): each user
 * holds the declaration "<KEY_ID>#n=<N>" shared while it holds or waits,
 * and looks for any other N's declaration only after its own is granted
 * (run_slots_declare()).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "run.h"

int run_slots_parse(const char *value)
{
    /* canonical digits only: "+3", " 3", "03", "3x" are not numbers */
    size_t len = strlen(value);
    int digits = len > 0 && len <= 3 && strspn(value, "0123456789") == len &&
                 !(value[0] == '0' && len > 1);
    int n = digits ? atoi(value) : 0;
    return n >= 1 && n <= RUN_MAX_SLOTS ? n : 0;
}

int run_slots_option(run_args *a, const char *value)
{
    int n = run_slots_parse(value);
    if (!n)
        return cli_usage_error(a->command, "invalid value for --slots: \"%s\" "
                               "(expected 1 to %d)", value, RUN_MAX_SLOTS);
    a->slots = n;
    return CLI_GO_ON;
}

int run_slots_check(const run_args *a)
{
    if (!a->slots)
        return CLI_GO_ON;
    if (a->mode == PGLOCK_SHARED)
        return cli_usage_error(a->command, "--slots cannot be used with "
                               "--shared: each slot is held exclusively");
    if (a->nkeys > 1)
        return cli_usage_error(a->command, "--slots takes one key, \"%s\" is "
                               "a second one", a->keys[1]);
    return CLI_GO_ON;
}

int run_slots_make(run_slots *s, const pglock_key *key, int n)
{
    char id[24];
    if (n < 1 || n > RUN_MAX_SLOTS || pglock_key_format(key, id, sizeof id) < 0)
        return -1;
    s->n = n;
    for (int i = 0; i < n; i++) {
        snprintf(s->names[i], sizeof s->names[i], "%s#%d", id, i);
        if (pglock_key_text(&s->keys[i], s->names[i]) < 0)
            return -1;
    }
    for (int m = 1; m <= RUN_MAX_SLOTS; m++) {
        snprintf(s->decl_names[m - 1], sizeof s->decl_names[m - 1], "%s#n=%d",
                 id, m);
        if (pglock_key_text(&s->decls[m - 1], s->decl_names[m - 1]) < 0)
            return -1;
    }
    snprintf(s->gate_name, sizeof s->gate_name, "%s#gate", id);
    return pglock_key_text(&s->gate, s->gate_name) < 0 ? -1 : 0;
}

/* The M of a declaration key of s, or 0 when key is none of them. */
static int declared_n(const run_slots *s, const pglock_key *key)
{
    for (int m = 1; m <= RUN_MAX_SLOTS; m++)
        if (cli_same_lock(key, &s->decls[m - 1]))
            return m;
    return 0;
}

int run_slots_in_use(const run_slots *s, const pglock_holders *list, int except)
{
    for (int i = 0; i < pglock_holders_count(list); i++) {
        const pglock_holder *h = pglock_holders_get(list, i);
        int m = h->granted ? declared_n(s, &h->key) : 0;
        if (m && m != except)
            return m;
    }
    return 0;
}

int run_slots_declare(pglock_client *client, const run_slots *s,
                      int *in_use, char *err, size_t errlen)
{
    const pglock_key *mine = &s->decls[s->n - 1];
    *in_use = 0;
    /* shared, and nobody takes it exclusive: a try is always granted */
    int rc = pglock_lock_count(client, mine, PGLOCK_SHARED)
                 ? 0 : pglock_lock(client, mine, PGLOCK_SHARED, PGLOCK_TRY);
    if (rc < 0) {
        snprintf(err, errlen, "%s", pglock_client_error(client));
        return rc;
    }
    /* only now: our declaration is in the lock table before we read it */
    PGconn *conn = pglock_client_conn(client);
    pglock_holders *list = NULL;
    pglock_error perr = {0};
    rc = pglock_holders_list(&list, conn, s->decls, RUN_MAX_SLOTS, 0,
                             cli_query_timeout_ms(conn), &perr);
    if (rc < 0) {
        snprintf(err, errlen, "could not read who uses the slots: %s",
                 perr.message);
        return rc;
    }
    *in_use = run_slots_in_use(s, list, s->n);
    pglock_holders_free(list);
    return *in_use ? RUN_SLOTS_OTHER_N : 0;
}

/* A try, then (unless --try) the wait; one attempt on one connection. */
static int take_slot(run_state *st, run_slots *s, int64_t deadline)
{
    int rc = run_slots_declare(st->client, s, &st->slots_in_use, st->error,
                               sizeof st->error);
    if (rc == RUN_SLOTS_OTHER_N)
        return PGLOCK_EINVAL;  /* st->slots_in_use says why */
    if (rc < 0)
        return rc;
    /* one statement, whatever N: a free slot, or none */
    rc = pglock_lock_any(st->client, s->keys, s->n, PGLOCK_EXCLUSIVE,
                             &st->slot);
    if (rc != PGLOCK_EBUSY || st->args->timeout_ms == PGLOCK_TRY)
        return rc;
    return run_slots_wait(st, s, deadline);
}

int run_slots_acquire(run_state *st, run_slots *s, pglock_key *key)
{
    const run_args *a = st->args;
    int64_t deadline = a->timeout_ms > 0 ? pglock_now_ms() + a->timeout_ms : 0;
    cli_verbose("trying the %d slots of \"%s\"", s->n, st->key_label);
    for (int said = 0;; said++) {
        int rc = take_slot(st, s, deadline);
        /* as run_acquire(): only a budget rides out an outage */
        if (rc != PGLOCK_ECONNLOST || !deadline || run_stop_signal())
            return rc;
        const char *why = st->client ? pglock_client_error(st->client) : st->error;
        if (!said) {
            cli_warning("connection lost while waiting for a slot of lock "
                        "\"%s\": %s; reconnecting within --wait",
                        st->key_label, why);
        } else {
            cli_verbose("connection lost again while waiting: %s", why);
        }
        pglock_client_close(st->client);
        st->client = NULL;
        if ((rc = run_reconnect(st, key, deadline)) < 0)
            return rc;
    }
}
