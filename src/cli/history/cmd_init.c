/*
 * pglock init — creates what the run history needs (schema "pglock",
 * table pglock.runs, its indexes) and prints the GRANTs other roles need.
 * Idempotent: a second init changes nothing.  Never run implicitly: a
 * recording command against a database without the table fails instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "history.h"

/* The most roles one init grants to. */
#define INIT_MAX_ROLES 16

typedef struct init_args {
    cli_common common; /* first: the shared options' fields */
    int nroles;
    int kinds[INIT_MAX_ROLES];
    const char *roles[INIT_MAX_ROLES];
    int apply;
} init_args;
CLI_COMMON_FIRST(init_args);

static cli_opt_call_fn role_option;

static const cli_opt init_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Grants (each may be given again):"},
    {.type = CLI_OPT_CALL,
     .long_name = "recorder",
     .value_name = "ROLE",
     .set = HISTORY_RECORDER,
     .call = role_option,
     .help = "print the GRANTs for a role that records runs"},
    {.type = CLI_OPT_CALL,
     .long_name = "reader",
     .value_name = "ROLE",
     .set = HISTORY_READER,
     .call = role_option,
     .help = "... that reads them (history, check, metrics)"},
    {.type = CLI_OPT_CALL,
     .long_name = "pruner",
     .value_name = "ROLE",
     .set = HISTORY_PRUNER,
     .call = role_option,
     .help = "... that prunes them (history --prune)"},
    {.type = CLI_OPT_CALL,
     .long_name = "grant-to",
     .value_name = "ROLE",
     .set = HISTORY_EVERY,
     .call = role_option,
     .help = "... that does all three"},
    {.type = CLI_OPT_FLAG,
     .long_name = "apply",
     .field = offsetof(init_args, apply),
     .help = "run those GRANTs too (in one transaction)"},
    {.type = CLI_OPT_END}};

static const cli_opt *const init_tables[] = {init_opts,      cli_output_heading,
                                             cli_quiet_opts, cli_conn_opts,
                                             cli_help_opts,  NULL};

static void usage(const cli_common *target)
{
    (void)target;
    printf("pglock init creates the run history (schema \"pglock\", table\n"
           "pglock.runs) in the database, and prints the GRANTs other roles\n"
           "need to record, read and prune (for the roles named, or as a\n"
           "template).  Running it again changes nothing; a history made by\n"
           "an older pglock is upgraded in place.\n\n"
           "Usage:\n  pglock init [OPTION]...\n\n");
    cli_opt_help(stdout, init_tables);
    printf("\nExit status: 0 done, 69 server unavailable or not allowed to "
           "create\nor to grant, 64 usage.\n"
           "See pglock-init(1).\n");
}

/* The GRANTs for the roles in a (quoted with PQescapeIdentifier()), or
 * with placeholder names when none is named; printed unless -q, and
 * with --apply run in one transaction.  0, or 69 after one line. */
static int grants(PGconn *pg, const init_args *a)
{
    static const char *const placeholders[] = {"recorder_role", "reader_role",
                                               "pruner_role", "pglock_role"};
    int n = a->nroles ? a->nroles : HISTORY_EVERY;
    PGresult *r = a->apply ? PQexec(pg, "BEGIN") : NULL;
    PQclear(r);
    for (int i = 0; i < n; i++) {
        int kind = a->nroles ? a->kinds[i] : i;
        char *quoted = a->nroles ? PQescapeIdentifier(pg, a->roles[i],
                                                      strlen(a->roles[i]))
                                 : NULL;
        if (a->nroles && !quoted)
            return cli_error(CLI_EXIT_UNAVAILABLE, "%s", PQerrorMessage(pg));
        const char *role = quoted ? quoted : placeholders[kind];
        if (!cli_quiet)
            printf("-- %s %s:\n", a->nroles ? role : "A role that",
                   history_role_kind_names[kind]);
        for (int g = 0; history_grants[kind][g]; g++) {
            char sql[512];
            snprintf(sql, sizeof sql, history_grants[kind][g], role);
            if (!cli_quiet)
                printf("%s;\n", sql);
            if (!a->apply)
                continue;
            r = PQexec(pg, sql);
            if (PQresultStatus(r) != PGRES_COMMAND_OK) {
                char line[512];
                const char *m = PQresultErrorField(r, PG_DIAG_MESSAGE_PRIMARY);
                snprintf(line, sizeof line, "%s", m ? m : PQerrorMessage(pg));
                line[strcspn(line, "\n")] = '\0';
                PQclear(r);
                PQfreemem(quoted);
                PQclear(PQexec(pg, "ROLLBACK"));
                return cli_error(CLI_EXIT_UNAVAILABLE, "could not grant: %s",
                                 line);
            }
            PQclear(r);
        }
        PQfreemem(quoted);
    }
    if (!a->apply)
        return 0;
    r = PQexec(pg, "COMMIT");
    int ok = PQresultStatus(r) == PGRES_COMMAND_OK &&
             strcmp(PQcmdStatus(r), "COMMIT") == 0;
    PQclear(r);
    if (!ok)
        return cli_error(CLI_EXIT_UNAVAILABLE, "could not grant: the "
                                               "transaction was rolled back");
    cli_notice("granted to %d role%s", a->nroles, a->nroles == 1 ? "" : "s");
    return 0;
}

/* The version already in the database (0: none), or -1 after an error;
 * its revision in *revision. */
static int version_found(PGconn *pg, int *revision)
{
    pglock_error err = {0};
    PGresult *r = cli_query(pg, history_probe_sql, 0, NULL, &err);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        char line[512];
        snprintf(line, sizeof line, "%s",
                 r ? PQresultErrorMessage(r) : err.message);
        line[strcspn(line, "\n")] = '\0';
        PQclear(r);
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", line), -1;
    }
    int v = PQgetisnull(r, 0, 1) ? 0 : atoi(PQgetvalue(r, 0, 1));
    *revision = history_revision(r);
    if (PQgetvalue(r, 0, 0)[0] == 't' && v == 0)
        v = -2; /* a table of that name that pglock did not create */
    PQclear(r);
    return v;
}

static int init_database(PGconn *pg, const init_args *a)
{
    int revision = 0;
    int found = version_found(pg, &revision);
    if (found == -1)
        return CLI_EXIT_UNAVAILABLE;
    if (found == -2 || found > HISTORY_SCHEMA_VERSION)
        return cli_error(CLI_EXIT_UNAVAILABLE, "pglock.runs exists but %s",
                         found == -2 ? "carries no pglock schema version"
                                     : "was created by a newer pglock");
    /* An older revision is upgraded in place (history_init_sql adds only
     * what is missing); a newer one is kept as it is. */
    int upgrade = found == HISTORY_SCHEMA_VERSION &&
                  revision < HISTORY_SCHEMA_REVISION;
    if (found == 0 || upgrade) {
        PGresult *r = PQexec(pg, history_init_sql);
        if (PQresultStatus(r) != PGRES_COMMAND_OK) {
            char line[512];
            snprintf(line, sizeof line, "%s", PQresultErrorMessage(r));
            line[strcspn(line, "\n")] = '\0';
            PQclear(r);
            return cli_error(CLI_EXIT_UNAVAILABLE,
                             "could not create the run "
                             "history: %s",
                             line);
        }
        PQclear(r);
    }
    if (upgrade)
        cli_notice("run history upgraded from schema version %d, revision %d "
                   "to revision %d in database \"%s\"",
                   found, revision, HISTORY_SCHEMA_REVISION, PQdb(pg));
    else
        cli_notice("run history (schema version %d, revision %d) %s in "
                   "database \"%s\"",
                   HISTORY_SCHEMA_VERSION,
                   found ? revision : HISTORY_SCHEMA_REVISION,
                   found ? "already present" : "created", PQdb(pg));
    return grants(pg, a);
}

/* --recorder, --reader, --pruner, --grant-to: one more role, of the kind
 * o->set says. */
static cli_step role_option(const char *command, const cli_opt *o,
                            cli_common *target, const char *value)
{
    init_args *a = (init_args *)target; /* (its first member) */
    if (!*value)
        return cli_usage_error(command, "invalid role name: it is empty");
    if (a->nroles == INIT_MAX_ROLES)
        return cli_usage_error(command, "too many roles: at most %d",
                               INIT_MAX_ROLES);
    a->kinds[a->nroles] = o->set;
    a->roles[a->nroles++] = value;
    return CLI_GO_ON;
}

static const cli_opt_command init_command = {"init", init_tables, usage, 0};

int cmd_init(int argc, char **argv)
{
    init_args a;
    memset(&a, 0, sizeof a);
    int operand;
    int rc = cli_opt_parse(&init_command, argc, argv, &a.common, &operand);
    if (rc != CLI_GO_ON)
        return rc;
    if (operand < argc)
        return cli_usage_error("init", "unexpected argument \"%s\"",
                               argv[operand]);
    if (a.apply && !a.nroles)
        return cli_usage_error("init", "--apply needs a role: --recorder, "
                                       "--reader, --pruner or --grant-to");
    pglock_error err = {0};
    PGconn *pg = cli_connect(&a.common.conn, "pglock init", NULL, &err);
    if (!pg)
        return cli_connect_error(&err, NULL);
    rc = init_database(pg, &a);
    PQfinish(pg);
    return rc;
}
