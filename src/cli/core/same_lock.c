/* Which keys take the same lock (cli_same_lock(), cli.h): what the
 * registry, status and run compare keys by, in a file of its own so that
 * the registry (registry.c) and the key's parser (keyarg.c) do not
 * depend on each other. */
#include <string.h>
#include "cli.h"

int cli_same_lock(const pglock_key *a, const pglock_key *b)
{
    uint32_t ca, oa, cb, ob;
    int sa, sb;
    int ra = pglock_key_locktag(a, &ca, &oa, &sa);
    int rb = pglock_key_locktag(b, &cb, &ob, &sb);
    if (ra == PGLOCK_OK && rb == PGLOCK_OK)
        return ca == cb && oa == ob && sa == sb;
    if (ra == PGLOCK_OK || rb == PGLOCK_OK)
        return 0;
    return a->kind == b->kind && a->seed == b->seed && a->name && b->name &&
           a->name_len == b->name_len && !memcmp(a->name, b->name, a->name_len);
}
