/*
 * pglock — the command table.  Each subcommand lives in its own file
 * (src/cli/cmd_NAME.c or NAME.c) and is called with argv[0] = its name.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
} command;

static const command commands[] = {
    {"run", cmd_run, "run a command while holding a lock"},
    {"lead", cmd_lead, "run a command whenever this host is the leader"},
    {"status", cmd_status, "show who holds and who waits, by name"},
    {"key", cmd_key, "show how a key maps to bigint, pg_locks and SQL"},
    {"doctor", cmd_doctor, "check the server and the path to it"},
    {"init", cmd_init, "create the run history (pglock.runs) in a database"},
    {"history", cmd_history, "show recorded runs, newest first"},
    {"check", cmd_check, "monitoring plugin: did KEY's job run lately?"},
    {"metrics", cmd_metrics, "locks and runs as Prometheus metrics"},
    {"terminate", cmd_terminate, "end the session holding a lock, after saying who"},
};

static void print_help(void)
{
    printf("pglock runs commands under PostgreSQL advisory locks.\n\n"
           "Usage:\n"
           "  pglock run    [OPTION]... KEY -- COMMAND [ARG]...\n"
           "  pglock run    [OPTION]... KEY -c STRING\n"
           "  pglock lead   [OPTION]... KEY -- COMMAND [ARG]...\n"
           "  pglock status [OPTION]... [KEY]...\n"
           "  pglock key    KEY...\n"
           "  pglock doctor [OPTION]...\n"
           "  pglock init   [OPTION]...\n"
           "  pglock history [OPTION]... [KEY]...\n"
           "  pglock check  [OPTION]... KEY --within=AGE\n"
           "  pglock metrics [OPTION]...\n\n"
           "Commands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        printf("  %-8s %s\n", commands[i].name, commands[i].summary);
    printf("\nOptions:\n"
           "  -V, --version  output version information, then exit\n"
           "  -?, --help     show this help, then exit\n\n"
           "\"pglock COMMAND --help\" describes each command.\n"
           "See pglock(1) for keys, durations, exit codes and guarantees.\n");
}

/* stdout must really have been written: a full disk is an error. */
static int finish_stdout(int code)
{
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_error(CLI_EXIT_SOFTWARE, "could not write to standard output");
    return code;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return cli_usage_error(NULL, "no command given");
    const char *arg = argv[1];
    if (strcmp(arg, "--help") == 0 || strcmp(arg, "-?") == 0 ||
        strcmp(arg, "help") == 0) {
        print_help();
        return finish_stdout(0);
    }
    if (strcmp(arg, "--version") == 0 || strcmp(arg, "-V") == 0) {
        cli_print_version();
        return finish_stdout(0);
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(arg, commands[i].name) == 0)
            return finish_stdout(commands[i].fn(argc - 1, argv + 1));
    if (arg[0] == '-')
        return cli_usage_error(NULL, "unrecognized option \"%s\"", arg);
    const char *names[sizeof commands / sizeof commands[0]];
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        names[i] = commands[i].name;
    const char *near = cli_did_you_mean(arg, names, sizeof names / sizeof names[0]);
    cli_error(CLI_EXIT_USAGE, "unrecognized command \"%s\"", arg);
    if (near)
        cli_hint("Did you mean \"pglock %s\"?", near);
    return cli_try_help(NULL);
}
