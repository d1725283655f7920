/*
 * Resolving the legacy key forms (hashtext, hashtextextended), whose value
 * only the server can compute: one query on the caller's connection,
 * waited for like every other query (src/common/bounded_query.c), so
 * that a dead network or a stuck server cannot hold the caller forever.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "internal.h"


/* Reads the one bigint of a successful answer into key. */
static int take_value(pglock_key *key, const PGresult *res, pglock_error *err)
{
    if (PQntuples(res) != 1 || PQnfields(res) != 1 || PQgetisnull(res, 0, 0))
        return pglock__error_set(err, PGLOCK_ESERVER, NULL,
                                 "unexpected answer computing the key");
    const char *v = PQgetvalue(res, 0, 0);
    char *end;
    errno = 0;
    long long n = strtoll(v, &end, 10);
    if (errno || end == v || *end)
        return pglock__error_set(err, PGLOCK_ESERVER, NULL,
                                 "unexpected key value \"%.40s\"", v);
    key->id = (int64_t)n;
    key->resolved = 1;
    return PGLOCK_OK;
}

int pglock_key_resolve(pglock_key *key, PGconn *conn, pglock_error *err)
{
    pglock__error_begin(err);
    if (!key)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "no key given");
    const char *why = pglock__key_invalid(key);
    if (why)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 PGLOCK__INVALID_KEY_FMT, why);
    if (!pglock__key_is_legacy(key))
        return PGLOCK_OK; /* nothing to ask: the value is known */
    if (!key->name)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "key has no name");
    if (!conn || PQstatus(conn) != CONNECTION_OK)
        return pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                                 "no connection to the server");

    char seed[32];
    snprintf(seed, sizeof seed, "%" PRId64, key->seed);
    const char *values[2] = {key->name, seed};
    /* hashtext() is int4; the cast sign-extends it exactly as
     * pg_advisory_lock(hashtext(...)) does when it picks the bigint form. */
    const char *sql = key->kind == PGLOCK_KEY_HASHTEXT
                          ? "SELECT hashtext($1)::bigint"
                          : "SELECT hashtextextended($1, $2::bigint)";
    int nparams = key->kind == PGLOCK_KEY_HASHTEXT ? 1 : 2;
    pglock_error qerr = {0};
    PGresult *res = pglock__exec_params(conn, sql, nparams, values,
                                        PGLOCK__CLOSE_TIMEOUT_MS, &qerr);
    int rc;
    if (!res)
        rc = pglock__error_set(err, qerr.code, qerr.sqlstate,
                               "could not compute the key: %s", qerr.message);
    else if (PQresultStatus(res) == PGRES_TUPLES_OK)
        rc = take_value(key, res, err);
    else
        rc = pglock__error_result(err, res, conn, "could not compute the key");
    PQclear(res);
    return rc;
}

int pglock_client_key_resolve(pglock_client *client, pglock_key *key)
{
    if (key && !pglock__key_invalid(key) && !pglock__key_is_legacy(key))
        return PGLOCK_OK; /* nothing to ask, so nothing to refuse */
    int rc = pglock__client_read_begin(client);
    if (rc)
        return rc;
    pglock_error err;
    rc = pglock_key_resolve(key, client->conn, &err);
    return pglock__client_read_end(client, rc, &err);
}
