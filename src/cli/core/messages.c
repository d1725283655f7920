/* Error and progress output shared by every subcommand. */
#include <stdarg.h>
#include <stdio.h>
#include <time.h>
#include "cli.h"

int cli_quiet;
int cli_verbosity;

static void print_prefixed(const char *kind, const char *fmt, va_list ap)
{
    fprintf(stderr, "pglock: %s: ", kind);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

int cli_error(int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_prefixed("error", fmt, ap);
    va_end(ap);
    return code;
}

int cli_exit_status_for(int pglock_code)
{
    switch (pglock_code) {
    case PGLOCK_EINVAL:
        return CLI_EXIT_USAGE;
    case PGLOCK_ENOMEM:
    case PGLOCK_ESTATE:
        return CLI_EXIT_SOFTWARE;
    default:
        return CLI_EXIT_UNAVAILABLE;
    }
}

void cli_warning(const char *fmt, ...)
{
    if (cli_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    print_prefixed("warning", fmt, ap);
    va_end(ap);
}

void cli_hint(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_prefixed("hint", fmt, ap);
    va_end(ap);
}

void cli_notice(const char *fmt, ...)
{
    if (cli_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("pglock: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int cli_try_help(const char *command)
{
    fprintf(stderr, "Try \"pglock %s%s--help\" for more information.\n",
            command ? command : "", command ? " " : "");
    return CLI_EXIT_USAGE;
}

int cli_usage_error(const char *command, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    print_prefixed("error", fmt, ap);
    va_end(ap);
    return cli_try_help(command);
}

void cli_verbose(const char *fmt, ...)
{
    if (cli_quiet || cli_verbosity <= 0)
        return;
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    char stamp[32];
    strftime(stamp, sizeof stamp, "%H:%M:%S", &tm);
    fprintf(stderr, "pglock: %s.%03ld ", stamp, ts.tv_nsec / 1000000L);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}
