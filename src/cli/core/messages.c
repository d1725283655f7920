/* Error and progress output shared by every subcommand. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "cli.h"

int cli_quiet;
int cli_verbosity;

/* Writes "HEAD" + the formatted message + a newline to stderr in one
 * write(): several pglock processes often share one stderr (a cron line
 * racing on one host, a test's background jobs), and a line written in
 * pieces (prefix, body, newline) came out interleaved with another's. */
static void print_line(const char *head, const char *fmt, va_list ap)
{
    char small[1024];
    char *line = small;
    size_t room = sizeof small;
    va_list again;
    va_copy(again, ap);
    int h = snprintf(small, room, "%s", head);
    int b = vsnprintf(small + h, room - (size_t)h, fmt, ap);
    if (b >= 0 && (size_t)(h + b) + 2 > room) {
        room = (size_t)(h + b) + 2;
        char *big = malloc(room);
        if (big) {
            line = big;
            memcpy(line, head, (size_t)h);
            vsnprintf(line + h, room - (size_t)h, fmt, again);
        }
    }
    va_end(again);
    size_t len = b < 0 ? (size_t)h : strnlen(line, room - 1);
    line[len++] = '\n';
    for (size_t off = 0; off < len;) {
        ssize_t n = write(STDERR_FILENO, line + off, len - off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        off += (size_t)n;
    }
    if (line != small)
        free(line);
}

static void print_prefixed(const char *kind, const char *fmt, va_list ap)
{
    char head[32];
    snprintf(head, sizeof head, "pglock: %s: ", kind);
    print_line(head, fmt, ap);
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
    print_line("pglock: ", fmt, ap);
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
    char head[64];
    snprintf(head, sizeof head, "pglock: %s.%03ld ", stamp,
             ts.tv_nsec / 1000000L);
    va_list ap;
    va_start(ap, fmt);
    print_line(head, fmt, ap);
    va_end(ap);
}
