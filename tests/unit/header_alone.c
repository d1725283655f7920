/* The public header must compile alone, strictly. */
#include "pglock.h"

int header_alone_dummy(void);
int header_alone_dummy(void)
{
    return PGLOCK_OK;
}
