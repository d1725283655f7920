/*
 * The options every command shares, each declared once (cli.h, struct
 * cli_opt), and --help's layout of any command's tables: the same
 * entries drive the parser (option_parse.c), so the help cannot drift
 * from what is parsed.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

/* Help descriptions start in this column, everywhere. */
#define HELP_COLUMN 29

const cli_opt cli_conn_opts[] = {
    {.type = CLI_OPT_HEADING,
     .help = "Connection (otherwise libpq's PG* variables and service "
             "files apply):"},
    {.type = CLI_OPT_STRING,
     .short_name = 'h',
     .long_name = "host",
     .field = offsetof(cli_common, conn.host),
     .value_name = "HOST",
     .help = "database server host or socket directory"},
    {.type = CLI_OPT_STRING,
     .short_name = 'p',
     .long_name = "port",
     .field = offsetof(cli_common, conn.port),
     .value_name = "PORT",
     .help = "database server port"},
    {.type = CLI_OPT_STRING,
     .short_name = 'U',
     .long_name = "username",
     .field = offsetof(cli_common, conn.user),
     .value_name = "USER",
     .help = "database user name"},
    {.type = CLI_OPT_STRING,
     .short_name = 'd',
     .long_name = "dbname",
     .field = offsetof(cli_common, conn.dbname),
     .value_name = "DBNAME",
     .help = "database name, conninfo string or URI"},
    {.type = CLI_OPT_END}};

const cli_opt cli_keys_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Key registry:"},
    {.type = CLI_OPT_STRING,
     .long_name = "keys",
     .field = offsetof(cli_common, keys_file),
     .value_name = "FILE",
     .help = "read @NAME keys, and the names shown for keys,\n"
             "from FILE (default: $PGLOCK_KEYS)"},
    {.type = CLI_OPT_END}};

const cli_opt cli_output_heading[] = {
    {.type = CLI_OPT_HEADING, .help = "Output:"}, {.type = CLI_OPT_END}};

const cli_opt cli_json_opts[] = {
    {.type = CLI_OPT_FLAG,
     .long_name = "json",
     .field = offsetof(cli_common, json),
     .help = "print one JSON document (schema: the man page)"},
    {.type = CLI_OPT_END}};

const cli_opt cli_quiet_opts[] = {{.type = CLI_OPT_FLAG,
                                   .short_name = 'q',
                                   .long_name = "quiet",
                                   .global = &cli_quiet,
                                   .help = "print errors only"},
                                  {.type = CLI_OPT_END}};

const cli_opt cli_verbose_opts[] = {
    {.type = CLI_OPT_COUNT,
     .short_name = 'v',
     .long_name = "verbose",
     .global = &cli_verbosity,
     .help = "print each step with a timestamp on stderr"},
    {.type = CLI_OPT_END}};

const cli_opt cli_help_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Other:"},
    {.type = CLI_OPT_VERSION,
     .short_name = 'V',
     .long_name = "version",
     .help = "output version information, then exit"},
    {.type = CLI_OPT_HELP,
     .short_name = '?',
     .long_name = "help",
     .help = "show this help, then exit"},
    {.type = CLI_OPT_END}};

void *cli_opt_field(const cli_opt *o, cli_common *target)
{
    return o->global ? (void *)o->global : (char *)target + o->field;
}

/* Prints "  -x, --name=VALUE" padded to HELP_COLUMN, then the help, whose
 * '\n'-separated lines continue in that column. */
static void print_option(FILE *out, const cli_opt *o)
{
    char left[64], sh[8] = "    ";
    const char *help = o->help;
    const char *value = o->value_name ? o->value_name : "";
    if (o->short_name)
        snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    snprintf(left, sizeof left, "  %s--%s%s%s%s", sh, o->long_name,
             o->optional ? "[="
             : *value    ? "="
                         : "",
             value, o->optional ? "]" : "");
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
        for (const cli_opt *o = *t; o->type != CLI_OPT_END; o++) {
            if (o->type == CLI_OPT_HEADING)
                fprintf(out, "%s\n", o->help);
            else if (o->help)
                print_option(out, o);
        }
}

void cli_print_version(void)
{
    printf("pglock %s (libpglock %s, libpq %d)\n", PGLOCK_VERSION,
           pglock_version(), PQlibVersion());
}
