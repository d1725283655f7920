/*
 * Lock keys: constructors, the SHA-256 name rule, pg_locks coordinates,
 * printing and the equivalent SQL.  No server is needed here: resolving
 * the server-computed legacy forms is key_resolve.c's.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/evp.h>
#include "pglock.h"
#include "key_internal.h"
#include "internal.h"

/* ----------------------------------------------------------- UTF-8 */

/* Unicode 15, table 3-7 "Well-Formed UTF-8 Byte Sequences". */
int pglock__utf8_valid(const char *str, size_t len)
{
    const unsigned char *s = (const unsigned char *)str;
    size_t i = 0;
    while (i < len) {
        unsigned char c = s[i];
        size_t n;
        unsigned char lo = 0x80, hi = 0xBF; /* range of the second byte */
        if (c == 0)
            return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        if (c >= 0xC2 && c <= 0xDF)
            n = 1;
        else if (c >= 0xE0 && c <= 0xEF) {
            n = 2;
            if (c == 0xE0)
                lo = 0xA0; /* no overlong 3-byte forms */
            if (c == 0xED)
                hi = 0x9F; /* no surrogates */
        } else if (c >= 0xF0 && c <= 0xF4) {
            n = 3;
            if (c == 0xF0)
                lo = 0x90; /* no overlong 4-byte forms */
            if (c == 0xF4)
                hi = 0x8F; /* nothing above U+10FFFF */
        } else
            return 0; /* continuation byte, C0/C1, F5..FF */
        if (len - i - 1 < n)
            return 0;
        if (s[i + 1] < lo || s[i + 1] > hi)
            return 0;
        for (size_t k = 2; k <= n; k++)
            if (s[i + k] < 0x80 || s[i + k] > 0xBF)
                return 0;
        i += n + 1;
    }
    return 1;
}

/* ----------------------------------------------------- constructors */

static void key_zero(pglock_key *out, pglock_key_kind kind)
{
    memset(out, 0, sizeof *out);
    out->kind = kind;
}

const char *pglock__key_invalid(const pglock_key *key)
{
    if (!key)
        return "no key given";
    if (key->kind < PGLOCK_KEY_INT64 || key->kind > PGLOCK_KEY_HASHTEXTEXTENDED)
        return "its kind is not a pglock_key_kind";
    for (size_t i = 0; i < sizeof key->reserved / sizeof key->reserved[0]; i++)
        if (key->reserved[i])
            return "its reserved bytes are not zero";
    return NULL;
}

int pglock_key_int64(pglock_key *out, int64_t id)
{
    if (!out)
        return PGLOCK_EINVAL;
    key_zero(out, PGLOCK_KEY_INT64);
    out->id = id;
    return PGLOCK_OK;
}

int pglock_key_pair(pglock_key *out, int32_t ns, int32_t id)
{
    if (!out)
        return PGLOCK_EINVAL;
    key_zero(out, PGLOCK_KEY_PAIR);
    out->ns = ns;
    out->nsid = id;
    return PGLOCK_OK;
}

/* Fills the name fields after checking the name is valid UTF-8. */
static int key_named(pglock_key *out, pglock_key_kind kind, const char *name)
{
    if (!out || !name)
        return PGLOCK_EINVAL;
    size_t len = strlen(name);
    if (!pglock__utf8_valid(name, len))
        return PGLOCK_EINVAL;
    key_zero(out, kind);
    out->name = name;
    out->name_len = len;
    return PGLOCK_OK;
}

int pglock_key_text(pglock_key *out, const char *name)
{
    int rc = key_named(out, PGLOCK_KEY_TEXT, name);
    if (rc == PGLOCK_OK)
        out->id = pglock_name_to_int64(out->name, out->name_len);
    return rc;
}

int pglock_key_hashtext(pglock_key *out, const char *name)
{
    return key_named(out, PGLOCK_KEY_HASHTEXT, name);
}

int pglock_key_hashtextextended(pglock_key *out, const char *name, int64_t seed)
{
    int rc = key_named(out, PGLOCK_KEY_HASHTEXTEXTENDED, name);
    if (rc == PGLOCK_OK)
        out->seed = seed;
    return rc;
}

/* -------------------------------------------------- the SHA-256 rule */

int64_t pglock_name_to_int64(const char *name, size_t len)
{
    unsigned char md[EVP_MAX_MD_SIZE];
    unsigned int mdlen = 0;
    static const char empty[1] = "";
    /* EVP_Digest cannot fail for SHA-256 on valid input short of memory
     * exhaustion inside OpenSSL; there is no error channel here, so abort
     * rather than hand out a wrong key. */
    if (!EVP_Digest(name ? name : empty, name ? len : 0, md, &mdlen,
                    EVP_sha256(), NULL) ||
        mdlen < 8)
        abort();
    uint64_t u = 0;
    for (int i = 0; i < 8; i++)
        u = (u << 8) | md[i];
    /* Two's complement reinterpretation, without implementation-defined
     * conversion of an out-of-range value. */
    if (u <= (uint64_t)INT64_MAX)
        return (int64_t)u;
    return -(int64_t)(~u) - 1;
}

/* ---------------------------------------------------- coordinates */

int pglock__key_is_legacy(const pglock_key *key)
{
    return key->kind == PGLOCK_KEY_HASHTEXT ||
           key->kind == PGLOCK_KEY_HASHTEXTEXTENDED;
}

/* 1 if key holds a bigint that can be used (int, text, resolved legacy). */
static int key_has_bigint(const pglock_key *key)
{
    if (key->kind == PGLOCK_KEY_INT64 || key->kind == PGLOCK_KEY_TEXT)
        return 1;
    return pglock__key_is_legacy(key) && key->resolved;
}

int pglock_key_locktag(const pglock_key *key, uint32_t *classid,
                       uint32_t *objid, int *objsubid)
{
    uint32_t c, o;
    int sub;
    if (pglock__key_invalid(key))
        return PGLOCK_EINVAL;
    if (key->kind == PGLOCK_KEY_PAIR) {
        /* pg_advisory_lock(int4, int4): the ints as oids, objsubid 2. */
        c = (uint32_t)key->ns;
        o = (uint32_t)key->nsid;
        sub = 2;
    } else if (key_has_bigint(key)) {
        /* pg_advisory_lock(int8): high and low halves, objsubid 1. */
        uint64_t u = (uint64_t)key->id;
        c = (uint32_t)(u >> 32);
        o = (uint32_t)(u & 0xFFFFFFFFu);
        sub = 1;
    } else
        return PGLOCK_EINVAL;
    if (classid)
        *classid = c;
    if (objid)
        *objid = o;
    if (objsubid)
        *objsubid = sub;
    return PGLOCK_OK;
}

/* snprintf's contract, turned into ours: the length needed, or EINVAL. */
static int printed(int n)
{
    return n < 0 ? PGLOCK_EINVAL : n;
}

int pglock_key_format(const pglock_key *key, char *buf, size_t len)
{
    if (pglock__key_invalid(key) || (!buf && len))
        return PGLOCK_EINVAL;
    if (key->kind == PGLOCK_KEY_PAIR)
        return printed(
            snprintf(buf, len, "%" PRId32 ":%" PRId32, key->ns, key->nsid));
    if (key_has_bigint(key))
        return printed(snprintf(buf, len, "%" PRId64, key->id));
    return PGLOCK_EINVAL;
}

/* ------------------------------------------------------------ SQL */

/* A buffer that counts what would have been written (as snprintf). */
typedef struct sqlbuf {
    char *buf;
    size_t len;  /* capacity of buf */
    size_t used; /* bytes that would have been written */
} sqlbuf;

static void sb_putc(sqlbuf *sb, char c)
{
    if (sb->used + 1 < sb->len)
        sb->buf[sb->used] = c;
    sb->used++;
}

static void sb_puts(sqlbuf *sb, const char *s)
{
    while (*s)
        sb_putc(sb, *s++);
}

/*
 * Appends name as a SQL string literal.  Quotes are doubled; a name with a
 * backslash is written as E'...' with backslashes doubled, which reads the
 * same whatever standard_conforming_strings is.
 */
static void sb_literal(sqlbuf *sb, const char *name, size_t len)
{
    if (memchr(name, '\\', len))
        sb_putc(sb, 'E');
    sb_putc(sb, '\'');
    for (size_t i = 0; i < len; i++) {
        if (name[i] == '\'' || name[i] == '\\')
            sb_putc(sb, name[i]);
        sb_putc(sb, name[i]);
    }
    sb_putc(sb, '\'');
}

static const char *lock_function(pglock_mode mode, pglock_scope scope)
{
    if (scope == PGLOCK_XACT)
        return mode == PGLOCK_SHARED ? "pg_advisory_xact_lock_shared"
                                     : "pg_advisory_xact_lock";
    return mode == PGLOCK_SHARED ? "pg_advisory_lock_shared"
                                 : "pg_advisory_lock";
}

int pglock_key_sql(const pglock_key *key, pglock_mode mode, pglock_scope scope,
                   char *buf, size_t len)
{
    char num[64];
    if (pglock__key_invalid(key) || (!buf && len))
        return PGLOCK_EINVAL;
    if ((mode != PGLOCK_EXCLUSIVE && mode != PGLOCK_SHARED) ||
        (scope != PGLOCK_SESSION && scope != PGLOCK_XACT))
        return PGLOCK_EINVAL;
    if ((key->kind == PGLOCK_KEY_TEXT || pglock__key_is_legacy(key)) &&
        !key->name)
        return PGLOCK_EINVAL;

    sqlbuf sb = {buf, len, 0};
    sb_puts(&sb, "SELECT ");
    sb_puts(&sb, lock_function(mode, scope));
    sb_putc(&sb, '(');
    switch (key->kind) {
    case PGLOCK_KEY_INT64:
        snprintf(num, sizeof num, "%" PRId64, key->id);
        sb_puts(&sb, num);
        break;
    case PGLOCK_KEY_PAIR:
        snprintf(num, sizeof num, "%" PRId32 ", %" PRId32, key->ns, key->nsid);
        sb_puts(&sb, num);
        break;
    case PGLOCK_KEY_TEXT:
        /* docs/keys.md's portable expression (PostgreSQL 11+). */
        sb_puts(&sb, "('x' || substr(encode(sha256(convert_to(");
        sb_literal(&sb, key->name, key->name_len);
        sb_puts(&sb, ", 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint");
        break;
    case PGLOCK_KEY_HASHTEXT:
        sb_puts(&sb, "hashtext(");
        sb_literal(&sb, key->name, key->name_len);
        sb_putc(&sb, ')');
        break;
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        sb_puts(&sb, "hashtextextended(");
        sb_literal(&sb, key->name, key->name_len);
        snprintf(num, sizeof num, ", %" PRId64 ")", key->seed);
        sb_puts(&sb, num);
        break;
    default:
        return PGLOCK_EINVAL;
    }
    sb_puts(&sb, ");");
    if (len)
        buf[sb.used < len ? sb.used : len - 1] = '\0';
    return sb.used > (size_t)0x7FFFFFFF ? PGLOCK_EINVAL : (int)sb.used;
}
