/*
 * Ages for the history's options (--since, --prune, --within, --warn):
 * a DURATION, or whole days ("30d", at most HISTORY_AGE_MAX_DAYS).  A
 * DURATION stops at about 24 days (PostgreSQL's own timeouts do), which
 * is too short for retention and for weekly or monthly jobs.
 */
#include <stdio.h>
#include <string.h>
#include "history.h"

int history_parse_age(const char *text, long *out_ms, char *err, size_t errlen)
{
    size_t n = strlen(text);
    if (n < 2 || text[n - 1] != 'd' || strspn(text, "0123456789") != n - 1)
        return cli_parse_duration(text, out_ms, err, errlen);
    long days = 0;
    for (size_t i = 0; i + 1 < n; i++) {
        days = days * 10 + (text[i] - '0');
        if (days > HISTORY_AGE_MAX_DAYS) {
            snprintf(err, errlen, "invalid age \"%s\": at most %dd", text,
                     HISTORY_AGE_MAX_DAYS);
            return -1;
        }
    }
    *out_ms = days * 86400000L;
    return 0;
}

cli_step history_age_option(const char *command, const cli_opt *o,
                            cli_common *target, const char *value)
{
    char err[256];
    if (history_parse_age(value, cli_opt_field(o, target), err, sizeof err) < 0)
        return cli_usage_error(command, "invalid value for --%s: %s",
                               o->long_name, err);
    return CLI_GO_ON;
}
