/*
 * Who holds a key that `pglock run` found busy, for its notice, and that
 * `pglock lead` waits for, for its STATUS: read from pg_locks on the
 * lock's own connection, bounded, and only when someone will read it.
 */
#include <stdio.h>
#include "cli.h"
#include "run.h"

void run_busy_holder(const run_state *st, const pglock_key *key, char *buf,
                     size_t len)
{
    snprintf(buf, len, "another session");
    /* Under -q nobody reads it: spare the server the pg_locks read.  A
     * lost connection has its error on the client: left as it is. */
    if (cli_quiet || !st->client || pglock_client_socket(st->client) < 0)
        return;
    pglock_holders *list = NULL;
    if (pglock_client_holders(&list, st->client, key, 1, 0,
                              RUN_BUSY_HOLDER_MS) < 0)
        return;
    const pglock_holder *first = NULL;
    int others = 0, self = pglock_client_backend_pid(st->client);
    for (int i = 0; i < pglock_holders_count(list); i++) {
        const pglock_holder *e = pglock_holders_get(list, i);
        if (!e->granted || e->pid == self)
            continue;
        if (first)
            others++;
        else
            first = e;
    }
    if (first) {
        char who[400];
        cli_holder_describe(first, st->registry, who, sizeof who);
        if (others)
            snprintf(buf, len, "%s and %d other session%s", who, others,
                     others == 1 ? "" : "s");
        else
            snprintf(buf, len, "%s", who);
    }
    pglock_holders_free(list);
}
