/*
 * Fuzzes pglock_key_parse() and checks what a parsed key promises:
 * one-line errors; a parsed key formats and re-parses to the same lock;
 * integers are canonical (the text is exactly what pglock prints); names
 * are valid UTF-8 (checked against a second, decoding implementation);
 * the SQL literal holds exactly the name.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "pglock.h"
#include "key_internal.h"
#include "fuzz.h"

/* A second UTF-8 check: decode, then judge the code point. */
static int utf8_reference(const unsigned char *s, size_t len)
{
    for (size_t i = 0; i < len;) {
        uint32_t cp;
        size_t n;
        if (s[i] == 0)
            return 0;
        if (s[i] < 0x80) {
            i++;
            continue;
        } else if ((s[i] & 0xE0) == 0xC0) {
            n = 2;
            cp = s[i] & 0x1F;
        } else if ((s[i] & 0xF0) == 0xE0) {
            n = 3;
            cp = s[i] & 0x0F;
        } else if ((s[i] & 0xF8) == 0xF0) {
            n = 4;
            cp = s[i] & 0x07;
        } else
            return 0;
        if (i + n > len)
            return 0;
        for (size_t k = 1; k < n; k++) {
            if ((s[i + k] & 0xC0) != 0x80)
                return 0;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        static const uint32_t min[5] = {0, 0, 0x80, 0x800, 0x10000};
        if (cp < min[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
            return 0;
        i += n;
    }
    return 1;
}

/* Reads the string literal at sql (E'...' or '...') back into out;
 * returns where the literal ends. */
static const char *unquote(const char *sql, char *out, size_t *outlen)
{
    int e = 0;
    size_t n = 0;
    if (*sql == 'E') {
        e = 1;
        sql++;
    }
    CHECK(*sql == '\'');
    for (sql++;; sql++) {
        CHECK(*sql);
        if (*sql == '\'') {
            if (sql[1] != '\'')
                break;
            sql++;
        } else if (*sql == '\\') {
            CHECK(e && sql[1] == '\\');
            sql++;
        }
        out[n++] = *sql;
    }
    *outlen = n;
    return sql + 1;
}

/* The SQL is exactly the expected text around a literal that reads back
 * as the name: nothing in a name can escape its quotes. */
static void check_sql(const pglock_key *k)
{
    static const char fn[] = "SELECT pg_advisory_xact_lock_shared(";
    int n = pglock_key_sql(k, PGLOCK_SHARED, PGLOCK_XACT, NULL, 0);
    CHECK(n > 0);
    char *sql = malloc((size_t)n + 1);
    CHECK(pglock_key_sql(k, PGLOCK_SHARED, PGLOCK_XACT, sql, (size_t)n + 1) ==
          n);
    CHECK(strlen(sql) == (size_t)n);
    CHECK(!strncmp(sql, fn, strlen(fn)));
    CHECK(!strcmp(sql + n - 2, ");"));
    if (k->name) {
        const char *lit = sql + strlen(fn), *pre, *post;
        char seedpost[64];
        if (k->kind == PGLOCK_KEY_TEXT) {
            pre = "('x' || substr(encode(sha256(convert_to(";
            post = ", 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint);";
        } else if (k->kind == PGLOCK_KEY_HASHTEXT) {
            pre = "hashtext(";
            post = "));";
        } else {
            pre = "hashtextextended(";
            snprintf(seedpost, sizeof seedpost, ", %lld));",
                     (long long)k->seed);
            post = seedpost;
        }
        CHECK(!strncmp(lit, pre, strlen(pre)));
        char *back = malloc(k->name_len + 1);
        size_t backlen;
        const char *rest = unquote(lit + strlen(pre), back, &backlen);
        CHECK(backlen == k->name_len);
        CHECK(!memcmp(back, k->name, k->name_len));
        CHECK(!strcmp(rest, post));
        free(back);
    }
    free(sql);
}

static void same_key(const pglock_key *a, const pglock_key *b)
{
    CHECK(a->kind == b->kind);
    CHECK(a->id == b->id && a->ns == b->ns && a->nsid == b->nsid);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = '\0';
    size_t len = strlen(text);

    CHECK(pglock__utf8_valid(text, size) ==
          utf8_reference((const unsigned char *)data, size));

    pglock_key k;
    pglock_error e;
    const char *err = e.message;
    int rc = pglock_key_parse(&k, text, &e);
    if (rc != PGLOCK_OK) {
        CHECK(rc == PGLOCK_EINVAL);
        CHECK(!strncmp(err, "invalid key \"", 13));
        for (const char *p = err; *p; p++)
            CHECK((unsigned char)*p >= 0x20 && *p != 0x7F);
        free(text);
        return 0;
    }
    CHECK(len > 0 && text[0] != '@');
    CHECK(pglock__utf8_valid(text, len));
    char buf[64], again_text[64];
    pglock_key again;
    uint32_t c, o;
    int sub;
    switch (k.kind) {
    case PGLOCK_KEY_INT64:
    case PGLOCK_KEY_PAIR: {
        CHECK(k.name == NULL);
        int n = pglock_key_format(&k, buf, sizeof buf);
        CHECK(n > 0 && n < (int)sizeof buf);
        /* Canonical: the integer part is exactly what format prints. */
        const char *num = text;
        if (!strncmp(text, "int:", 4))
            num = text + 4;
        else if (!strncmp(text, "pair:", 5))
            num = text + 5;
        CHECK(!strcmp(num, buf));
        CHECK(pglock_key_parse(&again, buf, NULL) == PGLOCK_OK);
        same_key(&k, &again);
        CHECK(pglock_key_locktag(&k, &c, &o, &sub) == PGLOCK_OK);
        CHECK(sub == (k.kind == PGLOCK_KEY_PAIR ? 2 : 1));
        break;
    }
    case PGLOCK_KEY_TEXT:
        CHECK(k.name >= text && k.name + k.name_len == text + len);
        CHECK(k.name_len > 0);
        CHECK(k.id == pglock_name_to_int64(k.name, k.name_len));
        /* Its bigint, printed, is the same lock as an int key. */
        CHECK(pglock_key_format(&k, buf, sizeof buf) > 0);
        CHECK(pglock_key_parse(&again, buf, NULL) == PGLOCK_OK);
        CHECK(again.kind == PGLOCK_KEY_INT64 && again.id == k.id);
        snprintf(again_text, sizeof again_text, "text:%.50s", k.name);
        break;
    case PGLOCK_KEY_HASHTEXT:
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        CHECK(k.name >= text && k.name + k.name_len == text + len);
        CHECK(k.name_len > 0 && !k.resolved);
        CHECK(pglock_key_locktag(&k, &c, &o, &sub) == PGLOCK_EINVAL);
        CHECK(pglock_key_format(&k, buf, sizeof buf) == PGLOCK_EINVAL);
        k.id = (int64_t)len;
        k.resolved = 1;
        CHECK(pglock_key_locktag(&k, &c, &o, &sub) == PGLOCK_OK && sub == 1);
        break;
    default:
        CHECK(0);
    }
    check_sql(&k);
    free(text);
    return 0;
}
