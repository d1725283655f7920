/*
 * Getting `pglock run` and `pglock lead` ready for the job, around the
 * lock connection (run_connect.c): before it, options checked against
 * the lease rule, the key (and registry) and the signals; after the
 * grant, the job's environment (with the fencing token, bounded by the
 * client deadline).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli.h"
#include "lease_rules.h"
#include "run.h"

static cli_step prepare(int argc, char **argv, run_args *a, run_state *st,
                        run_job *job, pglock_key *key)
{
    memset(st, 0, sizeof *st);
    st->rec.contend_from = pglock_now_ms(); /* run: its wait counts from here */
    cli_step step = run_parse_args(argc, argv, a);
    if (step != CLI_GO_ON)
        return step;

    st->args = a;
    st->key_label = a->key_text;
    run_supervision_init(&st->sv);
    run_backoff_seed();
    char err[512];
    if (run_lease_derive(&st->lease, a->lease_ms, a->kill_after_ms, err,
                         sizeof err) < 0) {
        cli_error(CLI_EXIT_USAGE, "%s", err);
        if (a->lease_ms >= RUN_LEASE_MIN_MS) {
            char t[32];
            run_format_ms(lease_stop_budget_max_ms(a->lease_ms), t, sizeof t);
            char l[32];
            run_format_ms(a->lease_ms, l, sizeof l);
            cli_hint(
                "With --lease=%s, --kill-after can be at most %s; raise --lease for a longer grace.",
                l, t);
        }
        return cli_try_help(a->command);
    }

    if (run_keys_parse(st, key, err, sizeof err) < 0)
        return cli_usage_error(a->command, "%s", err);
    /* Before the lock: a host that cannot run the command must not win a
     * --try race it would then lose with 127. */
    if ((step = run_command_check(a)) != CLI_GO_ON)
        return step;

    /* Signals: stop signals interrupt the wait and later go to the job. */
    memset(job, 0, sizeof *job);
    job->argv = a->argv;
    job->shell_command = a->shell_command;
    job->foreground = a->foreground;
    job->foreground_pgrp = getpgrp();
    job->kill_after_ms = st->lease.kill_after_ms;
    job->allow_setuid = a->allow_setuid;
    if (run_signals_init(job) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "could not create a pipe: %s",
                         strerror(errno));
    return CLI_GO_ON;
}

cli_step run_prepare(int argc, char **argv, run_args *a, run_state *st,
                     run_job *job, pglock_key *key)
{
    cli_step step = prepare(argc, argv, a, st, job, key);
    if (step != CLI_GO_ON) {
        /* done before anything ran: the caller frees nothing */
        cli_registry_free(st->registry);
        st->registry = NULL;
    }
    return step;
}

int run_job_env(run_state *st, run_error *err)
{
    const run_args *a = st->args;
    char pidbuf[16], tokbuf[24];
    st->token = 0;
    if (a->fencing_token) {
        /* A step taken while the lock is held: bounded by the client
         * deadline, like every other (a commit waiting for synchronous
         * replication, a pooler with no free server connection). */
        int64_t left = run_deadline(st) - pglock_now_ms();
        int rc = pglock_client_fencing_token(st->client, &st->token,
                                             left > 0 ? (long)left : 0);
        if (rc < 0)
            return run_error_of(err, rc, st->client);
        snprintf(tokbuf, sizeof tokbuf, "%lld", (long long)st->token);
        setenv("PGLOCK_FENCING_TOKEN", tokbuf, 1);
        cli_verbose("fencing token %lld", (long long)st->token);
    } else {
        /* never one inherited from an outer pglock */
        unsetenv("PGLOCK_FENCING_TOKEN");
    }
    snprintf(pidbuf, sizeof pidbuf, "%d",
             pglock_client_backend_pid(st->client));
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

int run_job_env_failed(const run_state *st, int rc, const run_error *err,
                       int warn_only)
{
    if (rc == PGLOCK_EINTR && run_stop_signal()) {
        cli_verbose("interrupted while taking the fencing token");
        return 128 + run_stop_signal();
    }
    if (warn_only)
        cli_warning("lock \"%s\" acquired, but %s; released, contending again",
                    st->key_label, err->message);
    else
        cli_error(CLI_EXIT_UNAVAILABLE,
                  "lock \"%s\" acquired, but %s; the command "
                  "was not run",
                  st->key_label, err->message);
    if (rc == PGLOCK_ETIMEDOUT && !warn_only)
        cli_hint(
            "The fencing token must be committed within the client deadline "
            "(2/3 of --lease).  Is synchronous_standby_names waiting for a "
            "standby that is not there, or is a pooler out of server "
            "connections (the token needs a second one)?");
    return CLI_EXIT_UNAVAILABLE;
}
