/*
 * The textual key syntax (pglock_key_parse); the rules are in docs/keys.md.
 *
 * Strictness is the point: a key that looks like a number but is not
 * exactly one is an error, because reading it as a name would take a
 * different lock than the user meant, silently.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "internal.h"
#include "key_internal.h"

/* Longest part of a key echoed in an error message. */
#define ECHO_MAX 64

/*
 * Writes text for an error message into out: control bytes and (when the
 * text is not UTF-8) non-ASCII bytes as \xNN, quotes and backslashes
 * escaped, cut with "..." after ECHO_MAX bytes.
 */
static void echo_key(const char *text, char *out, size_t outlen)
{
    size_t len = strlen(text);
    int utf8 = pglock__utf8_valid(text, len);
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)text[i];
        char piece[8];
        if (i >= ECHO_MAX && (!utf8 || (c & 0xC0) != 0x80)) {
            snprintf(piece, sizeof piece, "...");
            i = len; /* stop after this piece */
        } else if (c < 0x20 || c == 0x7F || (c >= 0x80 && !utf8))
            snprintf(piece, sizeof piece, "\\x%02X", c);
        else if (c == '"' || c == '\\')
            snprintf(piece, sizeof piece, "\\%c", c);
        else
            snprintf(piece, sizeof piece, "%c", c);
        size_t n = strlen(piece);
        if (o + n + 1 > outlen)
            break;
        memcpy(out + o, piece, n);
        o += n;
    }
    if (outlen)
        out[o < outlen ? o : outlen - 1] = '\0';
}

/* Sets *err (may be NULL) to PGLOCK_EINVAL and 'invalid key "TEXT":
 * REASON'; returns PGLOCK_EINVAL. */
static int key_error(const char *text, pglock_error *err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int key_error(const char *text, pglock_error *err, const char *fmt, ...)
{
    char shown[ECHO_MAX * 4 + 8], reason[512];
    va_list ap;
    if (!err)
        return PGLOCK_EINVAL;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    echo_key(text, shown, sizeof shown);
    return pglock__error_set(err, PGLOCK_EINVAL, NULL, "invalid key \"%s\": %s",
                             shown, reason);
}

/* Why an integer did not parse. */
typedef enum int_problem {
    INT_OK = 0,
    INT_EMPTY,
    INT_PLUS,      /* leading '+' */
    INT_NOT_INT,   /* not "-"? digits */
    INT_NOT_CANON, /* leading zeros or "-0" */
    INT_RANGE
} int_problem;

/*
 * Reads the n bytes at s as an integer in [min, max], canonical form only:
 * an optional '-', then digits with no leading zero ("0" itself is fine,
 * "-0" is not).  Every accepted integer has exactly one spelling, the one
 * pglock prints.
 */
static int_problem parse_int(const char *s, size_t n, int64_t min, int64_t max,
                             int64_t *out)
{
    size_t i = 0;
    int neg = 0;
    if (n == 0)
        return INT_EMPTY;
    if (s[0] == '+')
        return INT_PLUS;
    if (s[0] == '-') {
        neg = 1;
        i = 1;
    }
    if (i == n)
        return INT_NOT_INT;
    for (size_t k = i; k < n; k++)
        if (s[k] < '0' || s[k] > '9')
            return INT_NOT_INT;
    if (s[i] == '0' && (n - i > 1 || neg))
        return INT_NOT_CANON;
    /* Magnitude limit for the sign, computed without overflow. */
    uint64_t limit = neg ? (uint64_t)(-(min + 1)) + 1 : (uint64_t)max;
    uint64_t v = 0;
    for (size_t k = i; k < n; k++) {
        unsigned d = (unsigned)(s[k] - '0');
        if (v > (limit - d) / 10)
            return INT_RANGE;
        v = v * 10 + d;
    }
    if (neg)
        *out = v == 0 ? 0 : -(int64_t)(v - 1) - 1;
    else
        *out = (int64_t)v;
    return INT_OK;
}

/* A problem with an integer, in words: "PART is not an integer" etc.
 * bits is 32 or 64. */
static int int_error(const char *text, pglock_error *err, const char *part,
                     int_problem p, const char *s, size_t n, int bits,
                     const char *hint)
{
    switch (p) {
    case INT_EMPTY:
        return key_error(text, err, "%s is empty", part);
    case INT_PLUS:
        return key_error(text, err, "%s has a '+' sign%s", part, hint);
    case INT_NOT_CANON: {
        /* Show the canonical spelling: strip '-' of zero, leading zeros. */
        size_t i = (s[0] == '-') ? 1 : 0;
        while (i + 1 < n && s[i] == '0')
            i++;
        int negzero = (s[0] == '-') && s[i] == '0';
        return key_error(text, err,
                         "%s is not in canonical form (write %s%.*s)%s", part,
                         (s[0] == '-' && !negzero) ? "-" : "", (int)(n - i),
                         s + i, hint);
    }
    case INT_RANGE:
        return key_error(text, err, "%s is out of range for a %d-bit integer",
                         part, bits);
    case INT_NOT_INT:
    default:
        return key_error(text, err, "%s is not an integer%s", part, hint);
    }
}

/* Hint appended for bare keys that look numeric. */
static void name_hint(const char *text, char *hint, size_t len)
{
    char shown[ECHO_MAX * 4 + 8];
    echo_key(text, shown, sizeof shown);
    snprintf(hint, len, "; for a name write text:%s", shown);
}

/* "NS:ID" at s (n bytes, containing exactly one ':'), each an int32. */
static int parse_pair(pglock_key *out, const char *text, const char *s,
                      size_t n, const char *hint, pglock_error *err)
{
    const char *colon = memchr(s, ':', n);
    if (!colon)
        return key_error(text, err, "a pair needs the form NS:ID");
    if (memchr(colon + 1, ':', n - (size_t)(colon + 1 - s)))
        return key_error(text, err, "too many ':' (a pair is NS:ID)");
    int64_t ns, id;
    size_t nslen = (size_t)(colon - s), idlen = n - nslen - 1;
    int_problem p = parse_int(s, nslen, INT32_MIN, INT32_MAX, &ns);
    if (p)
        return int_error(text, err, "the namespace before ':'", p, s, nslen, 32,
                         hint);
    p = parse_int(colon + 1, idlen, INT32_MIN, INT32_MAX, &id);
    if (p)
        return int_error(text, err, "the id after ':'", p, colon + 1, idlen, 32,
                         hint);
    return pglock_key_pair(out, (int32_t)ns, (int32_t)id);
}

static int parse_int64(pglock_key *out, const char *text, const char *s,
                       const char *part, const char *hint, pglock_error *err)
{
    int64_t v;
    size_t n = strlen(s);
    int_problem p = parse_int(s, n, INT64_MIN, INT64_MAX, &v);
    if (p)
        return int_error(text, err, part, p, s, n, 64, hint);
    return pglock_key_int64(out, v);
}

static int is_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
           c == '\f';
}

static int is_digit(char c)
{
    return c >= '0' && c <= '9';
}

/* Lower-case ASCII comparison of the n bytes at a with the string b. */
static int equal_nocase(const char *a, size_t n, const char *b)
{
    if (strlen(b) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z')
            c = (char)(c - 'A' + 'a');
        if (c != b[i])
            return 0;
    }
    return 1;
}

static const char *const prefixes[] = {"int", "pair", "text", "hashtext",
                                       "hashtextextended"};

int pglock_key_parse(pglock_key *out, const char *text, pglock_error *err)
{
    pglock__error_begin(err);
    if (!out || !text)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "no key given");
    size_t len = strlen(text);
    if (len == 0)
        return key_error(text, err, "the key is empty");
    if (!pglock__utf8_valid(text, len))
        return key_error(text, err, "not valid UTF-8");
    if (text[0] == '@')
        return key_error(text, err,
                         "registry names (@NAME) are looked up by the caller");

    /* Explicit prefixes.  A prefix in the wrong case is a typo, not a
     * name: "INT:5" would otherwise silently lock the name "INT:5". */
    const char *colon = strchr(text, ':');
    if (colon) {
        size_t plen = (size_t)(colon - text);
        const char *rest = colon + 1;
        for (size_t i = 0; i < sizeof prefixes / sizeof prefixes[0]; i++) {
            if (!equal_nocase(text, plen, prefixes[i]))
                continue;
            if (strncmp(text, prefixes[i], plen) != 0)
                return key_error(text, err,
                                 "the prefix \"%s:\" must be lower case",
                                 prefixes[i]);
            break;
        }
        if (plen == 3 && !strncmp(text, "int", 3))
            return parse_int64(out, text, rest, "the integer after \"int:\"",
                               "", err);
        if (plen == 4 && !strncmp(text, "pair", 4))
            return parse_pair(out, text, rest, strlen(rest), "", err);
        if (plen == 4 && !strncmp(text, "text", 4)) {
            if (!*rest)
                return key_error(text, err,
                                 "the name after \"text:\" is empty");
            return pglock_key_text(out, rest);
        }
        if (plen == 8 && !strncmp(text, "hashtext", 8)) {
            if (!*rest)
                return key_error(text, err,
                                 "the name after \"hashtext:\" is empty");
            return pglock_key_hashtext(out, rest);
        }
        if (plen == 16 && !strncmp(text, "hashtextextended", 16)) {
            const char *c2 = strchr(rest, ':');
            if (!c2)
                return key_error(text, err,
                                 "expected hashtextextended:SEED:NAME");
            int64_t seed;
            size_t slen = (size_t)(c2 - rest);
            int_problem p = parse_int(rest, slen, INT64_MIN, INT64_MAX, &seed);
            if (p)
                return int_error(text, err, "the seed", p, rest, slen, 64, "");
            if (!c2[1])
                return key_error(text, err, "the name after the seed is empty");
            return pglock_key_hashtextextended(out, c2 + 1, seed);
        }
    }

    /* Bare keys. */
    if (is_space(text[0]) || is_space(text[len - 1]))
        return key_error(text, err,
                         "leading or trailing whitespace (for such a name "
                         "write text:NAME)");
    if (is_digit(text[0]) || text[0] == '-' || text[0] == '+' ||
        text[0] == ':') {
        char hint[ECHO_MAX * 4 + 40];
        name_hint(text, hint, sizeof hint);
        if (colon)
            return parse_pair(out, text, text, len, hint, err);
        return parse_int64(out, text, text, "the key", hint, err);
    }
    return pglock_key_text(out, text);
}
