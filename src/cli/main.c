/* pglock — placeholder until the command table lands. */
#include <stdio.h>
#include "pglock.h"

int main(void)
{
    printf("pglock %s\n", pglock_version());
    return 0;
}
