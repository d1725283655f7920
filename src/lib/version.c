#include "pglock.h"

const char *pglock_version(void)
{
    return PGLOCK_VERSION;
}
