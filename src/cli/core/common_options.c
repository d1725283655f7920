/* Option parsing that every subcommand shares (see cli.h). */
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

int cli_conn_option(cli_conn *conn, int c, const char *arg)
{
    switch (c) {
    case 'h': conn->host = arg; return 1;
    case 'p': conn->port = arg; return 1;
    case 'U': conn->user = arg; return 1;
    case 'd': conn->dbname = arg; return 1;
    default: return 0;
    }
}

int cli_help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strcmp(argv[i], "-?") || !strcmp(argv[i], "--help"))
            return 1;
    return 0;
}

int cli_shared_option(cli_conn *conn, int id, const char *value)
{
    switch (id) {
    case 'V':
        cli_print_version();
        return 0;
    case CLI_OPT_REFUSED:
        return CLI_EXIT_USAGE;
    default:
        cli_conn_option(conn, id, value);
        return CLI_GO_ON;
    }
}

void cli_getopt_reset(void)
{
#ifdef __GLIBC__
    optind = 0; /* glibc: 0 also resets its scanning state */
#else
    optind = 1;
#endif
    opterr = 0;
}

void cli_print_version(void)
{
    printf("pglock %s (libpglock %s, libpq %d)\n", PGLOCK_VERSION,
           pglock_version(), PQlibVersion());
}
