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

enum { OPT_RECORDER = 300, OPT_READER, OPT_PRUNER, OPT_GRANT_TO, OPT_APPLY };

/* The most roles one init grants to. */
#define INIT_MAX_ROLES 16

static const cli_opt init_opts[] = {
    {0, 0, NULL, 0, NULL, "Grants (each may be given again):"},
    {OPT_RECORDER, 0, "recorder", CLI_OPT_VALUE, "ROLE",
     "print the GRANTs for a role that records runs"},
    {OPT_READER, 0, "reader", CLI_OPT_VALUE, "ROLE",
     "... that reads them (history, check, metrics)"},
    {OPT_PRUNER, 0, "pruner", CLI_OPT_VALUE, "ROLE",
     "... that prunes them (history --prune)"},
    {OPT_GRANT_TO, 0, "grant-to", CLI_OPT_VALUE, "ROLE",
     "... that does all three"},
    {OPT_APPLY, 0, "apply", CLI_OPT_NO_VALUE, NULL,
     "run those GRANTs too (in one transaction)"},
    CLI_OPT_END};

static const cli_opt *const init_tables[] = {
    init_opts, cli_output_heading, cli_quiet_opts, cli_conn_opts,
    cli_help_opts, NULL};

static void usage(void)
{
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

typedef struct init_args {
    cli_conn conn;
    int nroles;
    int kinds[INIT_MAX_ROLES];
    const char *roles[INIT_MAX_ROLES];
    int apply;
} init_args;

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
                return cli_error(CLI_EXIT_UNAVAILABLE, "could not grant: %s", line);
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
        snprintf(line, sizeof line, "%s", r ? PQresultErrorMessage(r) : err.message);
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
            return cli_error(CLI_EXIT_UNAVAILABLE, "could not create the run "
                             "history: %s", line);
        }
        PQclear(r);
    }
    if (upgrade)
        cli_notice("run history upgraded from schema version %d, revision %d "
                   "to revision %d in database \"%s\"", found, revision,
                   HISTORY_SCHEMA_REVISION, PQdb(pg));
    else
        cli_notice("run history (schema version %d, revision %d) %s in "
                   "database \"%s\"", HISTORY_SCHEMA_VERSION,
                   found ? revision : HISTORY_SCHEMA_REVISION,
                   found ? "already present" : "created", PQdb(pg));
    return grants(pg, a);
}

static int role_option(init_args *a, int id, const char *value)
{
    if (!*value)
        return cli_usage_error("init", "invalid role name: it is empty");
    if (a->nroles == INIT_MAX_ROLES)
        return cli_usage_error("init", "too many roles: at most %d",
                               INIT_MAX_ROLES);
    a->kinds[a->nroles] = id == OPT_RECORDER ? HISTORY_RECORDER
                          : id == OPT_READER ? HISTORY_READER
                          : id == OPT_PRUNER ? HISTORY_PRUNER
                                             : HISTORY_EVERY;
    a->roles[a->nroles++] = value;
    return 0;
}

int cmd_init(int argc, char **argv)
{
    init_args a;
    memset(&a, 0, sizeof a);
    const char *value;
    int id, rc;
    cli_opt_parser p;
    if ((rc = cli_opt_start(&p, "init", argc, argv, init_tables, usage)) != CLI_GO_ON)
        return rc;
    while ((id = cli_opt_next(&p, &value)) != CLI_OPT_DONE) {
        if (id == 'q')
            cli_quiet = 1;
        else if (id == OPT_APPLY)
            a.apply = 1;
        else if (id >= OPT_RECORDER && id <= OPT_GRANT_TO) {
            if ((rc = role_option(&a, id, value)) != 0)
                return rc;
        } else if ((rc = cli_shared_option(&a.conn, id, value)) != CLI_GO_ON)
            return rc;
    }
    if (optind < argc)
        return cli_usage_error("init", "unexpected argument \"%s\"", argv[optind]);
    if (a.apply && !a.nroles)
        return cli_usage_error("init", "--apply needs a role: --recorder, "
                               "--reader, --pruner or --grant-to");
    pglock_error err = {0};
    PGconn *pg = cli_connect(&a.conn, "pglock init", NULL, &err);
    if (!pg)
        return cli_connect_error(&err, NULL);
    rc = init_database(pg, &a);
    PQfinish(pg);
    return rc;
}
