/*
 * Whether the command can be executed, asked before the lock is taken.
 *
 * In a `--try` race a host without the program must not win the lock and
 * then fail with 127 while every host that has it skips with 75.  So the
 * command is looked up as execvp() will look it up (a name with a slash
 * as it is, any other along PATH, or the C library's default path when
 * PATH is unset), and a command that cannot be found or executed ends the
 * run with 127 or 126 before any connection.  The exec itself stays the
 * final word: a file can still vanish in between, and then the job's
 * failure is reported as before.
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "run.h"

/* 0 when path is a file we may execute; else an errno as execve() would
 * give (EACCES also for a directory). */
static int executable(const char *path)
{
    struct stat sb;
    if (stat(path, &sb) != 0)
        return errno;
    if (!S_ISREG(sb.st_mode))
        return EACCES;
    return access(path, X_OK) == 0 ? 0 : errno;
}

/* 0 when name is found along search_path; else ENOENT, or EACCES when
 * only files we may not execute were found (execvp()'s rule). */
static int search(const char *name, const char *search_path)
{
    int seen_eacces = 0;
    const char *dir = search_path;
    for (;;) {
        const char *end = strchr(dir, ':');
        size_t dlen = end ? (size_t)(end - dir) : strlen(dir);
        char path[PATH_MAX];
        /* An empty entry is the current directory. */
        int n = dlen == 0 ? snprintf(path, sizeof path, "%s", name)
                          : snprintf(path, sizeof path, "%.*s/%s", (int)dlen,
                                     dir, name);
        if (n > 0 && (size_t)n < sizeof path) {
            int e = executable(path);
            if (e == 0)
                return 0;
            if (e == EACCES)
                seen_eacces = 1;
        }
        if (!end)
            return seen_eacces ? EACCES : ENOENT;
        dir = end + 1;
    }
}

cli_step run_command_check(const run_args *a)
{
    if (a->shell_command || !a->argv || !a->argv[0])
        return CLI_GO_ON; /* /bin/sh -c STRING: the shell finds its own commands */
    const char *name = a->argv[0];
    int e;
    if (*name == '\0') {
        e = ENOENT;
    } else if (strchr(name, '/')) {
        e = executable(name);
    } else {
        const char *path = getenv("PATH");
        char fallback[256];
        if (!path) {
            size_t n = confstr(_CS_PATH, fallback, sizeof fallback);
            path = n > 0 && n <= sizeof fallback ? fallback : "/bin:/usr/bin";
        }
        e = search(name, path);
    }
    if (e == 0)
        return CLI_GO_ON;
    return cli_error(e == ENOENT ? CLI_EXIT_NOT_FOUND : CLI_EXIT_CANNOT_EXEC,
                     "could not execute \"%s\": %s; the lock was not taken",
                     name, strerror(e));
}
