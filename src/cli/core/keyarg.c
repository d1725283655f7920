/* Keys as the user writes them on the command line: pglock_key_parse()
 * syntax, or @NAME from the registry. */
#include <stdio.h>
#include "cli.h"

int cli_parse_key(const char *text, const cli_registry *reg, pglock_key *out,
                  char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    if (text && text[0] == '@') {
        const char *name = text + 1;
        const char *origin = cli_registry_origin(reg);
        const pglock_key *key = cli_registry_lookup(reg, name);
        if (key) {
            *out = *key;
            return 0;
        }
        /* Fail loudly: a host without the entry must not guess a key. */
        const char *near = cli_registry_near(reg, name);
        if (err && errlen) {
            if (near)
                snprintf(err, errlen,
                         "unknown key \"@%.200s\": not in registry "
                         "\"%.200s\" (did you mean \"@%.200s\"?)",
                         name, origin, near);
            else if (origin)
                snprintf(err, errlen,
                         "unknown key \"@%.200s\": not in registry "
                         "\"%.200s\"",
                         name, origin);
            else
                snprintf(err, errlen,
                         "unknown key \"@%.200s\": no registry "
                         "given (use --keys FILE or PGLOCK_KEYS)",
                         name);
        }
        return -1;
    }
    pglock_error why;
    if (pglock_key_parse(out, text, &why) == PGLOCK_OK)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "%s", why.message);
    return -1;
}
