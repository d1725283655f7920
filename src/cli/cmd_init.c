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

static const cli_opt init_opts[] = {
    {0, 0, NULL, 0, NULL, "Output:"},
    {'q', 'q', "quiet", CLI_OPT_NO_VALUE, NULL,
     "print errors only (not the GRANTs)"},
    CLI_OPT_END};

static const cli_opt *const init_tables[] = {init_opts, cli_conn_opts,
                                             cli_help_opts, NULL};

static void usage(void)
{
    printf("pglock init creates the run history (schema \"pglock\", table\n"
           "pglock.runs) in the database, and prints the GRANTs other roles\n"
           "need to record and read.  Running it again changes nothing.\n\n"
           "Usage:\n  pglock init [OPTION]...\n\n");
    cli_opt_help(stdout, init_tables);
    printf("\nExit status: 0 done, 69 server unavailable or not allowed to "
           "create,\n64 usage.\n");
}

/* The version already in the database (0: none), or -1 after an error. */
static int version_found(PGconn *pg)
{
    pglock_error err;
    pglock_error_init(&err, PGLOCK_ERROR_VERSION);
    PGresult *r = cli_query(pg, history_probe_sql, 0, NULL, &err);
    if (PQresultStatus(r) != PGRES_TUPLES_OK) {
        char line[512];
        snprintf(line, sizeof line, "%s", r ? PQresultErrorMessage(r) : err.message);
        line[strcspn(line, "\n")] = '\0';
        PQclear(r);
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", line), -1;
    }
    int v = PQgetisnull(r, 0, 1) ? 0 : atoi(PQgetvalue(r, 0, 1));
    if (PQgetvalue(r, 0, 0)[0] == 't' && v == 0)
        v = -2; /* a table of that name that pglock did not create */
    PQclear(r);
    return v;
}

static int init_database(PGconn *pg)
{
    int found = version_found(pg);
    if (found == -1)
        return CLI_EXIT_UNAVAILABLE;
    if (found == -2 || found > HISTORY_SCHEMA_VERSION)
        return cli_error(CLI_EXIT_UNAVAILABLE, "pglock.runs exists but %s",
                         found == -2 ? "carries no pglock schema version"
                                     : "was created by a newer pglock");
    if (found == 0 || found < HISTORY_SCHEMA_VERSION) {
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
    cli_notice("run history (schema version %d) %s in database \"%s\"",
               HISTORY_SCHEMA_VERSION, found ? "already present" : "created",
               PQdb(pg));
    if (!cli_quiet)
        fputs(history_grants_text, stdout);
    return 0;
}

int cmd_init(int argc, char **argv)
{
    cli_conn conn = {NULL, NULL, NULL, NULL};
    const char *value;
    int id;
    if (cli_help_asked(argc, argv)) {
        usage();
        return 0;
    }
    cli_opt_parser p;
    cli_opt_init(&p, "init", argc, argv, init_tables, 0);
    while ((id = cli_opt_next(&p, &value)) != 0) {
        if (id < 0)
            return -id;
        if (id == 'q')
            cli_quiet = 1;
        else if (id == 'V')
            return cli_print_version(), 0;
        else
            cli_conn_option(&conn, id, value);
    }
    if (optind < argc)
        return cli_usage_error("init", "unexpected argument \"%s\"", argv[optind]);
    pglock_error err;
    pglock_error_init(&err, PGLOCK_ERROR_VERSION);
    PGconn *pg = cli_connect(&conn, "pglock init", NULL, &err);
    if (!pg)
        return cli_connect_error(&err, NULL);
    int rc = init_database(pg);
    PQfinish(pg);
    return rc;
}
