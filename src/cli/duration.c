/* DURATION arguments: "500ms", "30s", "5m", "2h", or plain seconds. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

/*
 * Digits, then an optional unit (ms, s, m, h; lower case).  Leading zeros
 * are harmless here ("05s" is 5 s: a duration names no lock).  No sign,
 * no spaces, no fraction, and at most CLI_DURATION_MAX_MS (about 24.8
 * days): callers add durations together (lease arithmetic, deadlines), and
 * a huge value must be refused, not wrap around.
 */
int cli_parse_duration(const char *text, long *out_ms, char *err,
                       size_t errlen)
{
    static const struct {
        const char *unit;
        long ms;
    } units[] = {{"", 1000L}, {"ms", 1L}, {"s", 1000L},
                 {"m", 60000L}, {"h", 3600000L}};
    if (err && errlen)
        err[0] = '\0';
    if (!text || !*text) {
        if (err && errlen)
            snprintf(err, errlen, "invalid duration \"\": empty");
        return -1;
    }
    size_t i = 0;
    long v = 0;
    int overflow = 0;
    while (text[i] >= '0' && text[i] <= '9') {
        int d = text[i] - '0';
        if (v > (LONG_MAX - d) / 10)
            overflow = 1;
        else
            v = v * 10 + d;
        i++;
    }
    const char *why = NULL;
    long scale = 0;
    if (i == 0)
        why = "expected a number of seconds, or a number followed by ms, s, "
              "m or h";
    else {
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
            if (!strcmp(text + i, units[u].unit))
                scale = units[u].ms;
        if (!scale)
            why = "unknown unit (use ms, s, m or h, e.g. 30s)";
        else if (overflow || v > CLI_DURATION_MAX_MS / scale)
            why = "too large (at most 2147483647ms, about 24 days)";
    }
    if (why) {
        if (err && errlen) {
            char shown[64 * 4 + 4];
            cli_echo_arg(text, 1, shown, sizeof shown);
            snprintf(err, errlen, "invalid duration \"%s\": %s", shown, why);
        }
        return -1;
    }
    if (out_ms)
        *out_ms = v * scale;
    return 0;
}
