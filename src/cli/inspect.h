/*
 * inspect.h — one look at the server's advisory locks: pg_locks joined
 * with pg_stat_activity, pg_database and pg_blocking_pids, in one SQL
 * statement, decoded into keys.  Used by `pglock status`.
 */
#ifndef PGLOCK_CLI_INSPECT_H
#define PGLOCK_CLI_INSPECT_H

#include <stdint.h>
#include <libpq-fe.h>
#include "pglock.h"

/* One advisory lock request: a row of pg_locks and its session. */
typedef struct inspect_entry {
    const char *database;  /* datname; NULL if the database is gone */
    pglock_key key;        /* PGLOCK_KEY_INT64 or PGLOCK_KEY_PAIR */
    int exclusive;         /* 1: ExclusiveLock, 0: ShareLock */
    int granted;           /* 1: holds, 0: waits */
    int pid;               /* 0: no backend (a prepared transaction) */
    int has_session;       /* a pg_stat_activity row was found */
    int hidden;            /* pg_stat_activity hides this session's details
                              from our role (<insufficient privilege>) */
    const char *user;              /* NULL when unknown */
    const char *application_name;  /* "" when unset; NULL when unknown */
    const char *client_addr;       /* NULL: local socket or hidden */
    int client_port;               /* -1: Unix socket; 0: unknown */
    const char *state;             /* NULL when hidden */
    /* Holders: the lock has been held at least held_min_s (from
     * state_change, when the session is idle: the lock was taken before
     * its last statement ended) and at most held_max_s (from
     * backend_start: no lock is older than its session); -1: unknown. */
    double held_min_s;
    double held_max_s;
    /* Waiters: how long, and from which column ("waitstart", or
     * "query_start" as an upper bound while waitstart is not yet set or
     * before PostgreSQL 14); -1 / NULL when unknown. */
    double waiting_s;
    const char *waiting_source;
    /* Waiters: pg_blocking_pids(pid), the sessions it waits for. */
    const int *blocked_by;
    int n_blocked_by;
    int order;             /* position in the server's answer */
} inspect_entry;

typedef struct inspect_snapshot {
    PGresult *res;          /* the strings above point into it */
    inspect_entry *entries; /* sorted by database, key, holders first */
    int n;
    int *pids;              /* storage for blocked_by */
} inspect_snapshot;

/*
 * Runs the one query (a single round trip) and fills *out.  all_databases
 * 0: only the current database.  Read-only: safe through a pooler.
 * 0 on success; -1 with one line in err (out is left empty).
 * Free with inspect_snapshot_clear().
 */
int inspect_advisory_locks(PGconn *conn, int all_databases,
                           inspect_snapshot *out, char *err, size_t errlen);
void inspect_snapshot_clear(inspect_snapshot *snap);

/* The key of an advisory locktag (pg_locks classid, objid, objsubid):
 * objsubid 1 is a bigint (classid high 32 bits, objid low), 2 a pair of
 * int4 (classid, objid).  0, or -1 for any other objsubid. */
int inspect_key_from_locktag(uint32_t classid, uint32_t objid, int objsubid,
                             pglock_key *out);

/* 1 if a and b are the same lock (same pg_locks coordinates). */
int inspect_same_lock(const pglock_key *a, const pglock_key *b);

/* "123" or "42:9", as a user writes the key. */
void inspect_key_text(const pglock_key *key, char *buf, size_t len);

#endif
