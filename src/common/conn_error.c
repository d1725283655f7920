/*
 * libpq's connection error, safe to print.  For a conninfo string or URI
 * it cannot parse, libpq quotes the offending part, which may be (or
 * hold) the password: "invalid percent-encoded token: "s3cr%ZZet"".
 * Such parts are hidden; what hides a secret is libpq's to say, not a
 * parser of our own.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounded_conn.h"
#include "error_text.h"

/* 1 if msg (libpq's, for a failed connection) is the error libpq reports
 * for parsing conninfo itself: then it may quote any part of it. */
static int is_parse_error(const char *msg, const char *conninfo)
{
    if (!conninfo || !*conninfo)
        return 0;
    char *perr = NULL;
    PQconninfoOption *o = PQconninfoParse(conninfo, &perr);
    if (o) {
        PQconninfoFree(o);
        return 0;
    }
    if (!perr)
        return 1; /* out of memory: hide to be safe */
    char first[256];
    pglock__first_line(first, sizeof first, perr);
    PQfreemem(perr);
    return *first && strstr(msg, first) != NULL;
}

static int is_word_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '_';
}

/* 1 if the n bytes at name are a word that conninfo uses as a keyword,
 * and only so: every occurrence is followed by '=' (as in
 * "bogus_option=1" or "?bogus_option=1").  libpq's "invalid connection
 * option" names it, and a name is no secret. */
static int is_keyword_of(const char *name, size_t n, const char *conninfo)
{
    if (n == 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!is_word_char(name[i]))
            return 0;
    int seen = 0;
    const char *end = conninfo + strlen(conninfo);
    for (const char *p = conninfo;
         (p = memmem(p, (size_t)(end - p), name, n)) != NULL; p++) {
        const char *q = p + n;
        while (*q == ' ' || *q == '\t')
            q++;
        if (*q != '=')
            return 0;
        seen = 1;
    }
    return seen;
}

/* The quote that closes the one at open: libpq quotes conninfo verbatim,
 * and a '"' inside it would end the quote too soon, so the farthest '"'
 * with a piece of conninfo before it wins (else the next one; NULL: none). */
static const char *quote_end(const char *open, const char *conninfo)
{
    const char *next = strchr(open + 1, '"'), *best = NULL;
    for (const char *q = next; q; q = strchr(q + 1, '"'))
        if (memmem(conninfo, strlen(conninfo), open + 1,
                   (size_t)(q - open - 1)))
            best = q;
    return best ? best : next;
}

/* 1 if the n bytes at part, where they stand in conninfo, may be (or
 * hold) a secret: libpq itself decides.  Every occurrence of part is
 * replaced by a marker and the result parsed again; unless it parses and
 * no secret field (dispchar "*": password, sslpassword) holds the marker,
 * the part stays hidden. */
static int may_be_secret(const char *part, size_t n, const char *conninfo)
{
    static const char marker[] = "pglockmarker";
    size_t clen = strlen(conninfo), cap = clen * (sizeof marker) + 1;
    char *copy = n ? malloc(cap) : NULL;
    if (!copy)
        return 1;
    size_t o = 0;
    for (const char *p = conninfo; *p;) {
        if (strncmp(p, part, n) == 0) {
            memcpy(copy + o, marker, sizeof marker - 1);
            o += sizeof marker - 1;
            p += n;
        } else {
            copy[o++] = *p++;
        }
    }
    copy[o] = '\0';
    PQconninfoOption *opts = PQconninfoParse(copy, NULL);
    free(copy);
    if (!opts)
        return 1;
    int secret = 0;
    for (PQconninfoOption *opt = opts; opt->keyword; opt++)
        if (opt->dispchar && opt->dispchar[0] == '*' && opt->val &&
            strstr(opt->val, marker))
            secret = 1;
    PQconninfoFree(opts);
    return secret;
}

const char *pglock__conn_error_message(char *buf, size_t len,
                                       const char *message,
                                       const char *conninfo)
{
    if (!buf || len == 0)
        return buf;
    char line[512];
    pglock__first_line(line, sizeof line, message ? message : "");
    if (!is_parse_error(line, conninfo)) {
        snprintf(buf, len, "%s", line);
        return buf;
    }
    /* Each "quoted part" becomes "***", unless it is libpq's own "=", a
     * keyword of conninfo, or a part that holds no secret; the words
     * around it stay. */
    size_t o = 0;
    for (const char *p = line; *p && o + 1 < len;) {
        if (*p != '"') {
            buf[o++] = *p++;
            continue;
        }
        const char *end = quote_end(p, conninfo);
        size_t n = end ? (size_t)(end - p - 1) : strlen(p + 1);
        int keep = (n == 1 && p[1] == '=') ||
                   is_keyword_of(p + 1, n, conninfo) ||
                   !may_be_secret(p + 1, n, conninfo);
        const char *shown = keep ? NULL : "***";
        buf[o++] = '"';
        for (size_t i = 0; i < (shown ? 3 : n) && o + 1 < len; i++)
            buf[o++] = (char)(shown ? shown[i] : p[1 + i]);
        if (end && o + 1 < len)
            buf[o++] = '"';
        p = end ? end + 1 : p + 1 + n;
    }
    buf[o] = '\0';
    return buf;
}
