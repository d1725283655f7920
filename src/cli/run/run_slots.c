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

cli_step run_slots_option(const char *command, const cli_opt *o,
                          cli_common *target, const char *value)
{
    int n = run_slots_parse(value);
    if (!n)
        return cli_usage_error(command,
                               "invalid value for --%s: \"%s\" "
                               "(expected 1 to %d)",
                               o->long_name, value, RUN_MAX_SLOTS);
    *(int *)cli_opt_field(o, target) = n;
    return CLI_GO_ON;
}

cli_step run_slots_check(const run_args *a)
{
    if (!a->slots)
        return CLI_GO_ON;
    if (a->mode == PGLOCK_SHARED)
        return cli_usage_error(a->command,
                               "--slots cannot be used with "
                               "--shared: each slot is held exclusively");
    if (a->nkeys > 1)
        return cli_usage_error(a->command,
                               "--slots takes one key, \"%s\" is "
                               "a second one",
                               a->keys[1]);
    return CLI_GO_ON;
}

int run_slots_make(run_slots *s, const pglock_key *key, int n)
{
    char id[24];
    memset(s, 0, sizeof *s);
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

int run_slots_declare(pglock_client *client, const run_slots *s, int *in_use,
                      char *err, size_t errlen)
{
    const pglock_key *mine = &s->decls[s->n - 1];
    *in_use = 0;
    /* shared, and nobody takes it exclusive: a try is always granted */
    int rc = pglock_lock_count(client, mine, PGLOCK_SHARED)
                 ? 0
                 : pglock_lock(client, mine, PGLOCK_SHARED, PGLOCK_TRY);
    if (rc < 0) {
        snprintf(err, errlen, "%s", pglock_client_error(client));
        return rc;
    }
    /* only now: our declaration is in the lock table before we read it */
    pglock_holders *list = NULL;
    rc = pglock_client_holders(&list, client, s->decls, RUN_MAX_SLOTS, 0,
                               cli_query_timeout_ms(
                                   pglock_client_conn(client)));
    if (rc < 0) {
        snprintf(err, errlen, "could not read who uses the slots: %s",
                 pglock_client_error(client));
        return rc;
    }
    *in_use = run_slots_in_use(s, list, s->n);
    pglock_holders_free(list);
    return 0;
}

/* A try, then (unless --try) the wait; one attempt on one connection.
 * 0, or a code with err set. */
static int take_slot(run_state *st, run_slots *s, int64_t deadline,
                     run_error *err)
{
    err->sqlstate[0] = '\0';
    int rc = run_slots_declare(st->client, s, &st->slots_in_use, err->message,
                               sizeof err->message);
    if (rc < 0)
        return rc;
    if (st->slots_in_use) /* st->slots_in_use says why */
        return run_error_set(err, PGLOCK_EINVAL, "in use with --slots=%d",
                             st->slots_in_use);
    /* one statement, whatever N: a free slot, or none */
    rc = pglock_lock_any(st->client, s->keys, s->n, PGLOCK_EXCLUSIVE,
                         &st->slot);
    if (rc == 0)
        return 0;
    if (rc != PGLOCK_EBUSY || st->args->timeout_ms == PGLOCK_TRY)
        return run_error_of(err, rc, st->client);
    return run_slots_wait(st, s, deadline, err);
}

int run_slots_acquire(run_state *st, run_slots *s, pglock_key *key,
                      run_error *err)
{
    const run_args *a = st->args;
    int64_t deadline = a->timeout_ms > 0 ? pglock_now_ms() + a->timeout_ms : 0;
    cli_verbose("trying the %d slots of \"%s\"", s->n, st->key_label);
    int said = 0;
    for (;;) {
        int rc = take_slot(st, s, deadline, err);
        if (rc == 0)
            return 0;
        char what[RUN_MAX_KEY_ENV + 32];
        snprintf(what, sizeof what, "a slot of lock \"%s\"", st->key_label);
        if ((rc = run_ride_out_loss(st, key, deadline, rc, &said, what, err)) !=
            0)
            return rc;
    }
}
