/* Fuzzes cli_parse_duration(): accepted text is exactly digits and a
 * unit, and the value is right (checked in 128-bit arithmetic); errors
 * are one printable line. */
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

    /* Reference: digits, then "", "ms", "s", "m" or "h". */
    size_t i = 0;
    __int128 v = 0;
    while (text[i] >= '0' && text[i] <= '9' && v <= (__int128)LONG_MAX * 10)
        v = v * 10 + (text[i++] - '0');
    while (text[i] >= '0' && text[i] <= '9') {
        v = (__int128)LONG_MAX + 1; /* saturate: surely too large */
        i++;
    }
    const char *u = text + i;
    __int128 scale = !strcmp(u, "") || !strcmp(u, "s") ? 1000
                   : !strcmp(u, "ms") ? 1
                   : !strcmp(u, "m") ? 60000
                   : !strcmp(u, "h") ? 3600000 : 0;
    int want_ok = i > 0 && scale && v * scale <= CLI_DURATION_MAX_MS;

    CHECK((rc == 0) == want_ok);
    if (rc == 0) {
        CHECK((__int128)ms == v * scale);
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
