/*
 * A program outside the project that uses an installed libpglock, built by
 * tests/cli/library_install.bats through pkg-config and through CMake's
 * find_package(pglock).  It takes a session lock on KEYNAME and checks,
 * from a second connection of its own, that pg_locks shows the lock
 * granted to the client's backend at the coordinates the library computed,
 * while a managed hold keeps the lease (versioned options, as 0.2 wants).
 * Usage: consumer CONNINFO KEYNAME; prints "held by PID" and exits 0.
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <libpq-fe.h>
#include <pglock.h>

int main(int argc, char **argv)
{
    if (argc != 3)
        return 2;
    if (strcmp(pglock_version(), PGLOCK_VERSION) != 0)
        return 3;
    pglock_key k;
    uint32_t classid, objid;
    int objsubid;
    if (pglock_key_text(&k, argv[2]) != 0 ||
        pglock_key_locktag(&k, &classid, &objid, &objsubid) != 0)
        return 4;
#if !defined(PGLOCK_HAS_VERSIONED_STRUCTS) || !defined(PGLOCK_HAS_MANAGED_HOLD)
#error "pglock.h lacks the 0.2 features"
#endif
    pglock_options opts;
    if (pglock_options_init(&opts, PGLOCK_OPTIONS_VERSION) != 0)
        return 4;
    opts.lease_ms = 10000;
    pglock_client *c = NULL;
    if (pglock_client_open(&c, argv[1], &opts) != 0) {
        fprintf(stderr, "open: %s\n", pglock_client_error(c));
        return 5;
    }
    if (pglock_lock(c, &k, PGLOCK_EXCLUSIVE, PGLOCK_TRY) != 0) {
        fprintf(stderr, "lock: %s\n", pglock_client_error(c));
        return 6;
    }
    pglock_hold *hold;
    if (pglock_hold_start(&hold, c, NULL) != 0) {
        fprintf(stderr, "hold: %s\n", pglock_client_error(c));
        return 8;
    }
    char pid[16], cls[16], obj[16], sub[16];
    snprintf(pid, sizeof pid, "%d", pglock_client_backend_pid(c));
    snprintf(cls, sizeof cls, "%" PRIu32, classid);
    snprintf(obj, sizeof obj, "%" PRIu32, objid);
    snprintf(sub, sizeof sub, "%d", objsubid);
    const char *params[] = {pid, cls, obj, sub};
    PGconn *other = PQconnectdb(argv[1]);
    PGresult *r = PQexecParams(
        other,
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'"
        " AND granted AND mode = 'ExclusiveLock' AND pid = $1::int"
        " AND classid = $2::oid AND objid = $3::oid AND objsubid = $4::int",
        4, NULL, params, NULL, NULL, 0);
    int ok = PQresultStatus(r) == PGRES_TUPLES_OK &&
             strcmp(PQgetvalue(r, 0, 0), "1") == 0;
    if (!ok)
        fprintf(stderr, "pg_locks: %s%s\n", PQerrorMessage(other),
                PQresultStatus(r) == PGRES_TUPLES_OK ? PQgetvalue(r, 0, 0)
                                                     : "");
    PQclear(r);
    PQfinish(other);
    if (pglock_hold_stop(hold) != 0) {
        fprintf(stderr, "hold: %s\n", pglock_client_error(c));
        ok = 0;
    }
    pglock_client_close(c);
    if (!ok)
        return 7;
    printf("held by %s\n", pid);
    return 0;
}
