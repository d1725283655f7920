/*
 * Placeholders for subcommands whose owners have not landed yet, so that
 * the command table links.  Each owner deletes its stub when it lands.
 */
#include "cli.h"

#define NOT_YET(fn, name)                                                   \
    int fn(int argc, char **argv)                                           \
    {                                                                       \
        (void)argc;                                                         \
        (void)argv;                                                         \
        return cli_error(CLI_EXIT_SOFTWARE, "\"pglock %s\" is not yet implemented", name); \
    }

