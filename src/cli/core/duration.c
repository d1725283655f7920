/* DURATION arguments ("500ms", "30s", "1.5s", "5m", "2h", or plain
 * seconds), and durations written for people. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include "cli.h"

/*
 * Digits, an optional fraction ("1.5s", "0.25m": it must come to whole
 * milliseconds), then an optional unit (ms, s, m, h; lower case).
 * Leading zeros are harmless here ("05s" is 5 s: a duration names no
 * lock).  No sign, no spaces, and at most CLI_DURATION_MAX_MS (about 24.8
 * days): callers add durations together (lease arithmetic, deadlines), and
 * a huge value must be refused, not wrap around.
 */
int cli_parse_duration(const char *text, long *out_ms, char *err, size_t errlen)
{
    static const struct {
        const char *unit;
        long ms;
    } units[] = {{"", 1000L},
                 {"ms", 1L},
                 {"s", 1000L},
                 {"m", 60000L},
                 {"h", 3600000L}};
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
    /* At most 9 decimals: frac * scale stays far below LONG_MAX. */
    long frac = 0, frac_div = 1;
    size_t frac_at = i;
    if (text[i] == '.' && i > 0) {
        for (i++; text[i] >= '0' && text[i] <= '9' && frac_div < 1000000000L;
             i++) {
            frac = frac * 10 + (text[i] - '0');
            frac_div *= 10;
        }
    }
    const char *why = NULL;
    long scale = 0;
    if (frac_at > 0 && text[frac_at] == '.' &&
        (i == frac_at + 1 || (text[i] >= '0' && text[i] <= '9')))
        why = i == frac_at + 1 ? "expected digits after the decimal point"
                               : "too many decimals";
    else if (i == 0)
        why = "expected a number of seconds, or a number followed by ms, s, "
              "m or h";
    else {
        for (size_t u = 0; u < sizeof units / sizeof units[0]; u++)
            if (!strcmp(text + i, units[u].unit))
                scale = units[u].ms;
        if (!scale)
            why = "unknown unit (use ms, s, m or h, e.g. 30s)";
        else if (overflow || v > CLI_DURATION_MAX_MS / scale ||
                 v * scale + frac * scale / frac_div > CLI_DURATION_MAX_MS)
            why = "too large (at most 2147483647ms, about 24 days)";
        else if (frac * scale % frac_div != 0)
            why = "finer than a millisecond";
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
        *out_ms = v * scale + frac * scale / frac_div;
    return 0;
}

/* By hand, for the same reason as below: status writes several per lock. */
char *cli_put_decimal(char *p, long long v, int min_digits)
{
    char digits[24];
    int n = 0;
    unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v
                                 : (unsigned long long)v;
    do {
        digits[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u || n < min_digits);
    if (v < 0)
        *p++ = '-';
    while (n)
        *p++ = digits[--n];
    return p;
}

/* By hand, not snprintf(): status writes two per lock, 20,000 with
 * 10,000 locks, and printf's machinery was most of its table's time. */
void cli_format_duration(double s, int tenths, char *buf, size_t len)
{
    char out[64], *p = out;
    if (!(s >= 0)) /* and NaN */
        s = 0;
    if (s > 1e12) /* (31,700 years: keeps the numbers whole) */
        s = 1e12;
    long long t = (long long)(s + 0.5);
    long long t10 = (long long)(s * 10 + 0.5);
    if (tenths && t10 < 600) {
        p = cli_put_decimal(p, t10 / 10, 1);
        *p++ = '.';
        p = cli_put_decimal(p, t10 % 10, 1);
        *p++ = 's';
    } else if (t < 60) {
        p = cli_put_decimal(p, t, 1);
        *p++ = 's';
    } else if (t < 3600) {
        p = cli_put_decimal(p, t / 60, 1);
        *p++ = 'm';
        p = cli_put_decimal(p, t % 60, 2);
        *p++ = 's';
    } else if (t < 86400) {
        p = cli_put_decimal(p, t / 3600, 1);
        *p++ = 'h';
        p = cli_put_decimal(p, t % 3600 / 60, 2);
        *p++ = 'm';
    } else {
        p = cli_put_decimal(p, t / 86400, 1);
        *p++ = 'd';
        p = cli_put_decimal(p, t % 86400 / 3600, 2);
        *p++ = 'h';
    }
    size_t n = (size_t)(p - out);
    if (!len)
        return;
    if (n >= len)
        n = len - 1;
    memcpy(buf, out, n);
    buf[n] = '\0';
}
