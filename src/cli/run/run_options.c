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

enum {
    OPT_LEASE = 256,
    OPT_KILL_AFTER,
    OPT_LOST,
    OPT_FOREGROUND,
    OPT_MODE,
    OPT_ALLOW_SETUID
};

/* After the command's own options (its table has the group heading). */
static const cli_opt lease_opts[] = {
    {'s', 's', "shared", CLI_OPT_NO_VALUE, NULL,
     "take a shared lock instead of an exclusive one"},
    {OPT_LEASE, 0, "lease", CLI_OPT_VALUE, "DURATION",
     "the server frees the lock this long after pglock\n"
     "goes silent; the command is stopped before\n"
     "(default 30s)"},
    {OPT_KILL_AFTER, 0, "kill-after", CLI_OPT_VALUE, "DURATION",
     "grace between SIGTERM and SIGKILL when the\n"
     "command must stop (at most lease / 6;\n"
     "default: that, capped at 10s)"},
    {OPT_LOST, 0, "lost-exit-code", CLI_OPT_VALUE, "N",
     "exit status when the lock was lost (default 74)"},
    {OPT_MODE, 0, "mode", CLI_OPT_VALUE, "MODE",
     "session, xact (hold the lock in a transaction, for\n"
     "PgBouncer in transaction mode) or auto (default:\n"
     "xact behind a pooler, else session)"},
    CLI_OPT_END};

static const cli_opt command_opts[] = {
    {0, 0, NULL, 0, NULL, "Command:"},
    {'c', 'c', "command", CLI_OPT_VALUE, "STRING",
     "run STRING with /bin/sh -c"},
    {OPT_FOREGROUND, 0, "foreground", CLI_OPT_NO_VALUE, NULL,
     "keep the command in pglock's process group, so\n"
     "that it can read the terminal (see pglock-run(1))"},
    {OPT_ALLOW_SETUID, 0, "allow-setuid", CLI_OPT_NO_VALUE, NULL,
     "let the command gain privileges (sudo, setuid\n"
     "programs); pglock may then be unable to stop it\n"
     "in time (see pglock-run(1))"},
    CLI_OPT_END};

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

void run_print_help(const run_command *cmd)
{
    const cli_opt *t[N_TABLES + 1];
    tables_of(cmd, t);
    const char *keys = cmd->several_keys ? "KEY..." : "KEY";
    printf("%s\n\nUsage:\n"
           "  pglock %s [OPTION]... %s -- COMMAND [ARG]...\n"
           "  pglock %s [OPTION]... %s -c STRING\n\n",
           cmd->summary, cmd->name, keys, cmd->name, keys);
    cli_opt_help(stdout, t);
    printf("\nKEY: 123, int:-5, 42:9, nightly-billing, text:123, @NAME.\n"
           "DURATION: 500ms, 1.5s, 5m, 2h or plain seconds.\n"
           "(Both in full: pglock(1), KEYS and DURATIONS, and docs/keys.md.)\n%s"
           "See pglock-%s(1).\n", cmd->epilogue, cmd->name);
}

int run_duration_option(const char *command, const char *name,
                        const char *text, long *out)
{
    char err[256];
    if (cli_parse_duration(text, out, err, sizeof err) < 0)
        return cli_usage_error(command, "invalid value for %s: %s", name, err);
    return CLI_GO_ON;
}

int run_exit_code_option(const char *command, const char *name,
                         const char *text, int *out)
{
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || end == text || *end || v < 0 || v > 255 ||
        text[0] == '+' || text[0] == ' ')
        return cli_usage_error(command, "invalid value for %s: \"%s\" (expected 0 to 255)",
                               name, text);
    *out = (int)v;
    return CLI_GO_ON;
}

/* One of the shared options: CLI_GO_ON, else an exit status. */
static int shared_option(run_args *a, int id, const char *value)
{
    const char *command = a->command;
    switch (id) {
    case 's':
        a->mode = PGLOCK_SHARED;
        return CLI_GO_ON;
    case OPT_LEASE:
        return run_duration_option(command, "--lease", value, &a->lease_ms);
    case OPT_KILL_AFTER:
        return run_duration_option(command, "--kill-after", value, &a->kill_after_ms);
    case OPT_LOST:
        return run_exit_code_option(command, "--lost-exit-code", value, &a->lost_code);
    case OPT_MODE:
        if (strcmp(value, "session") == 0)
            a->lifetime = PGLOCK_LIFETIME_SESSION;
        else if (strcmp(value, "xact") == 0)
            a->lifetime = PGLOCK_LIFETIME_XACT;
        else if (strcmp(value, "auto") == 0)
            a->lifetime = PGLOCK_LIFETIME_AUTO;
        else
            return cli_usage_error(command, "invalid value for --mode: "
                                   "\"%s\" (expected session, xact or auto)", value);
        return CLI_GO_ON;
    case 'c':
        a->shell_command = value;
        return CLI_GO_ON;
    case OPT_FOREGROUND:
        a->foreground = 1;
        return CLI_GO_ON;
    case OPT_ALLOW_SETUID:
        a->allow_setuid = 1;
        return CLI_GO_ON;
    case CLI_OPT_KEYS:
        a->keys_file = value;
        return CLI_GO_ON;
    case 'q':
        cli_quiet = 1;
        return CLI_GO_ON;
    case 'v':
        cli_verbosity++;
        return CLI_GO_ON;
    case 'V':
        cli_print_version();
        return 0;
    case CLI_OPT_HELP:
        run_print_help(a->cmd);
        return 0;
    default:
        cli_conn_option(&a->conn, id, value);
        return CLI_GO_ON;
    }
}

static int ends_keys(const char *arg)
{
    return strcmp(arg, "--") == 0 || strcmp(arg, "-c") == 0 ||
           strcmp(arg, "--command") == 0 || strncmp(arg, "--command=", 10) == 0;
}

/* KEY... up to "--" or -c, which must follow them: "run K1 K2 true"
 * would otherwise lock K1 and K2 and run "true", or lock K1 and run "K2"
 * (an older form, dropped), and a forgotten "--" changes what is locked.
 * CLI_GO_ON, else the exit status. */
static int parse_keys(int argc, char **argv, run_args *a)
{
    int end = optind;
    while (end < argc && !ends_keys(argv[end]))
        end++;
    if (end == argc && end > optind + 1)
        return cli_usage_error(a->command, "no \"--\" after the key: write pglock %s "
                               "[OPTION]... KEY -- COMMAND [ARG]..., or -c STRING",
                               a->command);
    for (int i = optind; i < end; i++) {
        if (i > optind && argv[i][0] == '-')
            return cli_usage_error(a->command, "option \"%s\" after the key: options "
                                   "go before KEY, the command after \"--\"", argv[i]);
        if (a->nkeys == RUN_MAX_KEYS)
            return cli_usage_error(a->command, "too many keys (at most %d)",
                                   RUN_MAX_KEYS);
        a->keys[a->nkeys++] = argv[i];
    }
    if (a->nkeys > 1 && !a->cmd->several_keys)
        return cli_usage_error(a->command, "%s takes one key, \"%s\" is a second "
                               "one (the command goes after \"--\")", a->command,
                               a->keys[1]);
    a->key_text = a->keys[0];
    optind = end;
    return CLI_GO_ON;
}

int run_parse_args(int argc, char **argv, run_args *a)
{
    const char *command_name = a->command;
    const cli_opt *t[N_TABLES + 1];
    tables_of(a->cmd, t);
    cli_opt_parser p;
    if (cli_opt_init(&p, command_name, argc, argv, t, 1) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "too many options");
    p.key_operands = 1;
    const char *value;
    int id, rc;
    while ((id = cli_opt_next(&p, &value)) != CLI_OPT_DONE) {
        if (id == CLI_OPT_REFUSED)
            return CLI_EXIT_USAGE;
        rc = a->cmd->option(a, id, value);
        if (rc == CLI_OPT_NOT_MINE)
            rc = run_record_option(a, id, value);
        if (rc == CLI_OPT_NOT_MINE)
            rc = shared_option(a, id, value);
        if (rc != CLI_GO_ON)
            return rc;
    }
    if ((rc = run_record_env(a)) != CLI_GO_ON)
        return rc;
    /* getopt_long() consumed a "--" before any key: "run -- echo hi"
     * must not lock "echo". */
    if (optind > 1 && strcmp(argv[optind - 1], "--") == 0)
        return cli_usage_error(command_name, "no lock key before \"--\"");
    if (optind >= argc)
        return cli_usage_error(command_name, "no lock key given");
    if ((rc = parse_keys(argc, argv, a)) != CLI_GO_ON)
        return rc;
    if (optind < argc && strcmp(argv[optind], "--") == 0) {
        optind++;
    } else if (optind < argc && (strcmp(argv[optind], "-c") == 0 ||
                                 strcmp(argv[optind], "--command") == 0)) {
        if (optind + 1 >= argc)
            return cli_usage_error(command_name, "option \"%s\" needs a value", argv[optind]);
        if (a->shell_command)
            return cli_usage_error(command_name, "-c given twice");
        a->shell_command = argv[optind + 1];
        optind += 2;
        if (optind < argc)
            return cli_usage_error(command_name, "unexpected argument \"%s\" after -c STRING",
                                   argv[optind]);
    } else if (optind < argc && strncmp(argv[optind], "--command=", 10) == 0) {
        if (a->shell_command)
            return cli_usage_error(command_name, "-c given twice");
        a->shell_command = argv[optind] + 10;
        if (++optind < argc)
            return cli_usage_error(command_name, "unexpected argument \"%s\" after -c STRING",
                                   argv[optind]);
    } else if (optind < argc && argv[optind][0] == '-') {
        return cli_usage_error(command_name, "option \"%s\" after the key: options go before KEY, "
                               "the command after \"--\"", argv[optind]);
    }
    if (optind < argc) {
        if (a->shell_command)
            return cli_usage_error(command_name, "both -c STRING and a command given");
        a->argv = argv + optind;
    } else if (!a->shell_command) {
        return cli_usage_error(command_name, "no command given");
    }
    return CLI_GO_ON;
}
