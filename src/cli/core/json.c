/* A small streaming JSON writer (see json.h). */
#include <stdint.h>
#include "json.h"

void json_init(json_writer *w, FILE *out)
{
    w->out = out;
    w->depth = 0;
    w->count[0] = 0;
}

/* Length of the valid UTF-8 sequence at s, or 0 if it is not one. */
static int utf8_sequence(const unsigned char *s)
{
    unsigned c = s[0];
    int n;
    uint32_t cp;
    if (c < 0x80)
        return 1;
    if (c >= 0xC2 && c <= 0xDF) {
        n = 2;
        cp = c & 0x1F;
    } else if (c >= 0xE0 && c <= 0xEF) {
        n = 3;
        cp = c & 0x0F;
    } else if (c >= 0xF0 && c <= 0xF4) {
        n = 4;
        cp = c & 0x07;
    } else {
        return 0;
    }
    for (int i = 1; i < n; i++) {
        if ((s[i] & 0xC0) != 0x80)
            return 0; /* also stops at the NUL */
        cp = (cp << 6) | (s[i] & 0x3F);
    }
    /* overlong forms, surrogates, beyond U+10FFFF */
    if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
        (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF)
        return 0;
    return n;
}

void json_write_string(FILE *out, const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    fputc('"', out);
    while (*p) {
        const unsigned char *run = p; /* plain ASCII goes out in one piece */
        while (*p >= 0x20 && *p < 0x7F && *p != '"' && *p != '\\')
            p++;
        if (p > run)
            fwrite(run, 1, (size_t)(p - run), out);
        if (!*p)
            break;
        unsigned c = *p;
        if (c == '"' || c == '\\') {
            fputc('\\', out);
            fputc((int)c, out);
            p++;
        } else if (c < 0x20 || c == 0x7F) {
            switch (c) {
            case '\n':
                fputs("\\n", out);
                break;
            case '\r':
                fputs("\\r", out);
                break;
            case '\t':
                fputs("\\t", out);
                break;
            case '\b':
                fputs("\\b", out);
                break;
            case '\f':
                fputs("\\f", out);
                break;
            default:
                fprintf(out, "\\u%04x", c);
                break;
            }
            p++;
        } else {
            int n = utf8_sequence(p);
            if (n == 0) {
                fputs("\\ufffd", out);
                p++;
            } else {
                fwrite(p, 1, (size_t)n, out);
                p += n;
            }
        }
    }
    fputc('"', out);
}

/* Comma and key before a value at the current depth. */
static void member(json_writer *w, const char *key)
{
    if (w->count[w->depth]++ > 0)
        fputc(',', w->out);
    if (key) {
        json_write_string(w->out, key);
        fputc(':', w->out);
    }
}

static void open_container(json_writer *w, const char *key, char c)
{
    member(w, key);
    fputc(c, w->out);
    if (w->depth + 1 < JSON_MAX_DEPTH)
        w->depth++;
    w->count[w->depth] = 0;
}

static void close_container(json_writer *w, char c)
{
    fputc(c, w->out);
    if (w->depth > 0)
        w->depth--;
}

void json_object_begin(json_writer *w, const char *key)
{
    open_container(w, key, '{');
}
void json_object_end(json_writer *w)
{
    close_container(w, '}');
}
void json_array_begin(json_writer *w, const char *key)
{
    open_container(w, key, '[');
}
void json_array_end(json_writer *w)
{
    close_container(w, ']');
}

void json_string(json_writer *w, const char *key, const char *value)
{
    member(w, key);
    if (value)
        json_write_string(w->out, value);
    else
        fputs("null", w->out);
}

void json_int(json_writer *w, const char *key, long long value)
{
    member(w, key);
    fprintf(w->out, "%lld", value);
}

void json_seconds(json_writer *w, const char *key, double value)
{
    member(w, key);
    if (value < 0)
        fputs("null", w->out);
    else
        fprintf(w->out, "%.3f", value);
}

void json_bool(json_writer *w, const char *key, int value)
{
    member(w, key);
    fputs(value ? "true" : "false", w->out);
}

void json_null(json_writer *w, const char *key)
{
    member(w, key);
    fputs("null", w->out);
}

void json_end(json_writer *w)
{
    fputc('\n', w->out);
    w->depth = 0;
    w->count[0] = 0;
}
