#include "cli.h"
int cmd_metrics(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    return 70;
}
