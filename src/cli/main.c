/*
 * pglock — the command table.  Each subcommand lives in its own file,
 * cmd_NAME.c, in the folder of its feature (run/, status/, history/,
 * doctor/) or beside this one, and is called with argv[0] = its name.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"

typedef struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *summary;
    const char *usage; /* its Usage lines' arguments, '\n' between forms */
} command;

static const command commands[] = {
    {"run", cmd_run, "run a command while holding a lock",
     "[OPTION]... KEY... -- COMMAND [ARG]...\n[OPTION]... KEY... -c STRING"},
    {"lead", cmd_lead, "run a command whenever this host is the leader",
     "[OPTION]... KEY -- COMMAND [ARG]..."},
    {"status", cmd_status, "show who holds and who waits, by name",
     "[OPTION]... [KEY]..."},
    {"key", cmd_key, "show how a key maps to bigint, pg_locks and SQL",
     "[OPTION]... KEY..."},
    {"doctor", cmd_doctor, "check the server and the path to it",
     "[OPTION]..."},
    {"init", cmd_init, "create the run history (pglock.runs) in a database",
     "[OPTION]..."},
    {"history", cmd_history, "show recorded runs, newest first",
     "[OPTION]... [KEY]..."},
    {"check", cmd_check, "monitoring plugin: did KEY's job run lately?",
     "[OPTION]... KEY --within=AGE"},
    {"metrics", cmd_metrics, "locks and runs as Prometheus metrics",
     "[OPTION]..."},
    {"terminate", cmd_terminate,
     "end the session holding a lock, after saying who", "[OPTION]... KEY"},
};

#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* The Usage and Commands lines come from the table, in columns as wide as
 * its longest name, so that a new command cannot be left out of either. */
static void print_help(void)
{
    int width = 0;
    for (size_t i = 0; i < N_COMMANDS; i++)
        if ((int)strlen(commands[i].name) > width)
            width = (int)strlen(commands[i].name);
    printf("pglock runs commands under PostgreSQL advisory locks.\n\n"
           "Usage:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        for (const char *u = commands[i].usage; *u;) {
            int n = (int)strcspn(u, "\n");
            printf("  pglock %-*s %.*s\n", width, commands[i].name, n, u);
            u += n + (u[n] == '\n');
        }
    printf("\nCommands:\n");
    for (size_t i = 0; i < N_COMMANDS; i++)
        printf("  %-*s  %s\n", width, commands[i].name, commands[i].summary);
    printf(
        "\nOptions:\n"
        "  -V, --version  output version information, then exit\n"
        "  -?, --help     show this help, then exit\n\n"
        "\"pglock COMMAND --help\" describes each command, pglock-COMMAND(1)\n"
        "in full.  See pglock(1) for keys, durations, exit codes and guarantees.\n");
}

/* stdout must really have been written: a full disk is an error.  And a
 * command returns an exit status, never CLI_GO_ON or another value
 * outside 0..255, which the shell would see cut to its low byte (256 as
 * 0, a success). */
static int finish_stdout(int code)
{
    if (code < 0 || code > 255)
        return cli_error(CLI_EXIT_SOFTWARE, "internal error: exit status %d",
                         code);
    if (fflush(stdout) != 0 || ferror(stdout))
        return cli_error(CLI_EXIT_SOFTWARE,
                         "could not write to standard output");
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
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(arg, commands[i].name) == 0)
            return finish_stdout(commands[i].fn(argc - 1, argv + 1));
    if (arg[0] == '-')
        return cli_usage_error(NULL, "unrecognized option \"%s\"", arg);
    const char *names[N_COMMANDS];
    for (size_t i = 0; i < N_COMMANDS; i++)
        names[i] = commands[i].name;
    const char *near = cli_did_you_mean(arg, names,
                                        sizeof names / sizeof names[0]);
    cli_error(CLI_EXIT_USAGE, "unrecognized command \"%s\"", arg);
    if (near)
        cli_hint("Did you mean \"pglock %s\"?", near);
    return cli_try_help(NULL);
}
