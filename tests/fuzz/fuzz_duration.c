/* Fuzzes cli_parse_duration(): accepted text is exactly what
 * docs/keys.md allows (digits, a fraction that comes to whole
 * milliseconds, a unit), and the value is right (checked in 128-bit
 * arithmetic); errors are one printable line. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    long ms = -12345;
    char err[128];
    int rc = cli_parse_duration(text, &ms, err, sizeof err);

    /* Reference, docs/keys.md's Durations: digits, then optionally a
     * point and 1 to 9 more digits, then "", "ms", "s", "m" or "h"; the
     * value comes to whole milliseconds, at most CLI_DURATION_MAX_MS.  v
     * holds every digit (the point left out), divided by div at the end;
     * past SAT (far beyond any accepted value) it stops growing, huge. */
    const __int128 SAT = (__int128)LONG_MAX * 1000000000;
    size_t i = 0;
    __int128 v = 0, div = 1;
    int huge = 0, decimals = 0;
    while (text[i] >= '0' && text[i] <= '9') {
        huge |= v >= SAT;
        if (!huge)
            v = v * 10 + (text[i] - '0');
        i++;
    }
    int good = i > 0;
    if (good && text[i] == '.') {
        for (i++; text[i] >= '0' && text[i] <= '9'; i++, decimals++) {
            huge |= v >= SAT;
            if (!huge && decimals < 9) {
                v = v * 10 + (text[i] - '0');
                div *= 10;
            }
        }
        good = decimals >= 1 && decimals <= 9;
    }
    const char *u = text + i;
    __int128 scale = !strcmp(u, "") || !strcmp(u, "s") ? 1000
                     : !strcmp(u, "ms")                ? 1
                     : !strcmp(u, "m")                 ? 60000
                     : !strcmp(u, "h")                 ? 3600000
                                                       : 0;
    int want_ok = good && scale && !huge && v * scale % div == 0 &&
                  v * scale / div <= CLI_DURATION_MAX_MS;
    CHECK((rc == 0) == want_ok);
    if (rc == 0) {
        CHECK((__int128)ms == v * scale / div);
        CHECK(err[0] == '\0');
    } else {
        CHECK(rc == -1 && ms == -12345);
        CHECK(!strncmp(err, "invalid duration \"", 18));
        for (const char *p = err; *p; p++)
            CHECK((unsigned char)*p >= 0x20 && *p != 0x7F);
    }
    free(text);
    return 0;
}
