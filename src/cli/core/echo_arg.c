/* User text shown inside a one-line message (see cli.h). */
#include <stdio.h>
#include <string.h>
#include "cli.h"

void cli_echo_arg(const char *text, int quotes, char *out, size_t outlen)
{
    size_t o = 0;
    size_t len = strlen(text);
    for (size_t i = 0; i < len && o + 5 < outlen; i++) {
        unsigned char c = (unsigned char)text[i];
        if (i == 64) {
            o += (size_t)snprintf(out + o, outlen - o, "...");
            break;
        }
        if (quotes && (c == '"' || c == '\\'))
            o += (size_t)snprintf(out + o, outlen - o, "\\%c", c);
        else if (c < 0x20 || c == 0x7F)
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02X", c);
        else
            out[o++] = (char)c;
    }
    out[o] = '\0';
}
