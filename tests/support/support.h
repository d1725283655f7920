/*
 * support.h — helpers for cmocka live tests against the harness servers
 * (tests/harness/README.md lists the PGLOCK_TEST_* variables).
 *
 * Include after <cmocka.h>'s prerequisites; this header includes them.
 * Every pt_* function that "asserts" fails the current cmocka test (with
 * the libpq error in the message) instead of returning an error.
 */
#ifndef PGLOCK_TEST_SUPPORT_H
#define PGLOCK_TEST_SUPPORT_H

#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <libpq-fe.h>
#include "pglock.h"

/* The value of environment variable var; if it is unset or empty, prints
 * "# skip: VAR is unset (...)" and skips the current test. */
const char *pt_env_or_skip(const char *var);

/* Connects to conninfo (blocking) and asserts success; PQfinish() it. */
PGconn *pt_connect(const char *conninfo);

/* Connects to conninfo (as pt_connect) and takes the exclusive bigint
 * advisory lock key on that session: a holder for tests to wait behind. */
PGconn *pt_connect_holding(const char *conninfo, int64_t key);

/* Runs sql (no parameters) and asserts it succeeded; returns the first
 * column of the first row as an integer (0 if there is no row or it is
 * NULL).  For counts, pids, booleans ('t' = 1, 'f' = 0). */
long pt_query_int(PGconn *conn, const char *sql);

/* Runs sql and asserts it succeeded; for statements without a result. */
void pt_exec_ok(PGconn *conn, const char *sql);

/* pt_query_int and pt_exec_ok on SQL formatted printf-style (trusted test
 * input, at most 2047 bytes). */
__attribute__((format(printf, 2, 3))) long pt_query_intf(PGconn *conn,
                                                         const char *fmt, ...);
__attribute__((format(printf, 2, 3))) void pt_execf(PGconn *conn,
                                                    const char *fmt, ...);

/* Opens a pglock client on conninfo with opts (NULL: defaults) and asserts
 * success; pglock_client_close() it. */
pglock_client *pt_open_client(const char *conninfo, const pglock_options *opts);

/* A bigint advisory key unique to this process and call, so that tests
 * sharing a server stay apart. */
int64_t pt_unique_key(void);

/* Options at their defaults but the lease, lease_ms. */
pglock_options pt_lease_options(long lease_ms);

/* Opens a pglock client on conninfo with opts (NULL: defaults) and takes
 * key id exclusively (try), asserting both.  pglock_client_close() it. */
pglock_client *pt_client_taking(const char *conninfo,
                                const pglock_options *opts, int64_t id);

/* Starts a hold of c driven by drive, that calls on_lost(arg, ...) (NULL:
 * none), asserting it started. */
void pt_hold_start(pglock_hold **hold, pglock_client *c,
                   pglock_hold_drive drive, pglock_hold_lost_fn on_lost,
                   void *arg);

/* Opens a pglock client on conninfo with opts (NULL: defaults) and takes
 * a fresh pt_unique_key() exclusively (try), asserting both; the key goes
 * to *k, its value to *id and the client's backend pid to *pid (each may
 * be NULL).  pglock_client_close() it. */
pglock_client *pt_client_holding(const char *conninfo,
                                 const pglock_options *opts, pglock_key *k,
                                 int64_t *id, int *pid);

/* A second holder: a connection of its own whose thread waits in
 * pg_advisory_lock(key).  got_at is when the server granted it, on
 * pglock_now_ms()'s clock; done is set once it was. */
typedef struct pt_waiter {
    PGconn *conn;
    int64_t key;
    int64_t got_at;
    volatile sig_atomic_t done;
    pthread_t thread;
} pt_waiter;

/* Connects w to conninfo and starts its thread waiting for key; returns
 * once observer sees it waiting (asserted, within 10 s). */
void pt_waiter_start(pt_waiter *w, const char *conninfo, PGconn *observer,
                     int64_t key);

/* Waits up to timeout_ms for w's grant: 1 with its thread joined, else 0
 * with the thread left waiting (w must then outlive it: make it static).
 * PQfinish(w->conn) after either. */
int pt_waiter_granted(pt_waiter *w, long timeout_ms);

/* Calls pg_cancel_backend(pid) as fast as the server can for ms, in one
 * statement on a connection of its own, the way an admin tool or a script
 * that cancels long statements would: whatever pid runs meanwhile is
 * cancelled.  Blocks for ms, or until pid is no backend any more. */
void pt_cancel_storm(const char *conninfo, int pid, long ms);

/* Cancels the next count statements of backend pid, each for sure (the
 * signal is sent from inside the statement: tests/support/
 * cancel_statements.sh says how and why), within bound_s seconds;
 * conninfo is a superuser's.  Returns how many of pid's statements the
 * server logged as cancelled meanwhile. */
long pt_cancel_statements(const char *conninfo, int pid, int count,
                          int bound_s);

/* How many lines of backend pid in the primary's log (the harness's
 * $PGLOCK_TEST_DIR/primary.log; skips the test without it) hold text,
 * e.g. "canceling statement due to user request". */
long pt_logged(int pid, const char *text);

/* 1 if another session (observer) could take the bigint advisory lock key
 * right now in exclusive (pt_key_free) or shared (pt_key_shared_free)
 * mode, else 0; a lock it takes is released again at once. */
int pt_key_free(PGconn *observer, int64_t key);

/* 1 when backend pid has neither a transaction id nor a snapshot
 * (pg_stat_activity's backend_xid and backend_xmin, read by observer):
 * it holds back no VACUUM and uses up no xid. */
int pt_backend_holds_no_xid(PGconn *observer, int pid);
int pt_key_shared_free(PGconn *observer, int64_t key);

/* Polls cond(arg) every 10 ms until it returns nonzero or timeout_ms pass.
 * Returns 1 if the condition became true, 0 on timeout. */
int pt_wait_until(int (*cond)(void *arg), void *arg, long timeout_ms);
/* Polls until key is free in exclusive mode (pt_key_free), for at most
 * timeout_ms: 1 when it is, else 0.  A closed session's locks go as its
 * backend exits, a moment after the close. */
int pt_wait_key_free(PGconn *observer, int64_t key, long timeout_ms);

/* 1 if backend pid is waiting for an advisory lock (seen from observer, a
 * connection to the same server), else 0. */
int pt_backend_waiting_on_advisory(PGconn *observer, int pid);

/* Waits up to timeout_ms for pt_backend_waiting_on_advisory(observer, pid).
 * Returns 1 once it waits, 0 on timeout. */
int pt_wait_backend_waiting(PGconn *observer, int pid, long timeout_ms);

/* Number of advisory locks backend pid holds (granted rows of pg_locks). */
long pt_backend_advisory_granted(PGconn *observer, int pid);

/* Waits up to timeout_ms until backend pid is gone from pg_stat_activity.
 * Returns 1 once it is gone, 0 on timeout. */
int pt_wait_backend_gone(PGconn *observer, int pid, long timeout_ms);

/* Number of rows of pg_locks with locktype 'advisory' and, if where is
 * not NULL, matching the SQL condition where (e.g. "granted and pid = 42"
 * or "objid = 7"; trusted test input, pasted into the query). */
long pt_count_advisory(PGconn *observer, const char *where);

/* Fills the server's shared lock table from filler: it takes session
 * advisory locks (pairs in a namespace of their own) until the server
 * answers 53200 "out of shared memory", and keeps them.  Until
 * pt_lock_table_release(filler), any new lock on the server fails with
 * 53200, and so does a new connection: open every connection the test
 * needs first.  Session locks survive the failed statement, so the table
 * stays full.  Suites run one at a time, so no other test sees it. */
void pt_lock_table_fill(PGconn *filler);
void pt_lock_table_release(PGconn *filler);

/* Sends one line command to the proxy's control socket
 * ($PGLOCK_TEST_PROXY_CTL; skips the test when unset) and stores the reply
 * line, without its newline, in reply.  Returns 0, or -1 on error. */
int pt_proxy_command(const char *cmd, char *reply, size_t len);

/* The proxy commands, asserting an "ok" answer.  cut: every byte on every
 * proxied connection is swallowed, nothing is closed.  heal: forward again;
 * connections that lost bytes during the cut are closed at the heal.
 * reset: zero the message counters. */
void pt_proxy_cut(void);
void pt_proxy_heal(void);
void pt_proxy_reset(void);

/* For a call made while the proxy is cut: runs call(arg) in a thread,
 * waits up to timeout_ms for it to return, then heals the proxy (whose
 * sockets close at the heal, which unsticks a call that would never
 * return) and joins the thread.  Returns the milliseconds the call took,
 * or -1 if it had not returned within timeout_ms. */
long pt_call_on_cut_network(void (*call)(void *arg), void *arg,
                            long timeout_ms);

/* Round trips ('Q' and 'S' messages) clients sent through the proxy since
 * the last reset; pt_proxy_messages() counts every frontend message. */
long pt_proxy_roundtrips(void);
long pt_proxy_messages(void);

/* Runs `$PGLOCK_TEST_HARNESS action` (e.g. "restart-primary",
 * "stop-primary immediate", "start-primary") and asserts it succeeded.
 * Skips the test when the harness runs no server of its own. */
void pt_harness(const char *action);

/* The partition server ($PGLOCK_TEST_PARTITION_*; skips the test when the
 * harness runs none).  cut: every packet of its TCP port is dropped inside
 * its network namespace, both ways, nothing answers (a real partition, not
 * the proxy's); heal: packets pass again.  Both assert success. */
void pt_partition_cut(void);
void pt_partition_heal(void);

/* Moves the calling thread into the partition's network namespace
 * (setns(2)): TCP sockets it opens from then on reach
 * $PGLOCK_TEST_PARTITION_TCP, and stay in the namespace after
 * pt_partition_leave() moves the thread back.  Asserts success (needs
 * root). */
void pt_partition_enter(void);
void pt_partition_leave(void);

/* Milliseconds on CLOCK_MONOTONIC. */
long pt_now_ms(void);

#endif
