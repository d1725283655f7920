/*
 * How `pglock run` takes its keys: all of them, in order (run_keys.c),
 * within the --wait budget; and when the connection is lost while waiting
 * (a server restart, a failover to a host the conninfo also names), it
 * reconnects with backoff and waits again, as `pglock lead` does, within
 * the same budget (--wait=DURATION only).  The command never runs on the strength of an earlier
 * connection: every key is taken again on the new one.  A full lock table
 * on the server (53200) is waited out the same way, on the same
 * connection.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "run.h"

int run_reconnect(run_state *st, pglock_key *keys, int64_t deadline)
{
    long base = RUN_BACKOFF_MIN_MS;
    char last[sizeof st->error] = "";
    for (;;) {
        long pause = run_next_backoff(&base);
        int64_t now = pglock_now_ms();
        if (now + pause + RUN_MIN_ATTEMPT_MS > deadline) {
            snprintf(st->error, sizeof st->error, "%s", last[0] ? last
                     : "not reconnected within --wait");
            return PGLOCK_ECONNECT;
        }
        if (run_pause_ms(pause))
            return PGLOCK_EINTR;
        /* each attempt gets at most what is left of the budget (libpq
         * counts whole seconds), and a blackholed host a third of the
         * lease, as in lead */
        long secs = st->lease.server_ms / 3000;
        if ((deadline - pglock_now_ms()) / 1000 < secs)
            secs = (long)((deadline - pglock_now_ms()) / 1000);
        char ct[24];
        snprintf(ct, sizeof ct, "%ld", secs < 2 ? 2 : secs);
        int rc = run_connect(st, keys, ct);
        if (rc == 0) {
            cli_verbose("reconnected: backend pid %d",
                        pglock_client_backend_pid(st->client));
            return 0;
        }
        if (run_stop_signal())
            return PGLOCK_EINTR;
        /* the path itself says no, every time: not a passing outage */
        if (rc == PGLOCK_EINVAL || rc == PGLOCK_ENOMEM || rc == PGLOCK_EPOOLER ||
            rc == PGLOCK_EVERSION ||
            (rc == PGLOCK_ECONNECT && !run_connect_may_pass(st, rc)))
            return rc;
        /* down, refused, or a standby that a failover may be promoting */
        cli_verbose("could not reconnect: %s", st->error);
        snprintf(last, sizeof last, "%s", st->error);
    }
}

int run_acquire(run_state *st, pglock_key *keys, int *failed)
{
    const run_args *a = st->args;
    int64_t deadline = a->timeout_ms > 0 ? pglock_now_ms() + a->timeout_ms : 0;
    int said = 0, said_full = 0;
    long full_base = RUN_BACKOFF_MIN_MS;
    for (;;) {
        long t = a->timeout_ms;
        if (deadline) {
            int64_t left = deadline - pglock_now_ms();
            t = left > 0 ? (long)left : PGLOCK_TRY;
        }
        int rc = run_lock_all(st, keys, a->mode, t, failed);
        if (rc == PGLOCK_ELOCKTABLE && deadline && !run_stop_signal()) {
            /* The server's lock table is full: other sessions' locks may
             * go within the budget; the connection itself is fine.  Said
             * once, tried again with backoff to the budget's end, then 69
             * with the same words. */
            long pause = run_next_backoff(&full_base);
            int64_t left = deadline - pglock_now_ms();
            if (left <= 0)
                return rc;
            if (pause > left)
                pause = (long)left; /* one last try as the budget ends */
            if (!said_full++) {
                cli_warning("could not take lock \"%s\": %s; retrying within "
                            "--wait", st->key_texts[*failed], st->error);
            } else {
                cli_verbose("lock table still full: %s", st->error);
            }
            if (run_pause_ms(pause))
                return PGLOCK_EINTR;
            continue;
        }
        /* Only with a budget: an unbounded wait (no --wait) keeps exit
         * 69, so that a caller with no budget hears of the outage rather
         * than wait on a server that may never return (lead is for that). */
        if (rc != PGLOCK_ECONNLOST || !deadline || run_stop_signal())
            return rc;
        if (!said++) {
            cli_warning("connection lost while waiting for lock \"%s\": %s; "
                        "reconnecting within --wait", st->key_texts[*failed],
                        pglock_client_error(st->client));
        } else {
            cli_verbose("connection lost again while waiting: %s",
                        pglock_client_error(st->client));
        }
        pglock_client_close(st->client);
        st->client = NULL;
        if ((rc = run_reconnect(st, keys, deadline)) < 0)
            return rc;
    }
}

void run_busy_holder(const run_state *st, const pglock_key *key, char *buf,
                     size_t len)
{
    snprintf(buf, len, "another session");
    PGconn *conn = st->client ? pglock_client_conn(st->client) : NULL;
    /* Under -q nobody reads it: spare the server the pg_locks read. */
    if (cli_quiet || !conn || PQstatus(conn) != CONNECTION_OK)
        return;
    PGTransactionStatusType ts = PQtransactionStatus(conn);
    if (ts != PQTRANS_IDLE && ts != PQTRANS_INTRANS)
        return;
    pglock_holders *list = NULL;
    if (pglock_holders_list(&list, conn, key, 1, 0, RUN_BUSY_HOLDER_MS, NULL) < 0)
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
