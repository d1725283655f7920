/*
 * nightly.c — the advisory-locks article's story, told with libpglock.
 *
 *   pglock_demo [CONNINFO]     (default: libpq's PG* variables)
 *
 * 1. Three processes race for tonight's billing job: exactly one runs it.
 * 2. A per-customer mutex: customer 9's work is serialised, customer 10's
 *    proceeds at once (transaction locks, pair keys).
 * 3. A string key: its bigint, the same from C and from SQL.
 * 4. What pg_locks shows for a lock, decoded back into the key.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "pglock.h"

static const char *conninfo;

static pglock_client *open_or_die(void)
{
    pglock_client *c;
    int rc = pglock_client_open(&c, conninfo, NULL);
    if (rc != 0) {
        fprintf(stderr, "pglock_demo: error: %s\n", pglock_client_error(c));
        exit(69);
    }
    return c;
}

static PGconn *connect_or_die(void)
{
    PGconn *conn = PQconnectdb(conninfo ? conninfo : "");
    if (PQstatus(conn) != CONNECTION_OK) {
        fprintf(stderr, "pglock_demo: error: %s", PQerrorMessage(conn));
        exit(69);
    }
    return conn;
}

/* ---- 1. the nightly job, three hosts */

static int host(int n, int start_fd, int done_fd)
{
    pglock_client *c = open_or_die();
    pglock_key key;
    pglock_key_text(&key, "nightly-billing");
    char go;
    if (read(start_fd, &go, 1) != 1) /* all three start together */
        return 70;
    int rc = pglock_lock(c, &key, PGLOCK_EXCLUSIVE, PGLOCK_TRY);
    if (rc == 0) {
        printf("  host %d: got the lock, running tonight's billing\n", n);
        fflush(stdout);
        /* Hold it until every other host has given up, as a slow job
         * would: a late host must still find it taken. */
        if (read(done_fd, &go, 1) < 0)
            return 70;
        printf("  host %d: billing done, releasing\n", n);
        pglock_client_close(c);
        return 0;
    }
    printf("  host %d: %s, skipping\n", n,
           rc == PGLOCK_EBUSY ? "another host runs it" : pglock_strerror(rc));
    fflush(stdout);
    pglock_client_close(c);
    return rc == PGLOCK_EBUSY ? 1 : 70;
}

static int nightly(void)
{
    puts("1. Three hosts race for the nightly billing job (key "
         "'nightly-billing', try-lock):");
    int start[2], done[2];
    if (pipe(start) || pipe(done))
        return 70;
    pid_t pids[3];
    for (int i = 0; i < 3; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(start[1]);
            close(done[1]);
            _exit(host(i + 1, start[0], done[0]));
        }
    }
    close(start[0]);
    close(done[0]);
    /* Start them together (each connects first, then reads "go"). */
    if (write(start[1], "GGG", 3) != 3)
        return 70;
    close(start[1]);
    int ran = 0, skipped = 0;
    for (int finished = 0; finished < 3; finished++) {
        int status;
        if (wait(&status) < 0)
            return 70;
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 70;
        ran += code == 0;
        skipped += code == 1;
        if (finished == 1)
            close(done[1]); /* two hosts are gone: let the winner finish */
    }
    printf("  => ran %d time(s), skipped %d time(s)\n\n", ran, skipped);
    return ran == 1 && skipped == 2 ? 0 : 1;
}

/* ---- 2. per-customer mutex */

typedef struct worker {
    const char *name;
    int customer;
    PGconn *conn;
    int rc;
} worker;

static void *work(void *arg)
{
    worker *w = arg;
    pglock_key key;
    pglock_error err = {0};
    pglock_key_pair(&key, 42, w->customer); /* 42 = "recalculate invoices" */
    w->rc = pglock_xact_begin_lock(w->conn, &key, PGLOCK_EXCLUSIVE, 10000, -1,
                                   &err);
    if (w->rc == 0)
        printf("  %s: recalculating customer %d\n", w->name, w->customer);
    else
        printf("  %s: %s\n", w->name, err.message);
    fflush(stdout);
    return NULL;
}

static int waiting(PGconn *obs, PGconn *who)
{
    char sql[160];
    snprintf(sql, sizeof sql,
             "SELECT count(*) FROM pg_locks WHERE pid = %d"
             " AND NOT granted",
             PQbackendPID(who));
    PGresult *r = PQexec(obs, sql);
    int n = PQresultStatus(r) == PGRES_TUPLES_OK ? atoi(PQgetvalue(r, 0, 0))
                                                 : 0;
    PQclear(r);
    return n;
}

static int customers(void)
{
    puts("2. A per-customer mutex (transaction locks on the pair (42, id)):");
    PGconn *obs = connect_or_die();
    worker a = {"worker A", 9, connect_or_die(), 0};
    worker b = {"worker B", 9, connect_or_die(), 0};
    worker c = {"worker C", 10, connect_or_die(), 0};
    work(&a);
    pthread_t tb;
    pthread_create(&tb, NULL, work, &b);
    for (int i = 0; i < 1000 && !waiting(obs, b.conn); i++)
        usleep(5000);
    printf("  worker B: waiting for customer 9 (the server queues it)\n");
    work(&c);
    printf("  worker C: customer 10 did not wait for customer 9\n");
    PQclear(PQexec(c.conn, "COMMIT"));
    printf("  worker A: done with customer 9, COMMIT releases the lock\n");
    fflush(stdout);
    PQclear(PQexec(a.conn, "COMMIT"));
    pthread_join(tb, NULL);
    PQclear(PQexec(b.conn, "COMMIT"));
    PQfinish(a.conn);
    PQfinish(b.conn);
    PQfinish(c.conn);
    PQfinish(obs);
    puts("");
    return a.rc || b.rc || c.rc;
}

/* ---- 3 and 4. a string key, and pg_locks */

static int string_key_and_pg_locks(void)
{
    const char *name = "nightly-billing";
    pglock_key key;
    pglock_key_text(&key, name);
    char sql[512];
    pglock_key_sql(&key, PGLOCK_EXCLUSIVE, PGLOCK_SESSION, sql, sizeof sql);
    printf("3. A string key: '%s' is the bigint %" PRId64 "\n", name, key.id);
    printf("  (first 8 bytes of SHA-256, big-endian); any SQL client takes "
           "the same lock:\n  %s\n",
           sql);

    PGconn *obs = connect_or_die();
    PGresult *r = PQexec(
        obs, "SELECT ('x' || substr(encode(sha256("
             "convert_to('nightly-billing', 'UTF8')), 'hex'), 1, 16))"
             "::bit(64)::bigint");
    int same = PQresultStatus(r) == PGRES_TUPLES_OK &&
               strtoll(PQgetvalue(r, 0, 0), NULL, 10) == key.id;
    printf("  the server computes %s => %s\n\n", PQgetvalue(r, 0, 0),
           same ? "the same key" : "A DIFFERENT KEY");
    PQclear(r);

    puts("4. What pg_locks shows while a client holds it:");
    pglock_client *c = open_or_die();
    pglock_lock(c, &key, PGLOCK_EXCLUSIVE, PGLOCK_TRY);
    char q[300];
    snprintf(q, sizeof q,
             "SELECT classid, objid, objsubid, mode, granted"
             " FROM pg_locks WHERE locktype = 'advisory' AND pid = %d",
             pglock_client_backend_pid(c));
    r = PQexec(obs, q);
    for (int i = 0; i < PQntuples(r); i++)
        printf("  classid=%s objid=%s objsubid=%s mode=%s granted=%s\n",
               PQgetvalue(r, i, 0), PQgetvalue(r, i, 1), PQgetvalue(r, i, 2),
               PQgetvalue(r, i, 3), PQgetvalue(r, i, 4));
    PQclear(r);
    uint32_t classid, objid;
    int objsubid;
    pglock_key_locktag(&key, &classid, &objid, &objsubid);
    printf("  = (classid << 32 | objid) with objsubid %d: the bigint %" PRId64
           ", '%s'\n",
           objsubid, (int64_t)(((uint64_t)classid << 32) | objid), name);
    pglock_client_close(c);
    PQfinish(obs);
    return same ? 0 : 1;
}

int main(int argc, char **argv)
{
    conninfo = argc > 1 ? argv[1] : NULL;
    setvbuf(stdout, NULL, _IOLBF, 0);
    int rc = nightly();
    rc |= customers();
    rc |= string_key_and_pg_locks();
    return rc ? 1 : 0;
}
