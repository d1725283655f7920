/*
 * Resolving the legacy key forms (hashtext, hashtextextended), whose value
 * only the server can compute: one query on the caller's connection,
 * waited for like every other query (wait.c), so that a dead network or a
 * stuck server cannot hold the caller forever.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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
    int bad = pglock__error_begin(err);
    if (bad)
        return bad;
    if (!key)
        return pglock__error_set(err, PGLOCK_EINVAL, NULL, "no key given");
    if (!pglock__key_version_ok(key))
        return pglock__error_set(err, PGLOCK_EINVAL, NULL,
                                 "invalid key: version %u; make keys with "
                                 "the pglock_key_*() constructors",
                                 key->version);
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
    if (!PQsendQueryParams(conn, sql, nparams, NULL, values, NULL, NULL, 0))
        return pglock__error_result(err, NULL, conn,
                                    "could not compute the key");
    pglock__wait w = {.deadline = pglock__deadline(PGLOCK__CLOSE_TIMEOUT_MS, 0),
                      .interrupt = NULL,
                      .interrupt_fd = -1,
                      .cancel_timeout_ms = PGLOCK__DEFAULT_CANCEL_TIMEOUT_MS};
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres = 0, cancelled = 0;
    pglock__wait_end end = pglock__await(conn, &w, res, &nres, &cancelled);
    const PGresult *last = nres > 0 ? res[nres - 1] : NULL;
    int rc;
    if (end == PGLOCK__WAIT_ABANDONED) {
        /* The query may still run: only ending the connection is sure. */
        shutdown(PQsocket(conn), SHUT_RDWR);
        rc = pglock__error_set(err, PGLOCK_ECONNLOST, NULL,
                               "could not compute the key: no answer within "
                               "%ld ms, and the cancel was not answered, so "
                               "the connection was shut down: PQfinish() it",
                               PGLOCK__CLOSE_TIMEOUT_MS);
    } else if (end == PGLOCK__WAIT_CONNLOST || !last) {
        rc = pglock__error_result(err, last, conn, "could not compute the key");
    } else if (PQresultStatus(last) == PGRES_TUPLES_OK) {
        rc = take_value(key, last, err);
    } else {
        rc = pglock__error_result(err, last, conn, "could not compute the key");
        if (rc == PGLOCK_EINTR && cancelled == PGLOCK_ETIMEDOUT) {
            /* our own cancel, at the deadline */
            rc = pglock__error_set(err, PGLOCK_ETIMEDOUT, "57014",
                                   "could not compute the key: no answer "
                                   "within %ld ms", PGLOCK__CLOSE_TIMEOUT_MS);
        }
    }
    pglock__clear_results(res, nres);
    return rc;
}
