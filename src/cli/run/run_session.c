/*
 * Getting `pglock run` and `pglock lead` to the point where the job can
 * start: options checked against the lease rule, the key (and registry),
 * the lock connection, and the job's environment (with the fencing token,
 * bounded by the client deadline).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"
#include "lease_rules.h"
#include "run.h"

static int prepare(int argc, char **argv, run_args *a, run_state *st,
                   run_job *job, pglock_key *key)
{
    memset(st, 0, sizeof *st);
    int rc = run_parse_args(argc, argv, a);
    if (rc != CLI_GO_ON)
        return rc;

    st->args = a;
    st->key_label = a->key_text;
    char err[512];
    if (run_lease_derive(&st->lease, a->lease_ms, a->kill_after_ms, err, sizeof err) < 0) {
        cli_error(CLI_EXIT_USAGE, "%s", err);
        if (a->lease_ms >= RUN_LEASE_MIN_MS) {
            char t[32];
            run_format_ms(lease_stop_budget_ms(a->lease_ms), t, sizeof t);
            char l[32];
            run_format_ms(a->lease_ms, l, sizeof l);
            cli_hint("With --lease=%s, --kill-after can be at most %s; raise --lease for a longer grace.",
                     l, t);
        }
        return cli_try_help(a->command);
    }

    if (run_keys_parse(st, key, err, sizeof err) < 0)
        return cli_usage_error(a->command, "%s", err);
    /* Before the lock: a host that cannot run the command must not win a
     * --try race it would then lose with 127. */
    if ((rc = run_command_check(a)) != CLI_GO_ON)
        return rc;

    /* Signals: stop signals interrupt the wait and later go to the job. */
    memset(job, 0, sizeof *job);
    job->argv = a->argv;
    job->shell_command = a->shell_command;
    job->foreground = a->foreground;
    job->foreground_pgrp = getpgrp();
    job->kill_after_ms = st->lease.kill_after_ms;
    job->lease_tail_ms = lease_stop_budget_ms(st->lease.server_ms);
    job->allow_setuid = a->allow_setuid;
    if (run_signals_init(job) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not create a pipe: %s", strerror(errno));
    return CLI_GO_ON;
}

int run_prepare(int argc, char **argv, run_args *a, run_state *st,
                run_job *job, pglock_key *key)
{
    int rc = prepare(argc, argv, a, st, job, key);
    if (rc != CLI_GO_ON) { /* done before anything ran: the caller frees nothing */
        cli_registry_free(st->registry);
        st->registry = NULL;
    }
    return rc;
}

int run_open_client(const run_state *st, const char *connect_timeout,
                    int interrupt_fd, pglock_client **out)
{
    const run_args *a = st->args;
    char appname[64], keys[256], host[256];
    run_join_keys(keys, sizeof keys, a->keys, a->nkeys, " ");
    cli_application_name(appname, a->command, keys,
                         run_host_label(a, host, sizeof host));
    const char *kw[12], *val[12];
    int nkw = 0;
    if (connect_timeout) {
        /* first, so that the user's own connect_timeout wins */
        kw[nkw] = "connect_timeout";
        val[nkw++] = connect_timeout;
    }
    cli_conn_params(&a->conn, NULL, kw + nkw, val + nkw);
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
    /* slots too: pglock_lock_any() and the watchers' waits work with either
     * lifetime, so --slots passes a transaction-mode pooler */
    opts.lifetime = a->lifetime;
    return pglock_client_open_params(out, kw, val, &opts);
}

run_refusal run_connect_refusal(const run_state *st, int rc)
{
    if (rc != PGLOCK_ECONNECT)
        return RUN_REFUSAL_REFUSED;
    const char *s = st->error_sqlstate, *e = st->error;
    /* The server's own no (libpq gives no SQLSTATE for a failed
     * connection: the library reads it from the verbose message). */
    if (!strcmp(s, "3D000") ||
        (!strcmp(s, "28000") && strstr(e, "role \"") &&
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

int run_connect_may_pass(const run_state *st, int rc)
{
    return run_connect_refusal(st, rc) == RUN_REFUSAL_PASSING;
}

int run_connect(run_state *st, pglock_key *key, const char *connect_timeout)
{
    st->error_sqlstate[0] = '\0';
    cli_verbose("connecting");
    int rc = run_open_client(st, connect_timeout, run_interrupt_fd(),
                             &st->client);
    if (rc < 0) {
        snprintf(st->error, sizeof st->error, "%s",
                 st->client ? pglock_client_error(st->client) : pglock_strerror(rc));
        snprintf(st->error_sqlstate, sizeof st->error_sqlstate, "%s",
                 st->client ? pglock_client_sqlstate(st->client) : "");
        pglock_client_close(st->client);
        st->client = NULL;
        return rc;
    }
    const char *db = pglock_client_database(st->client);
    PGconn *pc = pglock_client_conn(st->client);
    cli_verbose("connected: database \"%s\" on %s port %s, %s",
                db, pc && PQhost(pc) ? PQhost(pc) : "?",
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
        pglock_error perr = {0};
        rc = pglock_key_resolve(&key[i], pc, &perr);
        if (rc < 0) {
            snprintf(st->error, sizeof st->error, "%s", perr.message);
            pglock_client_close(st->client);
            st->client = NULL;
            return rc;
        }
    }
    if (run_keys_order(st, key, st->error, sizeof st->error) < 0) {
        pglock_client_close(st->client);
        st->client = NULL;
        return PGLOCK_EINVAL;
    }
    return 0;
}

int run_job_env(run_state *st)
{
    const run_args *a = st->args;
    char pidbuf[16], tokbuf[24];
    st->token = 0;
    if (a->fencing_token) {
        /* A step taken while the lock is held: bounded by the client
         * deadline, like every other (a commit waiting for synchronous
         * replication, a pooler with no free server connection). */
        int64_t left = pglock_client_confirmed_at(st->client) +
                       st->lease.client_ms - pglock_now_ms();
        int rc = pglock_client_fencing_token(st->client, &st->token,
                                             left > 0 ? (long)left : 0);
        if (rc < 0) {
            snprintf(st->error, sizeof st->error, "%s",
                     pglock_client_error(st->client));
            return rc;
        }
        snprintf(tokbuf, sizeof tokbuf, "%lld", (long long)st->token);
        setenv("PGLOCK_FENCING_TOKEN", tokbuf, 1);
        cli_verbose("fencing token %lld", (long long)st->token);
    } else {
        /* never one inherited from an outer pglock */
        unsetenv("PGLOCK_FENCING_TOKEN");
    }
    snprintf(pidbuf, sizeof pidbuf, "%d", pglock_client_backend_pid(st->client));
    const char *db = pglock_client_database(st->client);
    char keys[RUN_MAX_KEY_ENV + 1]; /* run_keys_parse() refused longer */
    run_join_keys(keys, sizeof keys, st->key_texts, st->nkeys, "\n");
    setenv("PGLOCK_KEY", keys, 1);
    setenv("PGLOCK_KEY_ID", st->key_id, 1);
    setenv("PGLOCK_DATABASE", db ? db : "", 1);
    setenv("PGLOCK_BACKEND_PID", pidbuf, 1);
    if (a->slots) {
        char slot[16];
        snprintf(slot, sizeof slot, "%d", st->slot);
        setenv("PGLOCK_SLOT", slot, 1);
    } else {
        unsetenv("PGLOCK_SLOT"); /* never one inherited from an outer run */
    }
    return 0;
}

int run_job_env_failed(run_state *st, int rc, int warn_only)
{
    if (rc == PGLOCK_EINTR && run_stop_signal()) {
        cli_verbose("interrupted while taking the fencing token");
        return 128 + run_stop_signal();
    }
    if (warn_only)
        cli_warning("lock \"%s\" acquired, but %s; released, contending again",
                    st->key_label, st->error);
    else
        cli_error(CLI_EXIT_UNAVAILABLE, "lock \"%s\" acquired, but %s; the command "
                  "was not run", st->key_label, st->error);
    if (rc == PGLOCK_ETIMEDOUT && !warn_only)
        cli_hint("The fencing token must be committed within the client deadline "
                 "(2/3 of --lease).  Is synchronous_standby_names waiting for a "
                 "standby that is not there, or is a pooler out of server "
                 "connections (the token needs a second one)?");
    return CLI_EXIT_UNAVAILABLE;
}
