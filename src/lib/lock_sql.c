/*
 * The SQL of a lock call: which advisory-lock function, and how the key
 * is passed (parameters for the client's own connection, literals for the
 * transaction locks' multi-statement queries).
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include "internal.h"


void pglock__key_describe(const pglock_key *key, char *buf, size_t len)
{
    switch (key->kind) {
    case PGLOCK_KEY_PAIR:
        snprintf(buf, len, "%" PRId32 ":%" PRId32, key->ns, key->nsid);
        return;
    case PGLOCK_KEY_INT64:
        snprintf(buf, len, "%" PRId64, key->id);
        return;
    case PGLOCK_KEY_TEXT:
        snprintf(buf, len, "%" PRId64 " (\"%.60s\")", key->id,
                 key->name ? key->name : "");
        return;
    case PGLOCK_KEY_HASHTEXT:
        snprintf(buf, len, "hashtext(\"%.60s\")", key->name ? key->name : "");
        return;
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        snprintf(buf, len, "hashtextextended(\"%.60s\", %" PRId64 ")",
                 key->name ? key->name : "", key->seed);
        return;
    }
    snprintf(buf, len, "(invalid key)");
}

static const char *fn_name(pglock_mode mode, pglock__op op, int xact)
{
    static const char *const names[3][2][2] = {
        {{"pg_advisory_lock", "pg_advisory_lock_shared"},
         {"pg_advisory_xact_lock", "pg_advisory_xact_lock_shared"}},
        {{"pg_try_advisory_lock", "pg_try_advisory_lock_shared"},
         {"pg_try_advisory_xact_lock", "pg_try_advisory_xact_lock_shared"}},
        {{"pg_advisory_unlock", "pg_advisory_unlock_shared"},
         {"pg_advisory_unlock", "pg_advisory_unlock_shared"}},
    };
    return names[op][xact ? 1 : 0][mode == PGLOCK_SHARED ? 1 : 0];
}

void pglock__call_make(pglock__call *out, const pglock_key *key,
                       pglock_mode mode, pglock__op op, int xact, int first)
{
    const char *fn = fn_name(mode, op, xact);
    memset(out, 0, sizeof *out);
    if (pglock__key_is_legacy(key) && key->resolved) {
        /* The server already told us its value: use the bigint. */
        pglock_key k = *key;
        k.kind = PGLOCK_KEY_INT64;
        pglock__call_make(out, &k, mode, op, xact, first);
        return;
    }
    switch (key->kind) {
    case PGLOCK_KEY_PAIR:
        snprintf(out->vbuf[0], sizeof out->vbuf[0], "%" PRId32, key->ns);
        snprintf(out->vbuf[1], sizeof out->vbuf[1], "%" PRId32, key->nsid);
        snprintf(out->fn, sizeof out->fn, "%s($%d, $%d)", fn, first,
                 first + 1);
        out->params[0] = out->vbuf[0];
        out->params[1] = out->vbuf[1];
        out->types[0] = out->types[1] = PGLOCK__INT4OID;
        out->nparams = 2;
        return;
    case PGLOCK_KEY_HASHTEXT:
        snprintf(out->fn, sizeof out->fn, "%s(hashtext($%d))", fn, first);
        snprintf(out->value_expr, sizeof out->value_expr,
                 "hashtext($%d)::int8", first);
        out->params[0] = key->name;
        out->nparams = 1;
        return;
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        snprintf(out->vbuf[1], sizeof out->vbuf[1], "%" PRId64, key->seed);
        snprintf(out->fn, sizeof out->fn,
                 "%s(hashtextextended($%d, $%d::int8))", fn, first, first + 1);
        snprintf(out->value_expr, sizeof out->value_expr,
                 "hashtextextended($%d, $%d::int8)", first, first + 1);
        out->params[0] = key->name;
        out->params[1] = out->vbuf[1];
        out->nparams = 2;
        return;
    case PGLOCK_KEY_INT64:
    case PGLOCK_KEY_TEXT:
    default:
        snprintf(out->vbuf[0], sizeof out->vbuf[0], "%" PRId64, key->id);
        snprintf(out->fn, sizeof out->fn, "%s($%d)", fn, first);
        out->params[0] = out->vbuf[0];
        out->types[0] = PGLOCK__INT8OID;
        out->nparams = 1;
        return;
    }
}

int pglock__call_literal(char *buf, size_t len, PGconn *conn,
                         const pglock_key *key, pglock_mode mode,
                         pglock__op op, int xact)
{
    const char *fn = fn_name(mode, op, xact);
    int n;
    if (pglock__key_is_legacy(key) && !key->resolved) {
        char *lit = PQescapeLiteral(conn, key->name, key->name_len);
        if (!lit)
            return PGLOCK_ENOMEM;
        if (key->kind == PGLOCK_KEY_HASHTEXT)
            n = snprintf(buf, len, "%s(hashtext(%s))", fn, lit);
        else
            n = snprintf(buf, len, "%s(hashtextextended(%s, (%" PRId64
                         ")::int8))", fn, lit, key->seed);
        PQfreemem(lit);
    } else if (key->kind == PGLOCK_KEY_PAIR) {
        n = snprintf(buf, len, "%s((%" PRId32 ")::int4, (%" PRId32 ")::int4)",
                     fn, key->ns, key->nsid);
    } else {
        n = snprintf(buf, len, "%s((%" PRId64 ")::int8)", fn, key->id);
    }
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}

int pglock__value_literal(char *buf, size_t len, PGconn *conn,
                          const pglock_key *key)
{
    if (!pglock__key_is_legacy(key) || !key->name)
        return PGLOCK_EINVAL;
    char *lit = PQescapeLiteral(conn, key->name, key->name_len);
    if (!lit)
        return PGLOCK_ENOMEM;
    int n;
    if (key->kind == PGLOCK_KEY_HASHTEXT)
        n = snprintf(buf, len, "hashtext(%s)::int8", lit);
    else
        n = snprintf(buf, len, "hashtextextended(%s, (%" PRId64 ")::int8)",
                     lit, key->seed);
    PQfreemem(lit);
    return n < 0 || (size_t)n >= len ? PGLOCK_EINVAL : 0;
}
