/*
 * The options of `pglock run` and `pglock lead`: their --help, defaults
 * and parser.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "run.h"

void run_args_init(run_args *a, const char *command, void (*help)(void))
{
    memset(a, 0, sizeof *a);
    a->command = command;
    a->help = help;
    a->mode = PGLOCK_EXCLUSIVE;
    a->timeout_ms = PGLOCK_WAIT_FOREVER;
    a->lease_ms = RUN_LEASE_DEFAULT_MS;
    a->kill_after_ms = -1;
    a->conflict_code = CLI_EXIT_CONFLICT;
    a->lost_code = CLI_EXIT_LOST;
    a->hold = PGLOCK_HOLD_AUTO;
    a->restart_ms = -1;
}

static void print_help(void)
{
    printf(
"pglock run runs a command while holding a PostgreSQL advisory lock.\n\n"
"Usage:\n"
"  pglock run [OPTION]... KEY -- COMMAND [ARG]...\n"
"  pglock run [OPTION]... KEY -c STRING\n\n"
"Locking:\n"
"  -n, --try                  do not wait: if the lock is held, exit 75\n"
"  -w, --wait=DURATION        wait at most DURATION, then exit 75\n"
"                             (default: wait as long as it takes)\n"
"  -s, --shared               take a shared lock instead of an exclusive one\n"
RUN_HELP_LEASE
"      --min-hold=DURATION    keep the lock at least this long from acquisition\n"
"      --conflict-exit-code=N exit status when busy or timed out (default 75)\n"
"      --lost-exit-code=N     exit status when the lock was lost (default 74)\n"
"      --fencing-token        give the command PGLOCK_FENCING_TOKEN, a number\n"
"                             that grows with each acquisition (costs a WAL\n"
"                             flush; behind a pooler, a second connection)\n"
"      --mode=MODE            session, xact (hold the lock in a transaction, for\n"
"                             PgBouncer in transaction mode) or auto (default:\n"
"                             xact behind a pooler, else session)\n"
"Command:\n"
"  -c, --command=STRING       run STRING with /bin/sh -c\n"
"      --foreground           keep the command in pglock's process group, so\n"
"                             that it can read the terminal (see pglock(1))\n"
RUN_HELP_CONNECTION
"Output:\n"
"  -q, --quiet                print errors only\n"
"  -v, --verbose              print each step with a timestamp on stderr\n"
RUN_HELP_VERSION_HELP
"KEY: 123, int:-5, 42:9, nightly-billing, text:123, @NAME (see pglock(1)).\n"
"DURATION: 500ms, 30s, 5m, 2h or plain seconds.\n"
"Exit status: the command's (128+N if killed by signal N), 126/127 if it\n"
"could not be run, 75 busy, 74 lock lost, 69 server unavailable, 64 usage.\n");
}

enum {
    OPT_LEASE = 256,
    OPT_KILL_AFTER,
    OPT_MIN_HOLD,
    OPT_CONFLICT,
    OPT_LOST,
    OPT_KEYS,
    OPT_FOREGROUND,
    OPT_MODE,
    OPT_RESTART,
    OPT_FENCING_TOKEN
};

static int parse_duration_opt(const char *command, const char *name,
                              const char *text, long *out)
{
    char err[256];
    if (cli_parse_duration(text, out, err, sizeof err) < 0)
        return cli_usage_error(command, "invalid value for %s: %s", name, err);
    return 0;
}

static int parse_exit_code(const char *command, const char *name,
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
    return 0;
}

int run_parse_args(int argc, char **argv, run_args *a)
{
    const char *command_name = a->command;
    static const struct option longopts[] = {
        {"try", no_argument, NULL, 'n'},
        {"wait", required_argument, NULL, 'w'},
        {"shared", no_argument, NULL, 's'},
        {"lease", required_argument, NULL, OPT_LEASE},
        {"kill-after", required_argument, NULL, OPT_KILL_AFTER},
        {"min-hold", required_argument, NULL, OPT_MIN_HOLD},
        {"conflict-exit-code", required_argument, NULL, OPT_CONFLICT},
        {"lost-exit-code", required_argument, NULL, OPT_LOST},
        {"command", required_argument, NULL, 'c'},
        {"foreground", no_argument, NULL, OPT_FOREGROUND},
        {"mode", required_argument, NULL, OPT_MODE},
        {"restart", optional_argument, NULL, OPT_RESTART},
        {"fencing-token", no_argument, NULL, OPT_FENCING_TOKEN},
        CLI_CONN_LONGOPTS,
        {"keys", required_argument, NULL, OPT_KEYS},
        {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},
        {"version", no_argument, NULL, 'V'},
        {"help", no_argument, NULL, '?'},
        {NULL, 0, NULL, 0}};
    int saw_try = 0, saw_wait = 0;
    int c, rc;
    opterr = 0;
    optind = 1;
    /* "+": stop at the first non-option (KEY), so that the command's own
     * options are never ours; ":" so that a missing argument is ':'. */
    while ((c = getopt_long(argc, argv, "+:nw:sc:h:p:U:d:qvV?", longopts,
                            NULL)) != -1) {
        switch (c) {
        case 'n':
            saw_try = 1;
            a->timeout_ms = PGLOCK_TRY;
            break;
        case 'w':
            if ((rc = parse_duration_opt(command_name, "--wait", optarg, &a->timeout_ms)))
                return rc;
            /* the library takes waits up to INT_MAX ms: say so here, before
             * connecting, rather than fail the lock call */
            if (a->timeout_ms > INT_MAX)
                return cli_usage_error(command_name, "invalid value for --wait: \"%s\" is "
                                       "out of range (at most 24 days)", optarg);
            saw_wait = 1;
            break;
        case 's':
            a->mode = PGLOCK_SHARED;
            break;
        case OPT_LEASE:
            if ((rc = parse_duration_opt(command_name, "--lease", optarg, &a->lease_ms)))
                return rc;
            break;
        case OPT_KILL_AFTER:
            if ((rc = parse_duration_opt(command_name, "--kill-after", optarg, &a->kill_after_ms)))
                return rc;
            break;
        case OPT_MIN_HOLD:
            if ((rc = parse_duration_opt(command_name, "--min-hold", optarg, &a->min_hold_ms)))
                return rc;
            break;
        case OPT_CONFLICT:
            if ((rc = parse_exit_code(command_name, "--conflict-exit-code", optarg, &a->conflict_code)))
                return rc;
            break;
        case OPT_LOST:
            if ((rc = parse_exit_code(command_name, "--lost-exit-code", optarg, &a->lost_code)))
                return rc;
            break;
        case 'c':
            a->shell_command = optarg;
            break;
        case OPT_FOREGROUND:
            a->foreground = 1;
            break;
        case OPT_MODE:
            if (strcmp(optarg, "session") == 0)
                a->hold = PGLOCK_HOLD_SESSION;
            else if (strcmp(optarg, "xact") == 0)
                a->hold = PGLOCK_HOLD_XACT;
            else if (strcmp(optarg, "auto") == 0)
                a->hold = PGLOCK_HOLD_AUTO;
            else
                return cli_usage_error(command_name, "invalid value for --mode: "
                                       "\"%s\" (expected session, xact or auto)",
                                       optarg);
            break;
        case OPT_RESTART:
            if (strcmp(command_name, "lead") != 0)
                return cli_usage_error(command_name, "unrecognized option \"%s\"",
                                       argv[optind - 1]);
            a->restart_ms = 0;
            if (optarg && (rc = parse_duration_opt(command_name, "--restart", optarg, &a->restart_ms)))
                return rc;
            break;
        case OPT_KEYS:
            a->keys_file = optarg;
            break;
        case OPT_FENCING_TOKEN:
            a->fencing_token = 1;
            break;
        case 'q':
            cli_quiet = 1;
            break;
        case 'v':
            cli_verbosity++;
            break;
        case 'V':
            printf("pglock %s\n", PGLOCK_VERSION);
            return 0;
        case ':':
            return cli_usage_error(command_name, "option \"%s\" needs a value",
                                   argv[optind - 1]);
        case '?':
            if ((optopt == 0 && strcmp(argv[optind - 1], "--help") == 0) ||
                optopt == '?' || strcmp(argv[optind - 1], "-?") == 0) {
                (a->help ? a->help : print_help)();
                return 0;
            }
            if (optopt)
                return cli_usage_error(command_name, "unrecognized option \"-%c\"", optopt);
            return cli_usage_error(command_name, "unrecognized option \"%s\"", argv[optind - 1]);
        default:
            if (cli_conn_option(&a->conn, c, optarg))
                break;
            return cli_usage_error(command_name, "unrecognized option \"%s\"", argv[optind - 1]);
        }
    }
    /* "Do not wait" and "wait up to" contradict each other: say so rather
     * than let the last one silently win. */
    if (saw_try && saw_wait)
        return cli_usage_error(command_name, "--try and --wait cannot be used together");
    if (optind >= argc)
        return cli_usage_error(command_name, "no lock key given");
    a->key_text = argv[optind++];
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
    return -1;
}
