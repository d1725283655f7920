/*
 * The options that `pglock run` and `pglock lead` share, and the parser
 * and --help both commands use with their own options added (cmd_run.c,
 * cmd_lead.c); the operands (KEY, then -- COMMAND or -c STRING).
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "run.h"

CLI_COMMON_FIRST(run_args);
/* (-s and --mode set them as ints) */
_Static_assert(sizeof(pglock_mode) == sizeof(int) &&
                   sizeof(pglock_lifetime) == sizeof(int),
               "enum fields are ints");

static const cli_opt_choice lifetimes[] = {{"session", PGLOCK_LIFETIME_SESSION},
                                           {"xact", PGLOCK_LIFETIME_XACT},
                                           {"auto", PGLOCK_LIFETIME_AUTO},
                                           {NULL, 0}};

/* After the command's own options (its table has the group heading). */
static const cli_opt lease_opts[] = {
    {.type = CLI_OPT_SET,
     .short_name = 's',
     .long_name = "shared",
     .field = offsetof(run_args, mode),
     .set = PGLOCK_SHARED,
     .help = "take a shared lock instead of an exclusive one"},
    {.type = CLI_OPT_DURATION,
     .long_name = "lease",
     .field = offsetof(run_args, lease_ms),
     .value_name = "DURATION",
     .help = "the server frees the lock this long after pglock\n"
             "goes silent; the command is stopped before\n"
             "(default 20s)"},
    {.type = CLI_OPT_DURATION,
     .long_name = "kill-after",
     .field = offsetof(run_args, kill_after_ms),
     .value_name = "DURATION",
     .help = "grace between SIGTERM and SIGKILL when the\n"
             "command must stop (at most lease / 6;\n"
             "default: that, capped at 10s)"},
    {.type = CLI_OPT_INT,
     .long_name = "lost-exit-code",
     .field = offsetof(run_args, lost_code),
     .value_name = "N",
     .min = 0,
     .max = 255,
     .help = "exit status when the lock was lost (default 74)"},
    {.type = CLI_OPT_CHOICE,
     .long_name = "mode",
     .field = offsetof(run_args, lifetime),
     .value_name = "MODE",
     .choices = lifetimes,
     .help = "session, xact (hold the lock in a transaction, for\n"
             "PgBouncer in transaction mode) or auto (default:\n"
             "xact behind a pooler, else session)"},
    {.type = CLI_OPT_END}};

static const cli_opt command_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Command:"},
    {.type = CLI_OPT_STRING,
     .short_name = 'c',
     .long_name = "command",
     .field = offsetof(run_args, shell_command),
     .value_name = "STRING",
     .help = "run STRING with /bin/sh -c"},
    {.type = CLI_OPT_FLAG,
     .long_name = "foreground",
     .field = offsetof(run_args, foreground),
     .help = "keep the command in pglock's process group, so\n"
             "that it can read the terminal (see pglock-run(1))"},
    {.type = CLI_OPT_FLAG,
     .long_name = "allow-setuid",
     .field = offsetof(run_args, allow_setuid),
     .help = "let the command gain privileges (sudo, setuid\n"
             "programs); pglock may then be unable to stop it\n"
             "in time (see pglock-run(1))"},
    {.type = CLI_OPT_END}};

void run_args_init(run_args *a, const run_command *cmd)
{
    memset(a, 0, sizeof *a);
    a->cmd = cmd;
    a->command = cmd->name;
    a->mode = PGLOCK_EXCLUSIVE;
    a->timeout_ms = PGLOCK_WAIT_FOREVER;
    a->lease_ms = RUN_LEASE_DEFAULT_MS;
    a->kill_after_ms = -1;
    a->conflict_code = CLI_EXIT_CONFLICT;
    a->lost_code = CLI_EXIT_LOST;
    a->lifetime = PGLOCK_LIFETIME_AUTO;
    a->restart_ms = -1;
}

/* Every table, in --help's order. */
#define N_TABLES 10
static void tables_of(const run_command *cmd, const cli_opt *t[N_TABLES + 1])
{
    int n = 0;
    t[n++] = cmd->opts;
    t[n++] = lease_opts;
    t[n++] = command_opts;
    t[n++] = cli_keys_opts;
    t[n++] = cli_conn_opts;
    t[n++] = run_record_opts;
    t[n++] = cli_output_heading;
    t[n++] = cli_quiet_opts;
    t[n++] = cli_verbose_opts;
    t[n++] = cli_help_opts;
    t[n] = NULL;
}

static void print_help(const cli_common *target)
{
    const run_command *cmd = ((const run_args *)target)->cmd;
    const cli_opt *t[N_TABLES + 1];
    tables_of(cmd, t);
    const char *keys = cmd->several_keys ? "KEY..." : "KEY";
    printf("%s\n\nUsage:\n"
           "  pglock %s [OPTION]... %s -- COMMAND [ARG]...\n"
           "  pglock %s [OPTION]... %s -c STRING\n\n",
           cmd->summary, cmd->name, keys, cmd->name, keys);
    cli_opt_help(stdout, t);
    printf(
        "\nKEY: 123, int:-5, 42:9, nightly-billing, text:123, @NAME.\n"
        "DURATION: 500ms, 1.5s, 5m, 2h or plain seconds.\n"
        "(Both in full: pglock(1), KEYS and DURATIONS, and docs/keys.md.)\n%s"
        "See pglock-%s(1).\n",
        cmd->epilogue, cmd->name);
}

static int ends_keys(const char *arg)
{
    return strcmp(arg, "--") == 0 || strcmp(arg, "-c") == 0 ||
           strcmp(arg, "--command") == 0 || strncmp(arg, "--command=", 10) == 0;
}

/* KEY... from argv[*at] up to "--" or -c, which must follow them: "run
 * K1 K2 true" would otherwise lock K1 and K2 and run "true", or lock K1
 * and run "K2" (an older form, dropped), and a forgotten "--" changes
 * what is locked.  CLI_GO_ON with *at past the keys, else the exit
 * status. */
static cli_step parse_keys(int argc, char **argv, int *at, run_args *a)
{
    int first = *at, end = first;
    while (end < argc && !ends_keys(argv[end]))
        end++;
    if (end == argc && end > first + 1)
        return cli_usage_error(
            a->command,
            "no \"--\" after the key: write pglock %s "
            "[OPTION]... KEY -- COMMAND [ARG]..., or -c STRING",
            a->command);
    for (int i = first; i < end; i++) {
        if (i > first && argv[i][0] == '-')
            return cli_usage_error(a->command,
                                   "option \"%s\" after the key: options "
                                   "go before KEY, the command after \"--\"",
                                   argv[i]);
        if (a->nkeys == RUN_MAX_KEYS)
            return cli_usage_error(a->command, "too many keys (at most %d)",
                                   RUN_MAX_KEYS);
        a->keys[a->nkeys++] = argv[i];
    }
    if (a->nkeys > 1 && !a->cmd->several_keys)
        return cli_usage_error(a->command,
                               "%s takes one key, \"%s\" is a second "
                               "one (the command goes after \"--\")",
                               a->command, a->keys[1]);
    a->key_text = a->keys[0];
    *at = end;
    return CLI_GO_ON;
}

/* -c STRING (or --command[=STRING]) at argv[*at], after the keys: it
 * ends the arguments.  CLI_GO_ON, else the exit status. */
static cli_step parse_late_command(int argc, char **argv, int at, run_args *a)
{
    const char *command_name = a->command, *arg = argv[at];
    int inline_value = strncmp(arg, "--command=", 10) == 0;
    if (!inline_value && at + 1 >= argc)
        return cli_usage_error(command_name, "option \"%s\" needs a value",
                               arg);
    if (a->shell_command)
        return cli_usage_error(command_name, "-c given twice");
    a->shell_command = inline_value ? arg + 10 : argv[at + 1];
    at += inline_value ? 1 : 2;
    if (at < argc)
        return cli_usage_error(command_name,
                               "unexpected argument \"%s\" after -c STRING",
                               argv[at]);
    return CLI_GO_ON;
}

/* What follows the keys at argv[at]: "--" and the command, or -c
 * STRING.  CLI_GO_ON, else the exit status. */
static cli_step parse_command(int argc, char **argv, int at, run_args *a)
{
    const char *command_name = a->command;
    if (at < argc && strcmp(argv[at], "--") == 0)
        at++;
    else if (at < argc && ends_keys(argv[at]))
        return parse_late_command(argc, argv, at, a);
    else if (at < argc && argv[at][0] == '-')
        return cli_usage_error(
            command_name,
            "option \"%s\" after the key: options go before KEY, "
            "the command after \"--\"",
            argv[at]);
    if (at < argc) {
        if (a->shell_command)
            return cli_usage_error(command_name,
                                   "both -c STRING and a command given");
        a->argv = argv + at;
    } else if (!a->shell_command) {
        return cli_usage_error(command_name, "no command given");
    }
    return CLI_GO_ON;
}

cli_step run_parse_args(int argc, char **argv, run_args *a)
{
    const char *command_name = a->command;
    const cli_opt *t[N_TABLES + 1];
    tables_of(a->cmd, t);
    const cli_opt_command command = {command_name, t, print_help,
                                     CLI_OPT_STOP_AT_OPERAND |
                                         CLI_OPT_KEY_OPERANDS};
    int at;
    cli_step step = cli_opt_parse(&command, argc, argv, &a->common, &at);
    if (step != CLI_GO_ON)
        return step;
    if ((step = run_record_env(a)) != CLI_GO_ON)
        return step;
    /* getopt_long() consumed a "--" before any key: "run -- echo hi"
     * must not lock "echo". */
    if (at > 1 && strcmp(argv[at - 1], "--") == 0)
        return cli_usage_error(command_name, "no lock key before \"--\"");
    if (at >= argc)
        return cli_usage_error(command_name, "no lock key given");
    if ((step = parse_keys(argc, argv, &at, a)) != CLI_GO_ON)
        return step;
    return parse_command(argc, argv, at, a);
}
