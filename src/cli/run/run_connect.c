/*
 * The lock connection of `pglock run` and `pglock lead`: opened (with the
 * keys resolved and ordered on it), judged when it fails, and reopened.
 *
 * One loop reopens it for both commands (run_reconnect()), as libpq's
 * connectDBComplete() is one loop: whether a failed attempt is tried
 * again is decided in one place, run_connect_again(), from one ordered
 * verdict (run_connect_verdict()); what differs between the commands is
 * only where the verdict stops them and how they say it.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"
#include "lease_rules.h"
#include "run.h"

void run_client_drop(run_state *st)
{
    pglock_client_close(st->client);
    st->client = NULL;
}

int run_open_client(const run_state *st, long connect_timeout_ms,
                    int interrupt_fd, pglock_client **out)
{
    const run_args *a = st->args;
    char appname[64], keys[256], host[256];
    run_join_keys(keys, sizeof keys, a->keys, a->nkeys, " ");
    cli_application_name(appname, a->command, keys,
                         run_host_label(a, host, sizeof host));
    const char *kw[12], *val[12];
    int nkw = 0;
    cli_conn_params(&a->common.conn, NULL, kw + nkw, val + nkw);
    while (kw[nkw])
        nkw++;
    kw[nkw] = "application_name";
    val[nkw++] = appname;
    kw[nkw] = NULL;
    val[nkw] = NULL;
    pglock_options opts;
    pglock_options_init(&opts, PGLOCK_OPTIONS_VERSION);
    opts.lease_ms = st->lease.server_ms;
    opts.application_name = appname;
    opts.interrupt_fd = interrupt_fd;
    opts.connect_timeout_ms = connect_timeout_ms; /* the user's own wins */
    /* slots too: pglock_lock_any() and the watchers' waits work with either
     * lifetime, so --slots passes a transaction-mode pooler */
    opts.lifetime = a->lifetime;
    return pglock_client_open_params(out, kw, val, &opts);
}

run_refusal run_connect_verdict(int rc, const run_error *err)
{
    /* the path itself says no, every time: not a passing outage */
    if (rc == PGLOCK_EINVAL || rc == PGLOCK_ENOMEM || rc == PGLOCK_EPOOLER ||
        rc == PGLOCK_EVERSION)
        return RUN_REFUSAL_FOR_GOOD;
    if (rc != PGLOCK_ECONNECT)
        return RUN_REFUSAL_OTHER;
    const char *s = err->sqlstate, *e = err->message;
    /* The server's own no (libpq gives no SQLSTATE for a failed
     * connection: the library reads it from the verbose message). */
    if (!strcmp(s, "3D000") || (!strcmp(s, "28000") && strstr(e, "role \"") &&
                                strstr(e, "\" does not exist")))
        return RUN_REFUSAL_FOR_GOOD;
    /* PgBouncer says every refusal as 08P01: its own (English, fixed
     * texts) and the server's, relayed with the server's text. */
    if (!strcmp(s, "08P01")) {
        if (strstr(e, "no such database: ") || strstr(e, "\" does not exist"))
            return RUN_REFUSAL_FOR_GOOD;
        if (strstr(e, "authentication failed"))
            return RUN_REFUSAL_REFUSED;
    }
    /* No answer from a server (refused, no socket, a timeout), or its
     * classes 08 (connection), 53 (resources: too many clients) and 57
     * (operator intervention: starting up, shutting down).  Other 28000s
     * (an LDAP, RADIUS or Kerberos server down, a pg_hba.conf being
     * edited) are refusals: they may pass for lead, as a password may. */
    if (!*s || !strncmp(s, "08", 2) || !strncmp(s, "53", 2) ||
        !strncmp(s, "57", 2))
        return RUN_REFUSAL_PASSING;
    return RUN_REFUSAL_REFUSED;
}

int run_connect_again(int rc, const run_error *err, run_refusal gives_up_at)
{
    return run_connect_verdict(rc, err) < gives_up_at;
}

int run_connect(run_state *st, pglock_key *key, long connect_timeout_ms,
                run_error *err)
{
    cli_verbose("connecting");
    int rc = run_open_client(st, connect_timeout_ms, run_interrupt_fd(),
                             &st->client);
    if (rc < 0) {
        run_error_of(err, rc, st->client);
        run_client_drop(st);
        return rc;
    }
    const char *db = pglock_client_database(st->client);
    PGconn *pc = pglock_client_conn(st->client);
    cli_verbose("connected: database \"%s\" on %s port %s, %s", db,
                pc && PQhost(pc) ? PQhost(pc) : "?",
                pc && PQport(pc) ? PQport(pc) : "?",
                pglock_client_lifetime(st->client) != PGLOCK_LIFETIME_XACT
                    ? "session lock on a direct connection"
                : st->args->lifetime == PGLOCK_LIFETIME_XACT
                    ? "the lock is held in a transaction (--mode=xact)"
                    : "through a pooler: the lock is held in a transaction");

    for (int i = 0; i < st->nkeys; i++) {
        if (key[i].resolved || (key[i].kind != PGLOCK_KEY_HASHTEXT &&
                                key[i].kind != PGLOCK_KEY_HASHTEXTEXTENDED))
            continue;
        /* a legacy key's value: asked once, here */
        rc = pglock_client_key_resolve(st->client, &key[i]);
        if (rc < 0) {
            run_error_of(err, rc, st->client);
            run_client_drop(st);
            return rc;
        }
    }
    if (run_keys_order(st, key, err->message, sizeof err->message) < 0) {
        err->sqlstate[0] = '\0';
        run_client_drop(st);
        return PGLOCK_EINVAL;
    }
    return 0;
}

/* What one attempt may take, in ms: the whole seconds left of the budget
 * (libpq counts whole seconds, at least 2), and a third of the lease, so
 * that a blackholed host does not hang the loop. */
static long attempt_timeout_ms(const run_state *st, int64_t deadline)
{
    long secs = lease_connect_timeout_s(st->lease.server_ms);
    if (deadline && (deadline - pglock_now_ms()) / 1000 < secs)
        secs = (long)((deadline - pglock_now_ms()) / 1000);
    return secs < 2 ? 2000L : secs * 1000L;
}

int run_reconnect(run_state *st, pglock_key *keys, const run_retry *r,
                  run_error *err)
{
    long fresh = RUN_BACKOFF_MIN_MS, *base = r->backoff ? r->backoff : &fresh;
    int failed_before = 0; /* err holds the last attempt's failure */
    for (int attempt = 0;; attempt++) {
        if (attempt > 0 || r->pause_first) {
            long pause = run_next_backoff(base);
            if (r->deadline &&
                pglock_now_ms() + pause + RUN_MIN_ATTEMPT_MS > r->deadline) {
                if (!failed_before)
                    run_error_set(err, 0, "not reconnected within --wait");
                return PGLOCK_ECONNECT;
            }
            r->tell(st, r->voice, RUN_RETRY_PAUSE, pause, NULL);
            if (run_pause_ms(pause))
                return run_error_set(err, PGLOCK_EINTR, "interrupted");
        }
        int rc = run_connect(st, keys, attempt_timeout_ms(st, r->deadline),
                             err);
        if (rc == 0) {
            r->tell(st, r->voice, RUN_RETRY_CONNECTED, 0, NULL);
            return 0;
        }
        if (run_stop_signal())
            return PGLOCK_EINTR;
        if (!run_connect_again(rc, err, r->gives_up_at))
            return rc;
        /* down, refused, or a standby that a failover may be promoting */
        r->tell(st, r->voice, RUN_RETRY_FAILED, 0, err);
        failed_before = 1;
    }
}

/* run --wait's voice: verbose lines only (the warning that starts a
 * reconnect is the caller's). */
static void tell_run(run_state *st, void *voice, run_retry_event ev,
                     long pause_ms, const run_error *why)
{
    (void)voice;
    (void)pause_ms;
    if (ev == RUN_RETRY_FAILED)
        cli_verbose("could not reconnect: %s", why->message);
    else if (ev == RUN_RETRY_CONNECTED)
        cli_verbose("reconnected: backend pid %d",
                    pglock_client_backend_pid(st->client));
}

run_retry run_retry_within(int64_t deadline)
{
    return (run_retry){.deadline = deadline,
                       .gives_up_at = RUN_REFUSAL_REFUSED,
                       .pause_first = 1,
                       .tell = tell_run};
}

int run_ride_out_loss(run_state *st, pglock_key *keys, int64_t deadline, int rc,
                      int *said, const char *what, run_error *err)
{
    /* Only with a budget: an unbounded wait (no --wait) keeps exit 69, so
     * that a caller with no budget hears of the outage rather than wait
     * on a server that may never return (lead is for that). */
    if (rc != PGLOCK_ECONNLOST || !deadline || run_stop_signal())
        return rc;
    /* the wait's own words (err): the client's last error may be a later
     * step's */
    const char *why = err->message;
    if (!(*said)++)
        cli_warning("connection lost while waiting for %s: %s; reconnecting "
                    "within --wait",
                    what, why);
    else
        cli_verbose("connection lost again while waiting: %s", why);
    run_client_drop(st);
    run_retry r = run_retry_within(deadline);
    return run_reconnect(st, keys, &r, err);
}
