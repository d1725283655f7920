/*
 * become_root COMMAND [ARG]...: the smallest sudo, for
 * tests/cli/run_supervision.bats.  The test installs a copy setuid root;
 * run by an ordinary user, it takes real, effective and saved uid 0, as
 * sudo does (so that the user's kill() then fails with EPERM), and runs
 * COMMAND.  When the exec granted nothing (no_new_privs, a nosuid mount)
 * the setresuid() fails: it says so on stderr and exits 1, running
 * nothing.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: become_root COMMAND [ARG]...\n");
        return 64;
    }
    if (setresgid(0, 0, 0) != 0 || setresuid(0, 0, 0) != 0) {
        fprintf(stderr, "become_root: could not become root: %s\n",
                strerror(errno));
        return 1;
    }
    execvp(argv[1], argv + 1);
    fprintf(stderr, "become_root: could not execute \"%s\": %s\n", argv[1],
            strerror(errno));
    return errno == ENOENT ? 127 : 126;
}
