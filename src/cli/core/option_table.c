/*
 * Options declared once, in tables (cli.h, struct cli_opt): the parser and
 * every command's --help are both driven by them, as libgit2's CLI does,
 * so the help cannot drift from what is parsed.  The parsing itself is
 * getopt_long's.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

/* Help descriptions start in this column, everywhere. */
#define HELP_COLUMN 29

const cli_opt cli_conn_opts[] = {
    {0, 0, NULL, 0, NULL,
     "Connection (otherwise libpq's PG* variables and service files apply):"},
    {'h', 'h', "host", CLI_OPT_VALUE, "HOST",
     "database server host or socket directory"},
    {'p', 'p', "port", CLI_OPT_VALUE, "PORT", "database server port"},
    {'U', 'U', "username", CLI_OPT_VALUE, "USER", "database user name"},
    {'d', 'd', "dbname", CLI_OPT_VALUE, "DBNAME",
     "database name, conninfo string or URI"},
    CLI_OPT_END};

const cli_opt cli_keys_opts[] = {
    {0, 0, NULL, 0, NULL, "Key registry:"},
    {CLI_OPT_KEYS, 0, "keys", CLI_OPT_VALUE, "FILE",
     "read @NAME keys, and the names shown for keys,\n"
     "from FILE (default: $PGLOCK_KEYS)"},
    CLI_OPT_END};

const cli_opt cli_output_heading[] = {
    {0, 0, NULL, 0, NULL, "Output:"},
    CLI_OPT_END};

const cli_opt cli_json_opts[] = {
    {CLI_OPT_JSON, 0, "json", CLI_OPT_NO_VALUE, NULL,
     "print one JSON document (schema: the man page)"},
    CLI_OPT_END};

const cli_opt cli_quiet_opts[] = {
    {'q', 'q', "quiet", CLI_OPT_NO_VALUE, NULL, "print errors only"},
    CLI_OPT_END};

const cli_opt cli_verbose_opts[] = {
    {'v', 'v', "verbose", CLI_OPT_NO_VALUE, NULL,
     "print each step with a timestamp on stderr"},
    CLI_OPT_END};

const cli_opt cli_help_opts[] = {
    {0, 0, NULL, 0, NULL, "Other:"},
    {'V', 'V', "version", CLI_OPT_NO_VALUE, NULL,
     "output version information, then exit"},
    {CLI_OPT_HELP, '?', "help", CLI_OPT_NO_VALUE, NULL,
     "show this help, then exit"},
    CLI_OPT_END};

int cli_opt_init(cli_opt_parser *p, const char *command, int argc,
                 char **argv, const cli_opt *const *tables,
                 int stop_at_operand)
{
    memset(p, 0, sizeof *p);
    p->command = command;
    p->argc = argc;
    p->argv = argv;
    p->tables = tables;
    size_t nl = 0, ns = 0;
    /* "+": stop at the first operand (run's KEY: the command's own options
     * are never ours); ":": a missing value is ':', not '?'. */
    if (stop_at_operand)
        p->shorts[ns++] = '+';
    p->shorts[ns++] = ':';
    for (const cli_opt *const *t = tables; *t; t++) {
        for (const cli_opt *o = *t; o->long_name || o->help; o++) {
            if (!o->long_name)
                continue;
            if (nl + 1 >= sizeof p->longopts / sizeof p->longopts[0] ||
                ns + 3 >= sizeof p->shorts)
                return -1;
            p->longopts[nl++] = (struct option){
                o->long_name,
                o->value == CLI_OPT_VALUE      ? required_argument
                : o->value == CLI_OPT_OPTIONAL ? optional_argument
                                               : no_argument,
                NULL, o->id};
            if (o->short_name && o->short_name != '?') {
                p->shorts[ns++] = o->short_name;
                if (o->value == CLI_OPT_VALUE)
                    p->shorts[ns++] = ':';
            }
        }
    }
    /* -? is left out of shorts: getopt then refuses it with optopt '?',
     * which tells it apart from other refusals (cli_opt_next()). */
    cli_getopt_reset();
    return 0;
}

/* The argument getopt_long() was reading when it refused: optind has
 * moved past it once its last character was read, not before ("-55"
 * stops at its first '5').  In getopt_long()'s permuting mode the
 * operands skipped on the way to it lie between p->at and optind, and
 * are no options. */
static const char *refused_arg(const cli_opt_parser *p)
{
    const char *before = p->argv[optind - 1];
    if (optind >= p->argc || (optind > p->at && before[0] == '-' && before[1]))
        return before;
    return p->argv[optind];
}

/* 1 if s is a negative integer as a user would write a key, "-5". */
static int negative_integer(const char *s)
{
    if (s[0] != '-' || !s[1])
        return 0;
    return strspn(s + 1, "0123456789") == strlen(s + 1);
}

/* Prints the usage error for what getopt_long() refused. */
static void refused(const cli_opt_parser *p, int c)
{
    const char *arg = refused_arg(p);
    int is_long = strncmp(arg, "--", 2) == 0;
    char shown[8];
    snprintf(shown, sizeof shown, "-%c", optopt);
    const char *name = is_long ? arg : shown;
    if (c == ':') {
        cli_usage_error(p->command, "option \"%s\" needs a value", name);
        return;
    }
    /* A long option that takes no value, given one, has optopt set. */
    if (is_long && optopt && strchr(arg, '=')) {
        cli_usage_error(p->command, "option \"%s\" takes no value", arg);
        return;
    }
    const char *near = NULL;
    if (is_long) {
        const char *names[sizeof p->longopts / sizeof p->longopts[0]];
        size_t n = 0;
        for (; p->longopts[n].name; n++)
            names[n] = p->longopts[n].name;
        char word[64];
        snprintf(word, sizeof word, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
        near = cli_did_you_mean(word, names, n);
    }
    cli_error(CLI_EXIT_USAGE, "unrecognized option \"%s\"", name);
    if (near)
        cli_hint("Did you mean \"--%s\"?", near);
    else if (!is_long && p->key_operands && optopt >= '0' && optopt <= '9')
        /* a negative key, which no option parser can tell from options */
        cli_hint("A negative key is written int:%s.",
                 negative_integer(arg) ? arg : "-N");
    cli_try_help(p->command);
}

/* The table id of what getopt_long() returned: a long option's is its id
 * already, a short letter's is that of the option whose letter it is (an
 * option's id need not be its letter: terminate's -y is OPT_YES). */
static int id_of_short(const cli_opt_parser *p, int c)
{
    for (const cli_opt *const *t = p->tables; *t; t++)
        for (const cli_opt *o = *t; o->long_name || o->help; o++)
            if (o->long_name && o->short_name == c)
                return o->id;
    return c;
}

int cli_opt_next(cli_opt_parser *p, const char **value)
{
    p->at = optind > 0 ? optind : 1; /* glibc's 0: start again at 1 */
    int c = getopt_long(p->argc, p->argv, p->shorts, p->longopts, NULL);
    *value = optarg;
    if (c == -1)
        return CLI_OPT_DONE;
    if (c == '?' && optopt == '?')
        return CLI_OPT_HELP; /* -? */
    if (c == '?' || c == ':') {
        refused(p, c);
        return CLI_OPT_REFUSED;
    }
    return id_of_short(p, c);
}

/* Prints "  -x, --name=VALUE" padded to HELP_COLUMN, then the help, whose
 * '\n'-separated lines continue in that column. */
static void print_option(FILE *out, const cli_opt *o)
{
    char left[64], sh[8] = "    ";
    const char *help = o->help;
    if (o->short_name)
        snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    snprintf(left, sizeof left, "  %s--%s%s%s%s", sh, o->long_name,
             o->value == CLI_OPT_OPTIONAL ? "[=" : o->value ? "=" : "",
             o->value_name && o->value ? o->value_name : "",
             o->value == CLI_OPT_OPTIONAL ? "]" : "");
    int len = fprintf(out, "%s", left);
    for (;;) {
        size_t n = strcspn(help, "\n");
        if (len >= HELP_COLUMN) {
            fputc('\n', out);
            len = 0;
        }
        fprintf(out, "%*s%.*s\n", HELP_COLUMN - len, "", (int)n, help);
        len = 0;
        if (!help[n])
            break;
        help += n + 1;
    }
}

void cli_opt_help(FILE *out, const cli_opt *const *tables)
{
    for (const cli_opt *const *t = tables; *t; t++)
        for (const cli_opt *o = *t; o->long_name || o->help; o++) {
            if (!o->long_name)
                fprintf(out, "%s\n", o->help);
            else if (o->help)
                print_option(out, o);
        }
}

int cli_opt_start(cli_opt_parser *p, const char *command, int argc,
                  char **argv, const cli_opt *const *tables,
                  void (*print_help)(void))
{
    if (cli_help_asked(argc, argv)) {
        print_help();
        return 0;
    }
    cli_opt_init(p, command, argc, argv, tables, 0);
    return CLI_GO_ON;
}
