/*
 * pglock check KEY --within=AGE [--warn=AGE] — a monitoring
 * plugin.  It follows the monitoring-plugins (Nagios) conventions, which
 * Icinga, Sensu and most cron monitors accept: exit 0 OK, 1 WARNING,
 * 2 CRITICAL, 3 UNKNOWN, and one line on stdout with perfdata.  That
 * departs from pglock's sysexits codes, as every plugin must: a usage
 * error or an unreachable server is UNKNOWN (3), not 64 or 69.
 *
 * The most recent finished run decides (skips and runs still going do not
 * count): OK when it succeeded and started within --within, WARNING when
 * it is older than --warn, CRITICAL when it failed, was killed, lost its
 * lock, ended unrecorded or in a failover (the server failed over while it
 * ran: its end is unknown), or is older than --within, or when KEY has no
 * finished run at all.  A later run that pglock cannot tell going from
 * ended ("running?", history.h) counts as going, and the line says so:
 * were it ended unrecorded, the last finished run ages past --within and
 * the check turns CRITICAL then.  With no finished run to name, UNKNOWN.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "history.h"

enum { CHECK_OK, CHECK_WARNING, CHECK_CRITICAL, CHECK_UNKNOWN };
static const char *const state_names[] = {"OK", "WARNING", "CRITICAL",
                                          "UNKNOWN"};

typedef struct check_args {
    cli_common common; /* first: the shared options' fields */
    long within_ms, warn_ms;
    const char *key_text;
} check_args;
CLI_COMMON_FIRST(check_args);

static const cli_opt check_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Check:"},
    {.type = CLI_OPT_CALL,
     .long_name = "within",
     .field = offsetof(check_args, within_ms),
     .value_name = "AGE",
     .call = history_age_option,
     .help = "CRITICAL unless the last run started this recently\n"
             "(required)"},
    {.type = CLI_OPT_CALL,
     .long_name = "warn",
     .field = offsetof(check_args, warn_ms),
     .value_name = "AGE",
     .call = history_age_option,
     .help = "WARNING when the last run started longer ago"},
    {.type = CLI_OPT_END}};

static const cli_opt *const check_tables[] = {check_opts, cli_keys_opts,
                                              cli_conn_opts, cli_help_opts,
                                              NULL};

static void usage(const cli_common *target)
{
    (void)target;
    printf("pglock check tells a monitoring system whether KEY's job ran\n"
           "lately and succeeded, from the history that --record writes.\n\n"
           "Usage:\n  pglock check [OPTION]... KEY --within=AGE\n\n");
    cli_opt_help(stdout, check_tables);
    printf("\nAGE: 500ms, 30s, 5m, 2h, plain seconds, or days (30d).\n"
           "Exit status (monitoring-plugins conventions, not sysexits): 0 OK,\n"
           "1 WARNING, 2 CRITICAL, 3 UNKNOWN (cannot tell: bad options, no\n"
           "server, no history table).\n"
           "See pglock-check(1).\n");
}

/* The UNKNOWN line on stdout, after the error already on stderr. */
static int unknown(const char *why)
{
    printf("PGLOCK UNKNOWN - %s\n", why);
    return CHECK_UNKNOWN;
}

static const cli_opt_command check_command = {"check", check_tables, usage,
                                              CLI_OPT_KEY_OPERANDS};

static int parse(int argc, char **argv, check_args *c)
{
    int operand;
    cli_step step = cli_opt_parse(&check_command, argc, argv, &c->common,
                                  &operand);
    if (step != CLI_GO_ON)
        return step;
    if (operand >= argc)
        return cli_usage_error("check", "no key given");
    if (operand + 1 < argc)
        return cli_usage_error("check", "one key at a time: unexpected \"%s\"",
                               argv[operand + 1]);
    c->key_text = argv[operand];
    if (c->within_ms < 0)
        return cli_usage_error("check", "--within is required");
    if (c->within_ms == 0)
        return cli_usage_error("check", "--within must be longer than 0");
    if (c->warn_ms >= c->within_ms)
        return cli_usage_error("check", "--warn must be shorter than --within");
    return CLI_GO_ON;
}

/* Columns: 0 host, 1 started_at (UTC text), 2 age (s), 3 duration (s),
 * 4 outcome now (history_outcome_expr), 5 exit_status; newest first. */
static const char *const last_runs_fmt =
    "SELECT host, to_char(started_at AT TIME ZONE 'UTC',"
    "  'YYYY-MM-DD\"T\"HH24:MI:SS\"Z\"'),"
    " extract(epoch FROM now() - started_at)::float8,"
    " extract(epoch FROM ended_at - started_at)::float8, outcome_now,"
    " exit_status"
    " FROM (SELECT r.*, %s AS outcome_now FROM pglock.runs r"
    "       WHERE r.key = $1::text AND (r.outcome IS NULL"
    "        OR r.outcome <> 'skipped')"
    "       ORDER BY r.started_at DESC LIMIT 50) r"
    " ORDER BY started_at DESC";

/* The first row that is neither "running" nor "running?" (-1: none);
 * *unsure the newest "running?" row before it (-1: none). */
static int last_finished(PGresult *r, int *unsure)
{
    *unsure = -1;
    for (int i = 0; i < PQntuples(r); i++) {
        const char *o = PQgetvalue(r, i, 4);
        if (strcmp(o, "running?") == 0 && *unsure < 0)
            *unsure = i;
        else if (strcmp(o, "running") != 0 && strcmp(o, "running?") != 0)
            return i;
    }
    return -1;
}

/* ", a later run started ... on HOST may still be going" */
static void say_unsure(PGresult *r, int row)
{
    char host[300];
    cli_echo_arg(PQgetvalue(r, row, 0), 0, host, sizeof host);
    printf(", a later run started %s on %s is going or ended unrecorded "
           "(cannot tell without pg_read_all_stats)",
           PQgetvalue(r, row, 1), host);
}

static int judge(PGresult *r, const check_args *c, const char *name)
{
    int unsure, row = last_finished(r, &unsure);
    if (row < 0 && unsure >= 0) {
        printf("PGLOCK UNKNOWN - %s has no finished run recorded", name);
        say_unsure(r, unsure);
        printf("\n");
        return CHECK_UNKNOWN;
    }
    if (row < 0) {
        printf("PGLOCK CRITICAL - %s has no finished run recorded\n", name);
        return CHECK_CRITICAL;
    }
    char host[300];
    cli_echo_arg(PQgetvalue(r, row, 0), 0, host, sizeof host);
    double age = strtod(PQgetvalue(r, row, 2), NULL);
    double dur = PQgetisnull(r, row, 3) ? -1
                                        : strtod(PQgetvalue(r, row, 3), NULL);
    const char *outcome = PQgetvalue(r, row, 4);
    int state = CHECK_OK;
    if (strcmp(outcome, "succeeded") != 0 || age * 1000 > c->within_ms)
        state = CHECK_CRITICAL;
    else if (c->warn_ms > 0 && age * 1000 > c->warn_ms)
        state = CHECK_WARNING;
    printf("PGLOCK %s - %s %s on %s, started %s (%.0fs ago)",
           state_names[state], name,
           strcmp(outcome, "unrecorded") == 0 ? "ended unrecorded"
           : strcmp(outcome, "failover") == 0
               ? "ran when the server failed over (its end is unknown)"
               : outcome,
           host, PQgetvalue(r, row, 1), age);
    if (dur >= 0)
        printf(", took %.3fs", dur);
    if (state != CHECK_OK && strcmp(outcome, "succeeded") == 0)
        printf(", older than --%s", state == CHECK_WARNING ? "warn" : "within");
    if (unsure >= 0)
        say_unsure(r, unsure);
    /* perfdata: 'label'=value[UOM];warn;crit;min;max */
    printf(" | age=%.3fs;", age);
    if (c->warn_ms > 0)
        printf("%.3f", c->warn_ms / 1000.0);
    printf(";%.3f;0; duration=", c->within_ms / 1000.0);
    if (dur >= 0)
        printf("%.3fs;;;0;", dur);
    else
        printf("U;;;0;");
    printf(" exit_status=%s\n",
           PQgetisnull(r, row, 5) ? "U" : PQgetvalue(r, row, 5));
    return state;
}

static int check(PGconn **pg, const check_args *c)
{
    char err[512], sql[8192], id[64];
    PGresult *probe = history_exec(pg, history_probe_sql, 0, NULL, -1, err,
                                   sizeof err);
    if (!probe)
        return cli_error(CHECK_UNKNOWN, "%s", err), unknown(err);
    int rc = history_check_probe(probe, 0, CHECK_UNKNOWN);
    PQclear(probe);
    if (rc)
        return unknown("no readable run history (see pglock init)");
    cli_registry *reg = NULL;
    pglock_key key;
    pglock_error perr = {0};
    if (cli_registry_load(&reg, c->common.keys_file, err, sizeof err) < 0 ||
        cli_parse_key(c->key_text, reg, &key, err, sizeof err) < 0) {
        cli_registry_free(reg);
        return cli_error(CHECK_UNKNOWN, "%s", err), unknown(err);
    }
    cli_registry_free(reg);
    if (!key.resolved && pglock_key_resolve(&key, *pg, &perr) < 0)
        return cli_error(CHECK_UNKNOWN, "%s", perr.message),
               unknown(perr.message);
    pglock_key_format(&key, id, sizeof id);
    snprintf(sql, sizeof sql, last_runs_fmt, history_outcome_expr);
    const char *params[1] = {id};
    PGresult *r = history_exec(pg, sql, 1, params, -1, err, sizeof err);
    if (!r)
        return cli_error(CHECK_UNKNOWN, "%s", err), unknown(err);
    char name[300];
    cli_echo_arg(c->key_text, 0, name, sizeof name);
    rc = judge(r, c, name);
    PQclear(r);
    return rc;
}

int cmd_check(int argc, char **argv)
{
    check_args c;
    memset(&c, 0, sizeof c);
    c.within_ms = -1;
    int rc = parse(argc, argv, &c);
    if (rc == 0)
        return 0;
    if (rc != CLI_GO_ON)
        return unknown("invalid options (see pglock check --help)");
    char err[512];
    PGconn *pg = history_connect(&c.common.conn, "pglock check", -1, err,
                                 sizeof err);
    if (!pg)
        return cli_error(CHECK_UNKNOWN, "%s", err), unknown(err);
    rc = check(&pg, &c);
    PQfinish(pg);
    return rc;
}
