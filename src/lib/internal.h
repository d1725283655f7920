/*
 * internal.h — what the library's files share.  Private: never installed.
 */
#ifndef PGLOCK_INTERNAL_H
#define PGLOCK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include "pglock.h"
#include "bounded_conn.h"
#include "error_text.h"

#define PGLOCK__DEFAULT_DEAD_PEER_MS 10000L
/* How long after the server's lock_timeout the client deadline fires: the
 * server normally answers first, so a timeout needs no cancel. */
#define PGLOCK__DEADLINE_GRACE_MS 250L
/* Bound on close's pg_advisory_unlock_all() and on follow-up queries
 * (pg_locks checks) when the caller gave no other bound. */
#define PGLOCK__CLOSE_TIMEOUT_MS 5000L
/* Xact lifetime: the transaction-local setting in which each lock statement
 * counts itself (heartbeat.c says why). */
#define PGLOCK__LOCKS_SETTING "pglock.lock_statements"
/* Xact lifetime: the savepoint every lock statement of the holding
 * transaction ends with, inside which the heartbeats run (heartbeat.c
 * says why). */
#define PGLOCK__BEAT_SAVEPOINT "pglock_beat"

/* One lock the client holds (its count): its pg_locks coordinates, mode and count.  A
 * legacy key (hashtext) is matched by its name too, so that it can be
 * unlocked without asking the server for its value again. */
typedef struct pglock__lock_entry {
    uint32_t classid;
    uint32_t objid;
    int objsubid;
    pglock_mode mode;
    int count;
    pglock_key_kind kind;
    int64_t seed;
    char *name; /* legacy kinds only, owned; else NULL */
} pglock__lock_entry;

struct pglock_client {
    PGconn *conn;             /* NULL once closed or lost */
    pglock_lifetime lifetime; /* in effect: SESSION or XACT */
    int in_xact; /* xact lifetime: the holding transaction is open */
    /* Xact lifetime: the lock statements the holding transaction has kept (its
     * PGLOCK__LOCKS_SETTING, which the heartbeat reads back). */
    long xact_locks;
    /* The connection parameters (our defaults, then the caller's), owned,
     * NULL-terminated: for the fencing token's second connection. */
    char **conn_keywords, **conn_values;
    int backend_pid; /* xact lifetime: the holding transaction's, or 0 */
    int server_version;
    char *database;
    pglock_options opts;
    pglock__lock_entry *locks;
    size_t nlocks, caplocks;
    int64_t confirmed_at;
    int heartbeat_busy; /* a heartbeat query is in flight */
    /* The heartbeat in flight got an error: 1, or 2 when it ends the
     * session (FATAL); decided on once its answer is complete. */
    int heartbeat_error;
    /* What the answer of the heartbeat in flight has shown so far: it can
     * come in several reads (over TLS, one record each; a notice the
     * server flushes between CommandComplete and ReadyForQuery splits it),
     * so it is kept here, not in one poll's locals.  confirmed: the
     * holding backend answered; taken: the xact check's count of lock
     * statements (-1: none); ended: the release's ROLLBACK after it. */
    int beat_confirmed, beat_ended;
    long beat_taken;
    /* The heartbeat in flight is the release (pglock__release_send()). */
    int releasing;
    /* Session lifetime: the release answered, so the session holds nothing,
     * and no call has been made on the client since (close then sends
     * no pg_advisory_unlock_all()). */
    int released;
    int hold_running;         /* a managed hold owns the client (hold.c) */
    struct pglock_hold *hold; /* that hold, which close must stop first */
    /* pglock_client_close() ran while a hold was on the client: the
     * struct stays, connectionless, for the hold, whose stop frees it. */
    int closed;
    int owner_pid; /* the process that opened the connection */
    /* Xact lifetime: a heartbeat failed inside its savepoint (a cancel),
     * so the holding transaction waits for ROLLBACK TO SAVEPOINT. */
    int beat_aborted;
    /* Session lifetime: the lock_timeout (ms) the session has now, as far as
     * the client knows, or -1: unknown.  A wait sends set_config() only
     * when it needs another value. */
    long lock_timeout_ms;
    int64_t heartbeat_sent_at;
    char sqlstate[6];
    char message[512];
    /* Stop requests (stop_request.c), while a hold watches for them: the
     * heartbeat's two columns, owned (NULL: not watching), and a buffer
     * for the heartbeat's text; stop_seen: the last try failed, so the
     * next heartbeat asks who; beat_stop: which column the heartbeat in
     * flight carries; stop_request: who asked, once an allowed role did
     * ("" until then). */
    char *stop_try, *stop_who, *stop_sql;
    size_t stop_sql_len;
    int stop_seen;
    int beat_stop;
    char stop_request[256];
};

/* ---- stop requests (stop_request.c) */

enum {
    PGLOCK__BEAT_STOP_NONE = 0, /* the heartbeat carries no stop column */
    PGLOCK__BEAT_STOP_TRY = 1,  /* the stop-request keys tried */
    PGLOCK__BEAT_STOP_WHO = 2   /* who asks, and whether that role may */
};
/* Starts watching the client's counted locks' stop requests: 0, or
 * PGLOCK_ENOMEM with the message set. */
int pglock__stop_watch_begin(pglock_client *c);
/* Stops watching (nothing to free is fine); stop_request is kept. */
void pglock__stop_watch_end(pglock_client *c);
/* The column the next heartbeat carries, or NULL when not watching;
 * notes which in beat_stop. */
const char *pglock__stop_column(pglock_client *c);
/* Reads a confirmed heartbeat's stop column (its index in r). */
void pglock__stop_answer(pglock_client *c, const PGresult *r, int column);

/* ---- a client's errors (client_state.c)
 *
 * A function on the caller's PGconn fills a pglock_error (err may be
 * NULL) with src/common/error_text.h's writers; a client keeps a copy of
 * its last error.  Messages are one line: whatever a format or the
 * server adds after a newline is cut. */

/* The client variants: the same error, kept on c (message and SQLSTATE)
 * instead; each returns the code.  pglock__fail_error() copies an error
 * made by the two above onto the client. */
int pglock__fail(pglock_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
int pglock__fail_result(pglock_client *c, const PGresult *res,
                        const char *what);
int pglock__fail_error(pglock_client *c, const pglock_error *err);
/* NULL when key is one the pglock_key rule accepts (a known kind, reserved
 * bytes zero), else why not, for "invalid key: %s".  key may be NULL. */
const char *pglock__key_invalid(const pglock_key *key);
/* The message of a key pglock__key_invalid() refuses (%s: its reason). */
#define PGLOCK__INVALID_KEY_FMT \
    "invalid key: %s; make keys with the pglock_key_*() constructors"
/* A fencing token from the text of its transaction's xid8 and the name of
 * the WAL file being written (its first 8 hex digits: the timeline):
 * timeline << 48 | xid8 (fencing.c).  0, or -1 when either is malformed
 * or past the budget (timeline 1..32767, xid8 below 2^48). */
int pglock__token_make(const char *xid8, const char *walfile, int64_t *out);

/* ---- heartbeats (heartbeat.c): pglock_heartbeat() in two halves, for
 * the managed hold, which must never block */

/* Sends a heartbeat (pglock_heartbeat()'s query) without waiting: 0, or
 * PGLOCK_ESTATE (one is in flight already), PGLOCK_ECONNLOST, ... with
 * the message on the client. */
int pglock__heartbeat_send(pglock_client *c);
/* Reads the answer of the heartbeat in flight, never blocking: call it
 * when the client's socket is readable (or at a deadline).
 * PGLOCK_EAGAIN until the answer is in, then 0 (confirmed: confirmed_at
 * moves to the send), PGLOCK_ESERVER or PGLOCK_ECONNLOST, as
 * pglock_heartbeat() returns them. */
int pglock__heartbeat_poll(pglock_client *c);

/* ---- the release as the last heartbeat (heartbeat.c) */

/* Sends, as a heartbeat that pglock__heartbeat_poll() reads, the release
 * of every lock whose answer is also the proof that they were held up to
 * it: session lifetime, pg_advisory_unlock_all() run only if the statement
 * reaches the holding backend; xact lifetime, the heartbeat's check and a
 * ROLLBACK in one Query message.  A poll that returns 0 has released
 * them all; PGLOCK_ESERVER (session lifetime only: a statement error on a
 * session that goes on) may be sent again.  Codes as
 * pglock__heartbeat_send(). */
int pglock__release_send(pglock_client *c);

/* ---- the client's state (client_state.c) */

/* The connection is gone (or abandoned): finish it, forget every hold. */
void pglock__client_drop(pglock_client *c);
/* A lock call's failure, decided once, by the public call: err onto the
 * client (its message and SQLSTATE), and on PGLOCK_ECONNLOST the
 * connection closed with every count (pglock.h: any PGLOCK_ECONNLOST
 * closes the client's connection).  Returns err->code. */
int pglock__client_failed(pglock_client *c, const pglock_error *err);
/* 0 when the client can start a query; else PGLOCK_ECONNLOST (the
 * connection was lost earlier) or PGLOCK_ESTATE (a heartbeat is in
 * flight, or this is a forked child's copy of the client), with the
 * message set. */
int pglock__client_ready(pglock_client *c);
/* What a public call that would change the client's locks or connection
 * asks first: PGLOCK_ESTATE, with no message (the client's message is the
 * hold's), while a managed hold runs on the client; else
 * pglock__client_ready(). */
int pglock__client_enter(pglock_client *c);
/* 1 when the hold owns the client (its message too): a call refused for
 * that must not write on the client. */
int pglock__client_held(const pglock_client *c);
/* Before a read-only query of the client's own (pglock_client_holders(),
 * pglock_client_key_resolve()): 0, or why it cannot run now (a managed
 * hold, a heartbeat in flight, a lost connection, a holding transaction
 * that waits for its heartbeat's ROLLBACK TO SAVEPOINT), the message on
 * the client except under a hold.  c may be NULL (PGLOCK_EINVAL). */
int pglock__client_read_begin(pglock_client *c);
/* After it, with the query's code rc (0: done) and its error: the message onto
 * the client, the client dropped on PGLOCK_ECONNLOST, and in a holding
 * transaction a failure costs the last lock statement's savepoint only
 * (beat_aborted).  Returns rc. */
int pglock__client_read_end(pglock_client *c, int rc, const pglock_error *err);
/* Frees the client's memory (the connection is gone already). */
void pglock__client_free(pglock_client *c);

/* ---- the hold and the client's close (hold.c) */

/* The client is being closed while hold h runs on it: its thread is
 * stopped, and the hold reports a loss (its fd readable, on_lost called
 * on the closing thread), since the close releases the locks.  h stays
 * valid until pglock_hold_stop(), which frees the client too. */
void pglock__hold_client_closing(struct pglock_hold *h);
/* Forgets every counted lock. */
void pglock__locks_clear(pglock_client *c);
/* The client's count for key+mode (lock.c), or NULL. */
pglock__lock_entry *pglock__lock_find(const pglock_client *c,
                                      const pglock_key *key, pglock_mode mode);
/* A lock of a resolved key the server just granted, to a statement sent
 * at sent_at (lock.c, lock_any.c): counted, the client's error
 * cleared and its lease confirmed from sent_at.  0, or PGLOCK_ENOMEM with
 * the connection closed (a lock nobody could unlock or verify must go). */
int pglock__lock_granted(pglock_client *c, const pglock_key *key,
                         pglock_mode mode, int64_t sent_at);
/* The answer of a session-lock statement: its results (the caller
 * PQclear()s each) and whether the wait was cancelled by us
 * (pglock__await()'s *cancelled). */
typedef struct pglock__answer {
    PGresult *res[PGLOCK__MAX_RESULTS];
    int nres;
    int cancelled;
} pglock__answer;
/* Sends a session-lock statement, sql with its nparams params, on the
 * client's connection and waits for its answer until deadline (a
 * pglock_now_ms() value, -1: none) or the client's interrupt
 * (lock.c, lock_any.c).  0 with at least one result in *a; else
 * PGLOCK_ECONNLOST with no result kept and the error in *err (the
 * statement could not be sent, the connection failed, or a cancel was
 * not confirmed within cancel_timeout_ms), for the caller to close the
 * client. */
int pglock__session_statement(pglock_client *c, const char *sql, int nparams,
                              const Oid *types, const char *const *params,
                              int64_t deadline, pglock__answer *a,
                              pglock_error *err);
/* After a failed session-lock statement (lock.c): which key of a
 * set the backend of conn was granted anyway, in mode (pg_locks has the
 * last word).  The set: ids, its bigints as an int8[] literal ("{1,2,3}"),
 * all of one objsubid (1 bigints, 2 int4 pairs); or a set of one
 * unresolved legacy key, resolve (ids unused), whose bigint the same
 * statement computes and writes into it.  Returns the index of the first
 * key held or -1 for none, *err untouched (the failed statement's error
 * stands); else PGLOCK_ECONNLOST with *err "could not check pg_locks
 * after a failed <failed>; ...", for the caller to close the client. */
int pglock__granted_among(PGconn *conn, const char *ids, int objsubid,
                          pglock_mode mode, pglock_key *resolve,
                          const char *failed, pglock_error *err);

/* ---- keys (pg_locks coordinates: pglock_key_locktag() in key.c) */

/* 1 for the legacy kinds (hashtext, hashtextextended), whose value the
 * server computes. */
int pglock__key_is_legacy(const pglock_key *key);
/* Formats key for messages: "123", "42:9", "hashtext(\"x\")". */
void pglock__key_describe(const pglock_key *key, char *buf, size_t len);
/* The key of an advisory locktag (pg_locks classid, objid, objsubid):
 * objsubid 1 is a bigint (classid high 32 bits, objid low), 2 a pair of
 * int4 (classid, objid).  0, or -1 for any other objsubid (holders.c). */
int pglock__key_from_locktag(uint32_t classid, uint32_t objid, int objsubid,
                             pglock_key *out);
/* The next locktag of a list of them as bigints, classid:objid, separated
 * by spaces ("-5 4294967296"); *list moves past it.  0, or -1 at the end
 * of the list or at anything that is not a bigint (holders.c). */
int pglock__locktag_next(const char **list, uint32_t *classid, uint32_t *objid);

/* ---- SQL for a lock call (xact_lock.c) */

typedef enum pglock__op {
    PGLOCK__OP_LOCK,  /* pg_advisory_lock */
    PGLOCK__OP_TRY,   /* pg_try_advisory_lock */
    PGLOCK__OP_UNLOCK /* pg_advisory_unlock */
} pglock__op;

/* pglock__call_make() fills it: the function call for key with
 * parameters starting at $first, e.g. "pg_advisory_lock_shared($2)"; the
 * parameter values (pointing into vbuf or at the key's name), their
 * declared types and their number, at most 2; and, for an unresolved
 * legacy key, the expression for its bigint over the same parameters, so
 * that the answer can resolve it ("" for every other key).  A number key's
 * parameters are declared int8 or int4 (types) rather than cast in the
 * SQL: the same exact match of the catalog's function, for less of the
 * server's parsing (make bench's section 11 measures it). */
#define PGLOCK__INT8OID 20
#define PGLOCK__INT4OID 23
typedef struct pglock__call {
    char fn[160];
    char value_expr[96]; /* "" unless legacy */
    const char *params[2];
    Oid types[2]; /* 0: the server infers it (a legacy key's) */
    char vbuf[2][24];
    int nparams;
} pglock__call;
void pglock__call_make(pglock__call *out, const pglock_key *key,
                       pglock_mode mode, pglock__op op, int xact, int first);

/* The same call with literals instead of parameters, for a simple-protocol
 * multi-statement query (transaction locks); names are escaped with
 * PQescapeLiteral.  Returns 0 or PGLOCK_ENOMEM / PGLOCK_EINVAL. */
int pglock__call_literal(char *buf, size_t len, PGconn *conn,
                         const pglock_key *key, pglock_mode mode, pglock__op op,
                         int xact);

/* A legacy key's bigint as a SQL expression with literals, for a
 * simple-protocol query: "hashtext('name')::int8" (the name escaped with
 * PQescapeLiteral).  0 or PGLOCK_ENOMEM / PGLOCK_EINVAL (not a legacy key,
 * or too long). */
int pglock__value_literal(char *buf, size_t len, PGconn *conn,
                          const pglock_key *key);

/* ---- the lock connection's settings (settings.c) */

/* The values derived from the lease T_s (else dead_peer_ms D), as strings
 * for libpq and set_config(); settings.c explains them.  With a lease, no
 * kernel ends the session before T_s: tcp_user_timeout T_s, keepalives
 * idle T_s/3 then probes T_s/9 apart until idle + count * interval >= T_s.
 * Without one, a dead peer is noticed within about 2D/3.  The server
 * checks its client every D/3 (at least 1 s). */
typedef struct pglock__derived {
    char ka_idle[24], ka_interval[24], ka_count[24], user_timeout[24];
    char check_interval[24], lease[24];
} pglock__derived;
void pglock__settings_derive(const pglock_options *o, pglock__derived *d);

/* The SQL expression that sets name to value (local: "true" for
 * transaction-locally, else "false") where the server has the setting
 * (since server_version_num `since`; 0: every version), by one rule for
 * the server version `version` (0: unknown): known and new enough, the
 * set_config() call; known and older, "NULL" (returns 1: the caller may
 * leave it out); unknown, a CASE that tests server_version_num.  0 or 1,
 * or -1 when it does not fit in len. */
int pglock__setting_since(char *buf, size_t len, int version, int since,
                          const char *name, const char *value,
                          const char *local);

/* A select-list expression that applies the lock connection's settings
 * (lease, statement and transaction timeouts, keepalives, connection
 * check), for server version `version` (server_version_num; 0: unknown,
 * the statement reads its own); local: transaction-locally
 * (set_config(..., true)), else for the session.  The lease goes to
 * idle_in_transaction_session_timeout when local, else to
 * idle_session_timeout.  Literal values only (numbers we format).
 * Returns 0 or PGLOCK_EINVAL (too long). */
int pglock__settings_sql(char *buf, size_t len, const pglock_options *o,
                         int local, int version);

/* ---- transaction locks (xact_lock.c) */

/* The column that carries pg_backend_pid() in a prelude's answer. */
#define PGLOCK__PID_COLUMN "pglock_pid"
/* The column that carries a legacy key's bigint in a prelude's answer. */
#define PGLOCK__VALUE_COLUMN "pglock_key_value"
/* The column that carries the index of the key a set's statement took
 * (pglock_lock_any()). */
#define PGLOCK__INDEX_COLUMN "pglock_index"

/* What an attempt adds to the plain transaction lock: the statement that
 * opens the transaction ("BEGIN" when NULL), statements sent before the
 * lock in the same query (no trailing ';'; NULL: none), the wait's
 * interrupt, where to put a PGLOCK__PID_COLUMN value (NULL: nowhere), a
 * key to resolve from a PGLOCK__VALUE_COLUMN value once the lock is held
 * (NULL: none) and where to put a PGLOCK__INDEX_COLUMN value (NULL:
 * nowhere); and a statement sent after the lock's, in the same message,
 * once its savepoint is released (NULL: none). */
typedef struct pglock__xact_req {
    const char *begin_sql;
    const char *prelude;
    const char *after;
    int interrupt_fd;
    long cancel_timeout_ms;
    int *pid_out;
    pglock_key *resolve;
    int *index_out;
} pglock__xact_req;

/* pglock_xact_begin_lock() (begin) or pglock_xact_lock() (!begin), with
 * req's additions; same contract. */
int pglock__xact_lock_req(PGconn *conn, const pglock_key *key, pglock_mode mode,
                          long timeout_ms, int begin,
                          const pglock__xact_req *req, pglock_error *err);
/* The same attempt with the lock statement given: stmt, one SELECT whose
 * last column is true when the lock was taken (a try, timeout_ms
 * PGLOCK_TRY) or any row (a wait).  Opens the transaction (begin) or puts
 * stmt under a savepoint, and undoes it when it fails. */
int pglock__xact_run(PGconn *conn, const char *stmt, int begin, long timeout_ms,
                     const pglock__xact_req *req, pglock_error *err);

/* ---- the client's xact lifetime (lock.c) */

/* pglock_lock_any() with the xact lifetime: stmt (a try of a set of
 * transaction locks, see lock_any.c) in the holding transaction, with
 * pglock_lock()'s bookkeeping; 0 with the index taken in *index_out (not
 * yet counted), PGLOCK_EBUSY when none was free, else a code with its
 * error in *err, for the caller to decide (pglock__client_failed()). */
int pglock__holding_xact_any(pglock_client *c, const char *stmt, int *index_out,
                             pglock_error *err);
/* Ends the holding transaction, if one is open (ROLLBACK: it wrote
 * nothing), bounded by timeout_ms (-1: none).  0, or PGLOCK_ECONNLOST
 * with its error in *err, for the caller to close the client. */
int pglock__holding_xact_end(pglock_client *c, long timeout_ms,
                             pglock_error *err);

#endif
