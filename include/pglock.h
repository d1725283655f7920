/* SPDX-License-Identifier: PostgreSQL */
/*
 * pglock.h — distributed locks on PostgreSQL advisory locks, over libpq.
 * Copyright (c) 2026, The pglock Developers; the PostgreSQL Licence
 * (LICENSE at the top of the source tree).
 *
 * This header is the whole public API of libpglock.
 *
 * Error convention
 *   Every function that can fail returns 0 on success or a negative
 *   PGLOCK_E* code.  The message (with the server's SQLSTATE where there is
 *   one) goes to one of two places, never to a buffer of the caller's:
 *   - the handle the function was given: pglock_client_error() for a
 *     client, pglock_hold_error() for a managed hold;
 *   - for a function with no handle of ours (those on the caller's own
 *     PGconn, pglock_key_parse()), a caller-supplied pglock_error (it
 *     needs no initialising: each call sets every field; NULL: none).
 *   pglock_strerror() turns a code into words.  Codes are append-only.
 *
 * Ownership
 *   A pglock_client is created by pglock_client_open*() and freed by
 *   pglock_client_close(), and by nothing else.  Strings returned by
 *   accessor functions are borrowed: valid until the next call on the same
 *   handle.  A pglock_key is a plain value; a key made from a name borrows
 *   that name (the pointer is kept, not copied): keep the name alive as long
 *   as the key is used.
 *
 * Threads
 *   The library keeps no global state, and leaves no thread running
 *   behind a call but a managed hold's own, which pglock_hold_stop()
 *   joins (a cancel's thread is joined before its call returns).  No
 *   two threads may use one pglock_client (or one PGconn) at the same
 *   time; different clients may be used from different threads freely.
 *   A managed hold (pglock_hold_*) owns its client while it runs: see
 *   "Managed hold" below.
 *
 * fork()
 *   A child's copy of a client shares the parent's socket, session and
 *   locks.  In the child every call on it returns PGLOCK_ESTATE, except
 *   pglock_client_close(), which closes only the child's copy of the
 *   socket: it sends nothing (no unlock, no libpq Terminate) and does not
 *   shutdown() it, so the parent's session and locks are untouched.  A
 *   hold's handle in the child is the parent's too (its thread is not
 *   there): pglock_hold_step() and pglock_hold_confirm() return
 *   PGLOCK_ESTATE, pglock_hold_stop() frees the child's copy only
 *   (PGLOCK_ESTATE).  A child that exits or execs untouched leaves the
 *   parent alone too; a child that needs a lock opens its own client.
 *
 * Structs that can grow
 *   Each public struct follows one of three rules:
 *   - Options (pglock_options, pglock_hold_options) begin with
 *     `unsigned int version`.  The library reads only the fields that
 *     version has, so a later release can append fields without breaking
 *     a program built against this header.  Set it with the struct's
 *     init function, or initialise with its PGLOCK_*_OPTIONS_INIT macro
 *     (the same defaults); a zero or unknown version is refused with
 *     PGLOCK_EINVAL and a message that says so.  Fields are only ever
 *     appended; a struct's PGLOCK_*_VERSION grows by one whenever its
 *     layout does.
 *   - Values (pglock_key, pglock_error) have a fixed size and layout
 *     within a MAJOR.  A key is passed in arrays and embedded in
 *     pglock_holder, so its size cannot change; it keeps reserved space
 *     instead (the rule is at its definition).  pglock_error is written by
 *     the library only, and whole.
 *   - pglock_holder is allocated by the library and read through a
 *     pointer: it grows at its end only (see "Who holds what").
 *
 * ABI and SONAME policy
 *   The shared library's SONAME is libpglock.so.MAJOR (PGLOCK_VERSION_MAJOR),
 *   libpglock.so.1 since 1.0 (before it, libpglock.so.0.MINOR: each 0.x
 *   MINOR could break).
 *   Within one MAJOR, releases only add: functions, enum values, error
 *   codes, options fields behind a new PGLOCK_*_VERSION (old versions
 *   keep being accepted), meanings for a key's reserved bytes, fields at
 *   pglock_holder's end, and PGLOCK_HAS_* macros; a program built against an
 *   older header of the same MAJOR runs unchanged.  Anything else (a
 *   removed or changed function, a field moved, an old struct version no
 *   longer accepted) bumps MAJOR, and with it the SONAME.  Before 1.0
 *   (MAJOR 0) each MINOR could break the ABI and had its own SONAME; 1.0
 *   froze it.  The CMake package follows the same rule:
 *   find_package(pglock 1.0) accepts any 1.x (SameMajorVersion; before
 *   1.0, find_package(pglock 0.2) accepted 0.2.x only).  The project's
 *   tests record every public struct's layout and every exported symbol,
 *   and fail when either changes against these rules.
 *
 * Feature macros
 *   PGLOCK_HAS_* tell at compile time what this header offers (as libpq's
 *   LIBPQ_HAS_*); pglock_version() tells what is linked at run time.
 *
 * Keys
 *   A key is a 64-bit integer, a pair of 32-bit integers (namespace, id),
 *   or a text name.  A name's key is the first 8 bytes of SHA-256 of its
 *   UTF-8 bytes, read big-endian as a signed 64-bit integer; from SQL:
 *     ('x' || substr(encode(sha256(convert_to(NAME, 'UTF8')), 'hex'), 1, 16))
 *       ::bit(64)::bigint
 *   Legacy keys hashtext(NAME) and hashtextextended(NAME, SEED) are computed
 *   by the server.  The reference for keys is pglock(3), Keys, and keys.md
 *   in the documentation of pglock's source.
 */
#ifndef PGLOCK_H
#define PGLOCK_H

#include <stddef.h>
#include <stdint.h>
#include <libpq-fe.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PGLOCK_VERSION_MAJOR 1
#define PGLOCK_VERSION_MINOR 0
#define PGLOCK_VERSION_PATCH 0
#define PGLOCK_VERSION "1.0.0"

#if defined(__GNUC__)
#define PGLOCK_EXPORT __attribute__((visibility("default")))
#else
#define PGLOCK_EXPORT
#endif

/* Options structs begin with a version field, set by their init or by
 * their PGLOCK_*_OPTIONS_INIT macro. */
#define PGLOCK_HAS_VERSIONED_STRUCTS 1
/* pglock_hold_start() and friends: a lease kept alive for the caller (0.2). */
#define PGLOCK_HAS_MANAGED_HOLD 1
/* pglock_hold_release(): the last heartbeat and the release in one round
 * trip. */
#define PGLOCK_HAS_HOLD_RELEASE 1
/* pglock_hold_deadline(), pglock_hold_stop_by(), and the hold options'
 * stop_budget_ms (PGLOCK_HOLD_OPTIONS_VERSION 2). */
#define PGLOCK_HAS_HOLD_CLOCK 1
/* The options' connect_timeout_ms (PGLOCK_OPTIONS_VERSION 2). */
#define PGLOCK_HAS_CONNECT_TIMEOUT 1
/* pglock_client_holders() and pglock_client_key_resolve(): reads on the
 * client's own connection. */
#define PGLOCK_HAS_CLIENT_READS 1
/* Stop requests: pglock_key_stop_request(), pglock_hold_stop_request()
 * and the hold options' watch_stop_requests (PGLOCK_HOLD_OPTIONS_VERSION
 * 3). */
#define PGLOCK_HAS_STOP_REQUESTS 1

/* Returns PGLOCK_VERSION of the library actually linked. */
PGLOCK_EXPORT const char *pglock_version(void);

/* ---------------------------------------------------------------- errors */

/*
 * Every error code, with its value and its words: the one list that the
 * enum below, pglock_strerror() and pglock_err_name() are all made from
 * (as libuv's UV_ERRNO_MAP).  XX(NAME, VALUE, TEXT) names PGLOCK_NAME.
 * Values never change and codes are only appended (the ABI test checks
 * each value).
 */
/* (one code a line, with what it means: clang-format would join them) */
/* clang-format off */
#define PGLOCK_ERRNO_MAP(XX)                                                  \
    XX(OK, 0, "success")                                                      \
    /* held elsewhere and the call was a try */                               \
    XX(EBUSY, -1, "lock is held by another session")                          \
    /* the wait reached its timeout; not held */                              \
    XX(ETIMEDOUT, -2, "timed out waiting for the lock")                       \
    /* the wait was interrupted; not held */                                  \
    XX(EINTR, -3, "wait for the lock was interrupted")                        \
    /* unlock of a lock this client does not hold */                          \
    XX(ENOTHELD, -4, "lock is not held by this client")                       \
    /* the connection or its backend is gone: every session lock of the      \
     * client is lost */                                                      \
    XX(ECONNLOST, -5, "connection to the server was lost")                    \
    /* could not connect or authenticate */                                   \
    XX(ECONNECT, -6, "could not connect to the server")                       \
    /* a pooler is in the path: session locks refused */                      \
    XX(EPOOLER, -7, "a connection pooler is in the path")                     \
    /* the server is a standby (in recovery) */                               \
    XX(ESTANDBY, -8, "server is a standby")                                   \
    /* the server's lock table is full (53200) */                             \
    XX(ELOCKTABLE, -9, "server's lock table is full")                         \
    /* invalid argument (key, mode, timeout, ...) */                          \
    XX(EINVAL, -10, "invalid argument")                                       \
    /* out of memory in the client */                                         \
    XX(ENOMEM, -11, "out of memory")                                          \
    /* any other error reported by the server */                              \
    XX(ESERVER, -12, "server reported an error")                              \
    /* wrong state: e.g. no transaction open, or an operation already in     \
     * progress */                                                            \
    XX(ESTATE, -13, "operation not allowed in this state")                    \
    /* the server is too old for what was asked */                            \
    XX(EVERSION, -14, "server version is too old")                            \
    /* non-blocking call: not finished yet */                                 \
    XX(EAGAIN, -15, "operation still in progress")

#define PGLOCK_ERRNO_GEN_(name, value, text) PGLOCK_##name = (value),
enum { PGLOCK_ERRNO_MAP(PGLOCK_ERRNO_GEN_) };
#undef PGLOCK_ERRNO_GEN_
/* clang-format on */

/* A short description of code, never NULL ("unknown error" for others). */
PGLOCK_EXPORT const char *pglock_strerror(int code);
/* The code's name ("PGLOCK_EBUSY"), never NULL. */
PGLOCK_EXPORT const char *pglock_err_name(int code);

/* Error details for functions that work on the caller's PGconn.  Every
 * such call sets all three fields on entry (0, "", "" until it fails), so
 * an error needs no initialising.  Its layout is fixed: only the library
 * writes it, and always whole, so it has no version (a later release that
 * tells more will do so through a new function, not a larger struct). */
typedef struct pglock_error {
    int code;          /* the same code the function returned */
    char sqlstate[6];  /* server SQLSTATE, "" when there is none */
    char message[512]; /* one line, PostgreSQL message style */
} pglock_error;

/* ------------------------------------------------------------------ keys */

typedef enum pglock_key_kind {
    PGLOCK_KEY_INT64 = 1,    /* pg_advisory_lock(bigint) */
    PGLOCK_KEY_PAIR = 2,     /* pg_advisory_lock(int, int) */
    PGLOCK_KEY_TEXT = 3,     /* a name, hashed by the SHA-256 rule */
    PGLOCK_KEY_HASHTEXT = 4, /* pg_advisory_lock(hashtext(name)) */
    PGLOCK_KEY_HASHTEXTEXTENDED =
        5 /* pg_advisory_lock(hashtextextended(name, seed)) */
} pglock_key_kind;

/*
 * A key is a plain value of fixed size: make it on the stack, copy it,
 * keep arrays of it (pglock_lock_any()), as pglock_holder embeds it.  An
 * opaque key would cost an allocation and a free per key, and arrays of
 * pointers, for a value of a few integers; so the key stays a struct, and
 * its growth comes from reserved space instead of a larger size.
 *
 * The rule: sizeof(pglock_key) and the offsets of its fields never change
 * within a MAJOR.  A later release may give a meaning to bytes of
 * reserved, where all zeros means what this release does.  The
 * constructors below (and pglock_key_parse()) zero them; a key built by
 * hand must too (start from `pglock_key k = {0};` or memset).  Every
 * function that takes a key refuses one whose reserved bytes are not all
 * zero, or whose kind is not one of pglock_key_kind, with PGLOCK_EINVAL,
 * so that no program comes to depend on what they hold today.
 */
typedef struct pglock_key {
    pglock_key_kind kind;
    int64_t id;           /* INT64 and TEXT: the bigint.  Legacy forms: the
                          bigint once resolved (see resolved), else 0 */
    int32_t ns;           /* PAIR: the namespace (first int) */
    int32_t nsid;         /* PAIR: the id (second int) */
    int64_t seed;         /* HASHTEXTEXTENDED: the seed */
    const char *name;     /* TEXT and legacy forms: borrowed, NUL-terminated */
    size_t name_len;      /* bytes in name, without the NUL */
    int resolved;         /* legacy forms: id holds the server's value */
    uint64_t reserved[4]; /* zero; see the rule above */
} pglock_key;

/* Constructors.  pglock_key_text() and the legacy forms reject names that
 * are not valid UTF-8 (PGLOCK_EINVAL). */
PGLOCK_EXPORT int pglock_key_int64(pglock_key *out, int64_t id);
PGLOCK_EXPORT int pglock_key_pair(pglock_key *out, int32_t ns, int32_t id);
PGLOCK_EXPORT int pglock_key_text(pglock_key *out, const char *name);
PGLOCK_EXPORT int pglock_key_hashtext(pglock_key *out, const char *name);
PGLOCK_EXPORT int pglock_key_hashtextextended(pglock_key *out, const char *name,
                                              int64_t seed);

/* The bigint of a name by the SHA-256 rule; len bytes at name. */
PGLOCK_EXPORT int64_t pglock_name_to_int64(const char *name, size_t len);

/*
 * Parses the textual key syntax every pglock tool reads:
 *   123, -5, int:-5           a 64-bit integer
 *   42:9, pair:42:9           a pair (namespace, id), each a 32-bit int
 *   nightly-billing, text:123 a name (hashed by the SHA-256 rule)
 *   hashtext:NAME             the server's hashtext(NAME)
 *   hashtextextended:SEED:NAME  the server's hashtextextended(NAME, SEED)
 * Parsing is strict: anything numeric-looking that is not exactly INT or
 * INT:INT in canonical form is an error, never a name.  The whole syntax
 * and its rules: keys.md in the documentation of pglock's source (the one
 * home of the key syntax).
 * "@NAME" (a registry lookup) is the caller's to handle: an error here.
 * The key borrows text.  On error returns PGLOCK_EINVAL with err (may be
 * NULL) set as by any function without a handle: its message one line,
 * 'invalid key "42:x": the id after ':' is not an integer'.
 */
PGLOCK_EXPORT int pglock_key_parse(pglock_key *out, const char *text,
                                   pglock_error *err);

/* pg_locks coordinates of the key, without a round trip.  Legacy forms
 * need pglock_key_resolve() first (else PGLOCK_EINVAL). */
PGLOCK_EXPORT int pglock_key_locktag(const pglock_key *key, uint32_t *classid,
                                     uint32_t *objid, int *objsubid);

/* Asks the server for a legacy key's value (one round trip on conn, which
 * must not be busy).  Bounded: with no answer within 5 s the query is
 * cancelled (PGLOCK_ETIMEDOUT); a cancel not answered within 2 s more (a
 * dead network) shuts conn's socket down and returns PGLOCK_ECONNLOST:
 * PQfinish() conn.  A cancel from another session is PGLOCK_EINTR. */
PGLOCK_EXPORT int pglock_key_resolve(pglock_key *key, PGconn *conn,
                                     pglock_error *err);

/* The key's identity as pglock prints it: "123" or "42:9" (also
 * PGLOCK_KEY_ID in run's environment).  Legacy forms need resolving. */
PGLOCK_EXPORT int pglock_key_format(const pglock_key *key, char *buf,
                                    size_t len);

typedef enum pglock_mode {
    PGLOCK_EXCLUSIVE = 0,
    PGLOCK_SHARED = 1
} pglock_mode;

typedef enum pglock_scope { PGLOCK_SESSION = 0, PGLOCK_XACT = 1 } pglock_scope;

/* The SQL any client can run to take the same lock, e.g.
 * "SELECT pg_advisory_lock(42, 9);".  Returns the length it needed (as
 * snprintf), or a negative code. */
PGLOCK_EXPORT int pglock_key_sql(const pglock_key *key, pglock_mode mode,
                                 pglock_scope scope, char *buf, size_t len);

/* ------------------------------------------------------ waiting: timeouts */

#define PGLOCK_TRY 0L             /* timeout_ms: do not wait */
#define PGLOCK_WAIT_FOREVER (-1L) /* timeout_ms: wait as long as it takes */

/* ---------------------------------------------------------- the client */

typedef struct pglock_client pglock_client;

/*
 * A lock's lifetime: what ends it besides its unlock, the session or the
 * transaction.  (The lock's mode is pglock_mode, exclusive or shared; a
 * "hold" is only ever the managed hold, pglock_hold_*.)
 *
 * PGLOCK_LIFETIME_SESSION: session locks on a direct connection; a pooler
 * in the path is refused (PGLOCK_EPOOLER).  The lease is the
 * server's idle_session_timeout.
 *
 * PGLOCK_LIFETIME_XACT: transaction locks inside one open READ COMMITTED
 * transaction that does nothing else, so that they pass a transaction-mode
 * pooler (PgBouncer): the pooler keeps that transaction on one server
 * backend.  The first pglock_lock() sends BEGIN, the transaction-local
 * settings (set_config(..., true), never a plain SET) and the lock in one
 * round trip; if the lock is not taken no transaction is left open.  Later
 * locks run inside the transaction under a savepoint.  The lease is the
 * server's idle_in_transaction_session_timeout.  The transaction has no
 * transaction id and no snapshot between statements, so it does not hold
 * back VACUUM.  Transaction locks cannot be released one by one: see
 * pglock_unlock().  A legacy key's value (hashtext) comes back in the
 * lock's own round trip.
 *
 * PGLOCK_LIFETIME_AUTO (the options' default): SESSION on a direct
 * connection, XACT behind a pooler (PQbackendPID() differs from
 * pg_backend_pid()).
 */
typedef enum pglock_lifetime {
    PGLOCK_LIFETIME_SESSION = 0,
    PGLOCK_LIFETIME_XACT = 1,
    PGLOCK_LIFETIME_AUTO = 2
} pglock_lifetime;

/* Version 2 added connect_timeout_ms; version 1 (without it) is still
 * accepted, and means connect_timeout_ms = 0. */
#define PGLOCK_OPTIONS_VERSION 2
typedef struct pglock_options {
    /* PGLOCK_OPTIONS_VERSION, set by pglock_options_init(). */
    unsigned int version;
    /* Server-side lease: idle_session_timeout of the lock connection, in
     * ms (with the xact lifetime: the holding transaction's
     * idle_in_transaction_session_timeout).  0: no lease; dead_peer_ms is
     * then T_s, the bound the rules below keep: a session leaves the
     * server's idle_session_timeout alone, and a holding transaction's
     * idle_in_transaction_session_timeout is dead_peer_ms (behind a
     * pooler nothing else frees a dead client's lock).  The session
     * lifetime with a lease needs PostgreSQL 14+ (else PGLOCK_EVERSION). */
    long lease_ms;
    /* fallback_application_name; NULL for "pglock". */
    const char *application_name;
    /* Interrupts: a wait (connecting, a lock, a fencing token) returns
     * PGLOCK_EINTR as soon as interrupt_fd is readable, e.g. the read end
     * of a self-pipe that a signal handler writes to.  The library only
     * polls it, never reads it: it stays readable until the caller drains
     * it.  -1: not interruptible. */
    int interrupt_fd;
    /* How long a cancel may take before the connection is closed instead,
     * in ms.  0: the default (2000). */
    long cancel_timeout_ms;
    /* libpq keepalives / tcp_user_timeout and the server's tcp_keepalives_*,
     * tcp_user_timeout and client_connection_check_interval derive from
     * T_s, the lease or, with none, this (ms), so that no kernel ends a
     * session that holds a lock before T_s, while a silent waiter's wait
     * ends after about T_s (figures: pglock(1), LEASES).  A managed hold
     * without a lease counts its client deadline and the caller's stop
     * budget from the same T_s.  0: the default (10000). */
    long dead_peer_ms;
    /* The locks' lifetime; PGLOCK_LIFETIME_AUTO by default, as pglock run
     * and lead (--mode=auto): PGLOCK_LIFETIME_SESSION insists on session
     * locks and refuses a pooler with PGLOCK_EPOOLER. */
    pglock_lifetime lifetime;
    /* Version 2.  The connect's bound, in ms, when the conninfo (or the
     * keywords) set no connect_timeout of their own: it takes the place
     * of PGCONNECT_TIMEOUT and PGLOCK_CONNECT_TIMEOUT_S.  libpq counts
     * whole seconds, at least 2: rounded up to that.  0 (the default):
     * no bound of the caller's (PGCONNECT_TIMEOUT, else
     * PGLOCK_CONNECT_TIMEOUT_S); PGLOCK_WAIT_FOREVER: no bound at all
     * (connect_timeout=0). */
    long connect_timeout_ms;
} pglock_options;

/* The defaults of PGLOCK_OPTIONS_VERSION, as an initialiser:
 *   pglock_options opts = PGLOCK_OPTIONS_INIT;
 * gives what pglock_options_init(&opts, PGLOCK_OPTIONS_VERSION) does. */
/* (clang-format would lay out this braced initializer as a block) */
/* clang-format off */
#define PGLOCK_OPTIONS_INIT \
    {PGLOCK_OPTIONS_VERSION, 0L, NULL, -1, 2000L, 10000L, \
     PGLOCK_LIFETIME_AUTO, 0L}
/* clang-format on */

/* Fills opts with the defaults for version (1 to 3: the fields that
 * version has, and no byte beyond them).  Returns 0, or PGLOCK_EINVAL for
 * a version this library does not know (opts is then left alone). */
PGLOCK_EXPORT int pglock_options_init(pglock_options *opts,
                                      unsigned int version);

/* connect_timeout, in seconds, when neither the conninfo nor
 * PGCONNECT_TIMEOUT sets one (libpq's own default is to wait forever). */
#define PGLOCK_CONNECT_TIMEOUT_S 10

/*
 * Opens a dedicated lock connection.  conninfo is a libpq conninfo string
 * or URI (or a bare dbname); NULL or "" means libpq's defaults (PG*
 * variables, service files, .pgpass).  The _params form takes libpq's
 * keyword/value arrays, NULL-terminated, with expand_dbname on.
 *
 * On open the client refuses a standby (PGLOCK_ESTANDBY) and, in session
 * lifetime, a pooler (PQbackendPID() differs from pg_backend_pid():
 * PGLOCK_EPOOLER), and applies the lock connection's settings (in xact
 * lifetime: transaction-locally, with the first lock).
 *
 * Bounded: the connect, and then its first query (which, through a full
 * pooler, is what waits for a server connection), each within
 * connect_timeout (the conninfo's, else opts->connect_timeout_ms, else
 * PGCONNECT_TIMEOUT, else PGLOCK_CONNECT_TIMEOUT_S; "0" waits forever),
 * for each host address tried; PGLOCK_EINTR as soon as
 * opts->interrupt_fd is readable.  A refused connection's
 * SQLSTATE, when the server gave one, is pglock_client_sqlstate()'s.
 *
 * *out is set even on failure (except PGLOCK_ENOMEM), so that
 * pglock_client_error() can tell why; close it with pglock_client_close().
 * opts may be NULL for the defaults; options whose version is zero or
 * unknown (not set by pglock_options_init()) are PGLOCK_EINVAL.
 */
PGLOCK_EXPORT int pglock_client_open(pglock_client **out, const char *conninfo,
                                     const pglock_options *opts);
PGLOCK_EXPORT int pglock_client_open_params(pglock_client **out,
                                            const char *const *keywords,
                                            const char *const *values,
                                            const pglock_options *opts);

/* Releases every lock (pg_advisory_unlock_all(), waiting for the answer,
 * so the locks are free when it returns), closes and frees.  NULL is ok.
 * Bounded, even on a dead network: it returns within 5 s in all, a
 * heartbeat left in flight included (its answer is awaited first); a
 * connection that does not answer in time is shut down instead, and the
 * server frees its locks when it notices (at the latest after the lease).
 * A client whose connection was lost closes at once.  With a managed
 * hold running on the client, the hold is stopped first and reports the
 * close as a loss; its handle stays valid until pglock_hold_stop(), which
 * frees what is left of the client (see "Managed hold", Thread rules).
 * In a forked child: closes the child's copy of the socket only (see
 * fork() at the top). */
PGLOCK_EXPORT void pglock_client_close(pglock_client *client);

/* The last error's message (one line, no newline; "" if none) and SQLSTATE
 * ("" if none).  Borrowed. */
PGLOCK_EXPORT const char *pglock_client_error(const pglock_client *client);
PGLOCK_EXPORT const char *pglock_client_sqlstate(const pglock_client *client);

/* The lifetime in effect: PGLOCK_LIFETIME_SESSION or PGLOCK_LIFETIME_XACT
 * (AUTO is settled when the client opens). */
/* (one line from PGLOCK_EXPORT to the name: the export test reads it) */
/* clang-format off */
PGLOCK_EXPORT pglock_lifetime pglock_client_lifetime(
    const pglock_client *client);
/* clang-format on */

/* The server backend's pid (with the xact lifetime: the backend of the holding
 * transaction, 0 while none is open), the database name, the server version
 * (e.g. 150018), the socket (for poll; -1 when closed). */
PGLOCK_EXPORT int pglock_client_backend_pid(const pglock_client *client);
PGLOCK_EXPORT const char *pglock_client_database(const pglock_client *client);
PGLOCK_EXPORT int pglock_client_server_version(const pglock_client *client);
PGLOCK_EXPORT int pglock_client_socket(const pglock_client *client);

/* The underlying connection, borrowed; for reading only (PQhost, ...).
 * Sending queries on it breaks the client's guarantees. */
PGLOCK_EXPORT PGconn *pglock_client_conn(const pglock_client *client);

/*
 * Session locks.  timeout_ms: PGLOCK_TRY, PGLOCK_WAIT_FOREVER or a
 * positive number of ms.  The server does the waiting; a timeout is
 * enforced by the server (lock_timeout) and by a client deadline.
 *
 * Returns 0 when held (re-entrant: each lock needs its unlock),
 * PGLOCK_EBUSY (try), PGLOCK_ETIMEDOUT, PGLOCK_EINTR, PGLOCK_ELOCKTABLE,
 * PGLOCK_ECONNLOST, ...  After any failed wait the server-side wait is
 * gone (cancelled, or the connection closed) and pg_locks has decided the
 * result: a lock granted in the instant the wait failed is reported as
 * held (0).
 *
 * Cancels: a wait ended by opts.interrupt_fd (PGLOCK_EINTR) or by the client
 * deadline (PGLOCK_ETIMEDOUT; the server's lock_timeout normally answers
 * first, SQLSTATE 55P03) is cancelled on the server, and the call waits
 * for the cancel's answer.  A cancel that is not answered within
 * opts.cancel_timeout_ms (a dead network) is abandoned and the connection
 * closed: the call returns PGLOCK_ECONNLOST, whether or not the client
 * held other locks, because they are all gone with the connection.  A
 * cancel never reaches a later statement: the next query is sent only
 * after the cancel request has finished.
 *
 * A wait longer than T_s (opts.lease_ms, else opts.dead_peer_ms) goes in
 * slices of T_s, each ended by the server's lock_timeout and asked for
 * again at once (queued anew; the timeout counts, and names, the whole
 * wait).  So a server that stops answering while its kernel keeps the
 * connection up (a frozen primary: no keepalive fails) ends even a
 * PGLOCK_WAIT_FOREVER wait: the slice and its cancel go unanswered, and
 * the call returns PGLOCK_ECONNLOST about T_s + cancel_timeout_ms after
 * the server fell silent.
 *
 * Any PGLOCK_ECONNLOST a call returns closes the client's connection:
 * every later call returns PGLOCK_ECONNLOST and pglock_lock_count() counts
 * nothing.  Two exceptions keep the connection open, because its locks
 * may still be held and closing it would free them while the caller's
 * work may still run: a heartbeat that fails on a session that goes on
 * (PGLOCK_ESERVER, below), and a managed hold's loss notice, after which
 * the connection is closed only by pglock_hold_stop() (then
 * pglock_client_close()) (see "Managed hold").
 */
PGLOCK_EXPORT int pglock_lock(pglock_client *client, const pglock_key *key,
                              pglock_mode mode, long timeout_ms);
/*
 * Any one free key of a set, in one round trip, never waiting: the slots
 * of a semaphore (pglock run --slots).  One statement tries keys[0],
 * keys[1], ... in order and stops at the first one granted, so at most one
 * is taken: a recursive query whose each step tries the next key
 * (pg_try_advisory_lock() or its _shared form) only while no step before
 * was granted, which holds whatever plan the server picks.  Returns 0 with
 * *index_out set to the key taken, counted as by pglock_lock() (unlock it
 * with pglock_unlock(); heartbeats check it like any other), or
 * PGLOCK_EBUSY when every key is held elsewhere (*index_out -1).
 * keys: 1 to PGLOCK_LOCK_ANY_MAX 64-bit keys (integers, names, resolved
 * legacy keys; pairs are PGLOCK_EINVAL), none of which the client holds
 * already in mode (PGLOCK_ESTATE).  opts.interrupt_fd cancels it
 * (PGLOCK_EINTR).  Session lifetime: after a failed statement pg_locks
 * decides, as for pglock_lock(): a key granted in the instant it failed
 * is reported as taken (0).  Xact lifetime (through a transaction-mode
 * pooler): the keys are tried with pg_try_advisory_xact_lock[_shared] in
 * the holding transaction, as one lock statement of pglock_lock()'s (it
 * opens the transaction when none is open, is counted for the heartbeat,
 * runs under a savepoint and checks the backend pid); a failed statement
 * is rolled back to its savepoint, which releases anything it was
 * granted, and the earlier locks of the transaction stay held.
 */
#define PGLOCK_HAS_LOCK_ANY 1
#define PGLOCK_LOCK_ANY_MAX 1024
PGLOCK_EXPORT int pglock_lock_any(pglock_client *client, const pglock_key *keys,
                                  int nkeys, pglock_mode mode, int *index_out);
/* Counts key in mode down by one (each pglock_lock() needs its unlock);
 * PGLOCK_ENOTHELD if this client does not hold it.  With the xact
 * lifetime a lock is released only with its transaction: an unlock that
 * leaves a count above zero just counts down; the last unlock of the last
 * lock the client holds ends the transaction (ROLLBACK: it wrote
 * nothing), which frees it; the last unlock of a lock while the client
 * holds others returns PGLOCK_ESTATE and changes nothing (use
 * pglock_unlock_all()).  While a managed hold runs on the client,
 * pglock_lock(), pglock_lock_any(), pglock_unlock() and
 * pglock_unlock_all() return PGLOCK_ESTATE at once and change nothing
 * (see "Managed hold"). */
PGLOCK_EXPORT int pglock_unlock(pglock_client *client, const pglock_key *key,
                                pglock_mode mode);
/* Releases every lock of the client (with the xact lifetime: ends the
 * transaction; no round trip when none is open).  Never sends
 * pg_advisory_unlock_all() through a pooler. */
PGLOCK_EXPORT int pglock_unlock_all(pglock_client *client);
/* How many times this client holds key in mode (its own count; 0 when
 * it does not). */
PGLOCK_EXPORT int pglock_lock_count(const pglock_client *client,
                                    const pglock_key *key, pglock_mode mode);

/*
 * Heartbeat: a cheap query confirming that the connection is alive, on the
 * same backend and, with the xact lifetime, in the same holding
 * transaction, still open, not failed, and not rolled back to a savepoint
 * taken before one of its locks: that proves the locks are held (an
 * advisory lock goes only with its session or transaction), without
 * reading pg_locks, whose cost grows with every lock on the server.
 * pglock_heartbeat() sends it and waits at most timeout_ms: 0
 * (confirmed), PGLOCK_ESERVER, PGLOCK_ECONNLOST, or PGLOCK_ETIMEDOUT if
 * the answer is not in by then (the heartbeat stays in flight: other
 * calls return PGLOCK_ESTATE, and the next pglock_heartbeat() waits for
 * its answer before it sends another).  An event loop that must never
 * block drives the managed hold in loop mode (pglock_hold_step())
 * instead.
 *
 * PGLOCK_ESERVER: the heartbeat's statement failed on a session that goes
 * on (a query cancel, pg_cancel_backend(); the server's message and
 * SQLSTATE are on the client).  With the session lifetime that is no
 * loss: a session advisory lock goes only with its session or its own
 * unlock, so the locks are still held and the connection is kept.  The
 * lease is just not confirmed (pglock_client_confirmed_at() does not
 * move): send another heartbeat at once; only the client deadline
 * decides.  With the xact lifetime it is no loss either: every lock
 * statement of the holding transaction ends with a savepoint (in its own
 * message), so the heartbeat runs inside it and a cancel aborts only the
 * savepoint; the holding transaction and its locks live on, and the next
 * heartbeat begins with ROLLBACK TO SAVEPOINT, in the same one round
 * trip.  Until one is confirmed, pglock_lock() and pglock_lock_any()
 * return PGLOCK_ESTATE.  A heartbeat that finds the transaction aborted
 * by something else (a statement sent on pglock_client_conn()) is
 * PGLOCK_ECONNLOST: its locks may be gone.
 *
 * PGLOCK_ECONNLOST: the locks are gone — another backend answered, the
 * holding transaction failed or ended, the server ended the session
 * (FATAL) or the connection broke — and the connection is closed (freeing
 * whatever it still held).
 */
PGLOCK_EXPORT int pglock_heartbeat(pglock_client *client, long timeout_ms);

/* When the last confirmed heartbeat (or acquisition) was sent, in ms on
 * pglock_now_ms()'s clock; the lease deadline counts from it.  An
 * acquisition that waited longer than T_s/8 (T_s: lease_ms, else
 * dead_peer_ms) is followed at once by
 * a heartbeat (inside pglock_lock()), so that the lease counts from a
 * recent moment rather than from when the wait began. */
PGLOCK_EXPORT int64_t pglock_client_confirmed_at(const pglock_client *client);

/* A monotonic clock in ms that keeps counting through suspend
 * (CLOCK_BOOTTIME on Linux). */
PGLOCK_EXPORT int64_t pglock_now_ms(void);

/* ------------------------------------------------------- managed hold */

/*
 * A managed hold keeps a client's lease alive while the caller works, and
 * tells the caller the moment it is lost, so the work can stop in time.
 *
 * The lease: with T_s = opts.lease_ms (without a lease:
 * opts.dead_peer_ms), a heartbeat every T_s/6, and the lease counts as
 * lost when no heartbeat sent within the last T_c = 2*T_s/3 has been
 * confirmed (sooner with a longer stop_budget_ms, below); a heartbeat
 * cancelled on a session that goes on is sent
 * again, and is no loss.  The whole arithmetic, the same as `pglock
 * run`'s, and the server settings that keep it are in pglock(1), LEASES.
 *
 * The rule: the lock's connection is closed only after the caller says
 * the work has stopped (pglock_hold_stop(), then pglock_client_close()), or
 * by the server at the lease's end, whichever comes first.  Nothing in
 * the hold closes it earlier.
 *
 * The caller's budget.  After a notice for a loss the client declares (no
 * confirmation by T_c: a cut or silent network, a frozen server) the lock
 * may still be held, and it stays held until stop or the server's lease
 * end.  The caller has T_s/6 (5 s of a 30 s lease) from the notice to
 * stop its work, or the longer stop_budget_ms it asked for (hold options
 * version 2, at most T_s/2, for which T_c comes sooner: T_s - budget -
 * T_s/6); after that, another holder may get the lock.  A loss the
 * server causes (pg_terminate_backend, a restart, a failover, an aborted
 * holding transaction with the xact lifetime) has already freed the lock:
 * it is told at once, when the heartbeat's answer or the socket's close
 * reaches the client (within T_s/6 plus a round trip), and the work
 * should stop at once.
 *
 * Notice.  On loss, in this order: the loss fd becomes readable (and stays
 * readable), and on_lost is called once, with the code (PGLOCK_ECONNLOST)
 * and a one-line message (which says the budget on a client-side loss).
 * The connection is not closed by a client-side loss's notice:
 * pglock_hold_stop() closes it.  (On a server-side loss it is closed
 * already, which frees nothing more: the lock was gone.)
 * pglock_hold_loss() and pglock_hold_error() tell the same at any time,
 * from any thread.
 *
 * Two ways to drive it:
 *   - PGLOCK_HOLD_THREAD: pglock_hold_start() starts a thread (pthread,
 *     every signal blocked) that runs the heartbeats; on_lost runs on it.
 *   - PGLOCK_HOLD_LOOP: the caller's event loop drives it.  Watch
 *     pglock_hold_fd() for reading and call pglock_hold_step() when it is
 *     readable or when the timeout step gave last has passed; on_lost runs
 *     inside pglock_hold_step().
 *
 * Thread rules.  While a hold runs (from pglock_hold_start() until
 * pglock_hold_stop() returns), the client and its connection are the
 * hold's: call no other function on the client, from any thread (not even
 * the accessors).  Those that would change its locks or connection are
 * refused all the same: pglock_lock(), pglock_lock_any(),
 * pglock_unlock(), pglock_unlock_all(), pglock_heartbeat() and
 * pglock_client_fencing_token() return PGLOCK_ESTATE at once, change
 * nothing and write no message (the client's message is the hold's).
 * pglock_client_close() is made safe: it stops the hold first (its
 * thread exits), then releases and closes as always; the hold reports a
 * loss (fd readable, on_lost called once on the closing thread,
 * PGLOCK_ECONNLOST, a message saying the client was closed), and its
 * handle stays valid until pglock_hold_stop() or pglock_hold_release(),
 * which return PGLOCK_ECONNLOST and free what is left of the client; no
 * call on the hold crashes meanwhile.  The accessors are not guarded.
 * The loss fd, pglock_hold_loss(), pglock_hold_error()
 * and pglock_now_ms() may be used from any thread.  on_lost must be quick
 * and must not call pglock_hold_stop(), pglock_hold_step() or any
 * function on the client; it may call pglock_hold_loss(), write to a
 * pipe, signal a condition variable, kill() a child, set a flag.  A hold
 * in loop mode is used from one thread at a time, like a client; between
 * its calls, that thread may read the client's accessors
 * (pglock_client_confirmed_at(), pglock_client_backend_pid(),
 * pglock_client_error(), ...), which nothing else changes then.
 *
 * Stop.  pglock_hold_stop() ends the hold, confirms the lease one last
 * time (a heartbeat sent at stop, after the one in flight, bounded by the
 * client's cancel_timeout_ms, default 2 s; in thread mode plus the
 * thread's exit, which never waits on the network; none right after a
 * pglock_hold_confirm(): no step since, less than a heartbeat interval
 * ago, nothing from the server since) and frees the hold, closing
 * the loss fd.  It returns 0 when the lock was held throughout (the
 * client is the caller's again, its locks held), else the loss code (the
 * client's connection is closed by stop, not before: call it once the
 * work has stopped, then close the client).  So stop +
 * pglock_client_close() take at most cancel_timeout_ms + 5 s, even on a
 * dead network.  pglock_hold_release() ends the hold and releases the
 * locks in one round trip, the release's answer being the last word.
 */
typedef struct pglock_hold pglock_hold;

typedef enum pglock_hold_drive {
    PGLOCK_HOLD_THREAD = 0, /* the hold's own thread */
    PGLOCK_HOLD_LOOP = 1    /* the caller's event loop: pglock_hold_step() */
} pglock_hold_drive;

/* Called once when the hold learns the lease is lost: code is negative
 * (PGLOCK_ECONNLOST), message one line, borrowed for the call. */
typedef void (*pglock_hold_lost_fn)(void *arg, int code, const char *message);

/* Version 2 added stop_budget_ms, version 3 watch_stop_requests; the
 * earlier versions are still accepted, and mean 0 for what they lack. */
#define PGLOCK_HOLD_OPTIONS_VERSION 3
typedef struct pglock_hold_options {
    /* PGLOCK_HOLD_OPTIONS_VERSION, set by pglock_hold_options_init(). */
    unsigned int version;
    pglock_hold_drive drive;     /* PGLOCK_HOLD_THREAD by default */
    pglock_hold_lost_fn on_lost; /* NULL: none (use the fd) */
    void *arg;                   /* on_lost's first argument */
    /* Version 2.  The caller's stop budget after a client-side loss
     * notice, in ms: 0 (the default) for T_s/6; at most T_s/2 (else
     * pglock_hold_start() returns PGLOCK_EINVAL).  A longer budget brings
     * the client deadline forward, T_c = T_s - budget - T_s/6, and the
     * heartbeat to every T_c/4 (pglock(1), LEASES): a caller that needs
     * 20 s to stop cleanly asks for them here rather than a six times
     * longer lease. */
    long stop_budget_ms;
    /* Version 3.  1: the heartbeats also look for a stop request on each
     * lock the client holds (pglock_key_stop_request()), and
     * pglock_hold_stop_request() tells one made by a role allowed to
     * make it.  0 (the default): they do not. */
    int watch_stop_requests;
} pglock_hold_options;

/* The defaults of PGLOCK_HOLD_OPTIONS_VERSION, as an initialiser:
 *   pglock_hold_options opts = PGLOCK_HOLD_OPTIONS_INIT;
 * gives what pglock_hold_options_init() does. */
/* (clang-format would lay out this braced initializer as a block) */
/* clang-format off */
#define PGLOCK_HOLD_OPTIONS_INIT \
    {PGLOCK_HOLD_OPTIONS_VERSION, PGLOCK_HOLD_THREAD, NULL, NULL, 0L, 0}
/* clang-format on */

/* Fills opts with the defaults for version (1 to 3: the fields that
 * version has, and no byte beyond them); PGLOCK_EINVAL for a version
 * this library does not know (opts is then left alone). */
PGLOCK_EXPORT int pglock_hold_options_init(pglock_hold_options *opts,
                                           unsigned int version);

/*
 * Starts keeping client's lease alive; call it once the locks are taken.
 * opts may be NULL (thread mode, no callback).  Returns 0 with *out set,
 * or PGLOCK_EINVAL (bad options), PGLOCK_ESTATE (the client is lost or
 * busy, or holds nothing), PGLOCK_ENOMEM, with the message on the client
 * and *out NULL.  A client that a hold already runs on gets PGLOCK_ESTATE
 * with no message (the client, its message included, is that hold's
 * until pglock_hold_stop()); the running hold goes on.  If the lease
 * already ran out before the call, the hold starts lost (the notice is
 * given at once).
 */
PGLOCK_EXPORT int pglock_hold_start(pglock_hold **out, pglock_client *client,
                                    const pglock_hold_options *opts);

/* Readable (and staying so) once the lease is lost.  Owned by the hold:
 * do not read or close it; remove it from your poll set before stop. */
PGLOCK_EXPORT int pglock_hold_loss_fd(const pglock_hold *hold);

/* 0 while the lease holds, else the loss code.  Any thread, on_lost
 * included. */
PGLOCK_EXPORT int pglock_hold_loss(const pglock_hold *hold);

/* The loss's message: one line, "" while the lease holds.  Borrowed from
 * the hold, and fixed once the loss is declared (the first loss is the
 * one told), so any thread may read it until pglock_hold_stop(). */
PGLOCK_EXPORT const char *pglock_hold_error(const pglock_hold *hold);

/* The hold's one clock, in ms on pglock_now_ms()'s clock, from any
 * thread (0 for NULL).  pglock_hold_deadline(): "confirmed until", when
 * the lease counts as lost unless a later heartbeat is confirmed first
 * (the last confirmed heartbeat's send + T_c); it moves on with each
 * confirmation.  pglock_hold_stop_by(): when the work must be gone after
 * a client-side loss, that + the stop budget, a margin before the server
 * may free the lock.  A caller that supervises work elsewhere (another
 * process, a watchdog) takes both from here rather than counting them
 * itself. */
PGLOCK_EXPORT int64_t pglock_hold_deadline(const pglock_hold *hold);
PGLOCK_EXPORT int64_t pglock_hold_stop_by(const pglock_hold *hold);

/*
 * Stop requests: how one holder asks another, on any host, to stop its
 * work and let the lock go (`pglock run --replace`).  The requester holds
 * pglock_key_stop_request(key) in shared mode, as long as it wants the
 * holders of key gone; a hold started with watch_stop_requests tries
 * each of its locks' stop-request keys in exclusive mode in every
 * heartbeat, in the same round trip (a transaction lock, given back at
 * once: with the xact lifetime the heartbeat's savepoint is rolled back
 * to in the same message), so a request costs the holder no query of its
 * own until one is there.  Then the next heartbeat, sent at once, finds
 * who asks (pg_locks, pg_stat_activity) and whether that role may: the
 * server's rule for pg_terminate_backend() on this session, i.e. a
 * superuser, or, for a session of a role that is not, a role with the
 * privileges of the holder's role or of pg_signal_backend.  So a stop
 * request gives no role a power it lacks: it could end the session
 * instead.  A request by any other role is ignored.
 *
 * pglock_hold_stop_request() returns NULL until a request by an allowed
 * role has been seen, then a one-line description of the requester
 * (backend pid, user, application_name), borrowed from the hold, fixed
 * from then on, for any thread.  The hold goes on as before: stopping
 * the work and then stopping or releasing the hold is the caller's to do,
 * which the requester waits for (its wait for the lock).
 */
PGLOCK_EXPORT const char *pglock_hold_stop_request(const pglock_hold *hold);

/* The key whose shared holders ask key's holders to stop: the bigint of
 * the name "pglock stop request " + key's identity (pglock_key_format()),
 * by the SHA-256 rule.  Legacy forms need resolving first (else
 * PGLOCK_EINVAL). */
PGLOCK_EXPORT int pglock_key_stop_request(pglock_key *out,
                                          const pglock_key *key);

/* Loop mode: the fd to watch for reading (the lock connection's socket;
 * -1 once lost). */
PGLOCK_EXPORT int pglock_hold_fd(const pglock_hold *hold);

/* Loop mode: does what is due (send a heartbeat, read its answer, check
 * the deadline); never blocks.  Returns 0 while the lease holds, with
 * *timeout_ms set to when to call again at the latest (a poll timeout),
 * else the loss code (after the notice).  PGLOCK_ESTATE in thread mode. */
PGLOCK_EXPORT int pglock_hold_step(pglock_hold *hold, long *timeout_ms);

/* Loop mode: proves the lease now, as pglock_hold_stop() does, but goes
 * on holding: waits for the heartbeat in flight, then sends one more and
 * waits for its answer, at most timeout_ms in all; a heartbeat that fails
 * on a session that goes on is sent again.  The client deadline T_c plays
 * no part here: an answer from the same session (and holding transaction)
 * proves the locks were held throughout, however late it comes, so a
 * caller that was itself stopped (SIGSTOP, a suspended VM) asks this
 * before it resumes its work rather than stepping.  Returns 0 when
 * confirmed (T_c counts from that heartbeat; a pglock_hold_stop() right
 * after it, with no step in between, takes it as its last word, with no
 * round trip of its own), else the loss code after the notice, as
 * pglock_hold_step() gives it.  PGLOCK_EINVAL for a negative timeout_ms;
 * PGLOCK_ESTATE in thread mode. */
PGLOCK_EXPORT int pglock_hold_confirm(pglock_hold *hold, long timeout_ms);

/* Ends the hold and frees it (NULL is ok: 0); see "Stop" above. */
PGLOCK_EXPORT int pglock_hold_stop(pglock_hold *hold);

/* Ends the hold as pglock_hold_stop() does, and releases every lock of
 * the client, in one round trip where stop + pglock_client_close() take
 * two: the release is the last heartbeat, and its answer the last word.
 * Session lifetime: pg_advisory_unlock_all(), run only when the statement
 * reaches the holding backend, which answers; xact lifetime: the heartbeat's
 * check inside the holding transaction (open, not failed, still counting
 * every lock statement) and ROLLBACK, in one message.  A heartbeat in
 * flight is answered first; all of it within timeout_ms (none of T_c's
 * doing, as pglock_hold_confirm()).  Returns 0 when the locks were held
 * up to their release: they are free now, and the client is the
 * caller's again, holding nothing (pglock_client_close() then sends
 * nothing).  Else the loss code, the connection closed, as stop gives it.
 * PGLOCK_EINVAL (NULL, or a negative timeout_ms) leaves the hold running.
 * Call it once the work has stopped, in place of stop, when the locks are
 * not needed after it. */
PGLOCK_EXPORT int pglock_hold_release(pglock_hold *hold, long timeout_ms);

/* ------------------------------------------------ transaction locks */

/*
 * Transaction locks on the caller's own PGconn, released at COMMIT or
 * ROLLBACK.  They work on any connection through a transaction-mode
 * pooler (PgBouncer), which keeps a transaction on one server backend; a
 * session lock on a pooled connection would stay on a backend that other
 * clients then use (a pglock_client works through a pooler too: it holds
 * its locks in a transaction of its own connection).  They have no lease
 * and no loss notice: a long job wants a pglock_client with a managed
 * hold.
 *
 * pglock_xact_lock() runs inside the caller's open transaction
 * (PGLOCK_ESTATE if none).  A failed, busy or timed-out acquire, a try
 * included, leaves the transaction usable (a savepoint and a
 * transaction-local lock_timeout, sent together in one round trip): e.g.
 * PGLOCK_ELOCKTABLE (53200) or PGLOCK_EINTR (57014, a cancel from another
 * session) return with the transaction still open and able to commit.
 *
 * pglock_xact_begin_lock() sends BEGIN and the lock in one round trip; if
 * the lock is not taken, the transaction is rolled back before it returns.
 *
 * Both send one simple-protocol query (no prepared statement, no session
 * setting), so they work through PgBouncer in transaction mode.  A failed
 * wait costs a second round trip (ROLLBACK TO SAVEPOINT, or ROLLBACK),
 * which also undoes a lock granted in the instant the wait failed.  If a
 * cancel (interrupt or deadline) is not answered within 2 s, the socket of
 * conn is shut down and PGLOCK_ECONNLOST returned: PQfinish() conn.
 *
 * A readable interrupt_fd (-1: none) ends the wait with PGLOCK_EINTR, as
 * pglock_options.interrupt_fd does a client's.  err may be NULL.
 */
PGLOCK_EXPORT int pglock_xact_lock(PGconn *conn, const pglock_key *key,
                                   pglock_mode mode, long timeout_ms,
                                   int interrupt_fd, pglock_error *err);
PGLOCK_EXPORT int pglock_xact_begin_lock(PGconn *conn, const pglock_key *key,
                                         pglock_mode mode, long timeout_ms,
                                         int interrupt_fd, pglock_error *err);

/* ------------------------------------------------------ fencing tokens */

/*
 * A fencing token: a number that strictly grows across processes, hosts,
 * server crash-restarts, promotions (of an asynchronous standby too) and
 * point-in-time restores: the server's timeline << 48 | the 64-bit id of
 * a transaction of its own (budget: timelines 1..32767, ids below 2^48;
 * past it PGLOCK_ESERVER, no token).  It goes back after a dump and
 * restore into a new cluster, or pg_upgrade of a cluster past timeline 1
 * (which sets timeline 1).  Take it after the
 * lock is granted and hand it to the protected resource, which rejects
 * any token lower than one it has seen.  Runs its own durably committed
 * transaction on conn (one round trip; it forces synchronous_commit on for
 * itself, whatever the server's setting), so conn must be idle, not inside
 * a transaction (PGLOCK_ESTATE).
 *
 * Bounded: after timeout_ms (PGLOCK_WAIT_FOREVER: none), or when
 * interrupt_fd becomes readable (-1: none), the query is cancelled on the
 * server and PGLOCK_ETIMEDOUT / PGLOCK_EINTR returned.  A commit that
 * waits for synchronous replication cannot be cancelled into a failure
 * (the server reports success with a WARNING), so a token that comes back
 * after the deadline or a cancel is discarded, never returned.  A failed
 * token leaves conn idle, with no transaction open; if the cancel is not
 * answered within 2 s the socket is shut down (PGLOCK_ECONNLOST) and the
 * caller must PQfinish() conn.  err may be NULL.
 */
PGLOCK_EXPORT int pglock_fencing_token(PGconn *conn, int64_t *out,
                                       long timeout_ms, int interrupt_fd,
                                       pglock_error *err);

/*
 * The fencing token of a client's acquisition: call it after pglock_lock()
 * succeeded.  With the session lifetime it runs on the lock connection
 * (one round trip).  With the xact lifetime it never runs inside the
 * holding transaction (which must keep no transaction id): it opens a
 * short second connection with the client's connection parameters, takes
 * the token there and closes it; behind a pooler that second connection
 * needs a free server connection of its own.  Every step (connecting,
 * the query, its cancel) is bounded by timeout_ms and the client's
 * interrupt_fd, as for pglock_fencing_token(); a late token is
 * discarded.  The error is on the
 * client.  A failure leaves the locks held, except PGLOCK_ECONNLOST with
 * the session lifetime (the lock connection was given up, and its locks
 * with it).
 */
PGLOCK_EXPORT int pglock_client_fencing_token(pglock_client *client,
                                              int64_t *out, long timeout_ms);

/* ------------------------------------------------- who holds what */

/*
 * Who holds and who waits for advisory locks, as pg_locks tells it,
 * joined with pg_stat_activity and pg_database: the same view
 * `pglock status` shows (it is a client of these calls).
 *
 * The list is allocated by the library, like a PGresult, and freed with
 * pglock_holders_free().  Entries are read with pglock_holders_get(),
 * which returns a pointer into the list (its strings too): valid until
 * the list is freed.
 *
 * Growth rule: pglock_holder only ever grows at its end, and a caller
 * never allocates, copies by value or takes sizeof of it, so a program
 * built against an older header keeps working with a newer library.
 * PGLOCK_HAS_HOLDERS says the calls exist.
 */
#define PGLOCK_HAS_HOLDERS 1

typedef struct pglock_holders pglock_holders;

/* One advisory lock request: a row of pg_locks and its session. */
typedef struct pglock_holder {
    pglock_key key;               /* PGLOCK_KEY_INT64 or PGLOCK_KEY_PAIR */
    const char *database;         /* NULL if the database is gone */
    int pid;                      /* the backend pid; 0: no backend (a
                                prepared transaction) */
    pglock_mode mode;             /* held, or asked for by a waiter */
    int granted;                  /* 1: holds, 0: waits */
    int has_session;              /* a pg_stat_activity row was found */
    int hidden;                   /* pg_stat_activity hides this session's
                                client, state and times from our role */
    const char *user;             /* NULL when unknown; "unknown
                                      (OID=n)": a dropped role */
    const char *application_name; /* "" when unset; NULL when unknown */
    const char *client_addr;      /* NULL: Unix socket, hidden, unknown */
    int client_port;              /* -1: Unix socket; 0: unknown */
    const char *state;            /* "idle", "active", ...; NULL: hidden */
    /* Holders: how long the lock has been held, in seconds.  The server
     * records no acquisition time, so this is a range: at least
     * held_min_s (from state_change, when the session is idle: the lock
     * was taken before its last statement ended) and at most held_max_s
     * (from backend_start: no lock is older than its session); -1:
     * unknown. */
    double held_min_s;
    double held_max_s;
    /* Waiters: how long it has waited, in seconds, and from which column:
     * "waitstart" (pg_locks, PostgreSQL 14+: exact) or "query_start" (an
     * upper bound, while waitstart is not yet set or before 14); -1 /
     * NULL when unknown.  waitstart is shown even when hidden is 1. */
    double waiting_s;
    const char *waiting_source;
    /* Waiters: pg_blocking_pids(pid), the sessions it waits for (holders
     * in a conflicting mode, and conflicting waiters ahead of it). */
    const int *blocked_by;
    int n_blocked_by;
    /* New fields are added here, at the end, only. */
} pglock_holder;

/* pglock_holders_list() flags. */
#define PGLOCK_HOLDERS_ALL_DATABASES 1u /* every database, not conn's only */

/*
 * Lists the requests for the nkeys keys (nkeys 0: every advisory lock) in
 * conn's database (or in all with PGLOCK_HOLDERS_ALL_DATABASES): holders
 * and waiters, ordered by database, key (bigints before pairs), holders
 * before waiters, waiters in the order they began to wait.
 *
 * One statement (one round trip) on the caller's conn, which must be
 * idle; read-only, so it may run through a pooler, and outside or inside
 * a transaction.  Legacy keys must be resolved first (PGLOCK_EINVAL).
 * Bounded by timeout_ms (PGLOCK_WAIT_FOREVER: none; else > 0): past it
 * the query is cancelled on the server (PGLOCK_ETIMEDOUT); a cancel that
 * is not answered within 2 s shuts conn's socket down and returns
 * PGLOCK_ECONNLOST (PQfinish() conn then).
 * On a standby (in recovery) it returns PGLOCK_ESTANDBY: the locks that
 * matter are the primary's, and none of them can be seen there.
 * *out is NULL on failure.  err may be NULL.
 */
PGLOCK_EXPORT int pglock_holders_list(pglock_holders **out, PGconn *conn,
                                      const pglock_key *keys, int nkeys,
                                      unsigned flags, long timeout_ms,
                                      pglock_error *err);
/*
 * pglock_holders_list() on the client's own connection, for a program
 * that has no other (pglock run's busy line and its slots): the same
 * list, statement and bound (timeout_ms as there), the message and
 * SQLSTATE on the client.  Read-only, so it leaves the client's locks as
 * they are; in a holding transaction (xact lifetime) a failed read (a
 * timeout's cancel) costs only the savepoint of the last lock statement,
 * as a cancelled heartbeat does: until pglock_heartbeat() confirms the
 * lease again, this call, pglock_lock() and pglock_lock_any() return
 * PGLOCK_ESTATE.  PGLOCK_ESTATE also while a managed hold runs or a
 * heartbeat is in flight; PGLOCK_ECONNLOST closes the connection, as
 * for every call on the client.  *out is NULL on failure.
 */
PGLOCK_EXPORT int pglock_client_holders(pglock_holders **out,
                                        pglock_client *client,
                                        const pglock_key *keys, int nkeys,
                                        unsigned flags, long timeout_ms);
/* pglock_key_resolve() on the client's own connection: the same query and
 * bounds, the message on the client, the client's state as for
 * pglock_client_holders().  A key that needs no resolving returns 0 at
 * once, whatever the client's state. */
PGLOCK_EXPORT int pglock_client_key_resolve(pglock_client *client,
                                            pglock_key *key);
/* How many entries; 0 for NULL. */
PGLOCK_EXPORT int pglock_holders_count(const pglock_holders *list);
/* Entry i (0 <= i < count), borrowed from the list; NULL when out of
 * range. */
PGLOCK_EXPORT const pglock_holder *pglock_holders_get(
    const pglock_holders *list, int i);
/* Frees the list and everything borrowed from it.  NULL is ok. */
PGLOCK_EXPORT void pglock_holders_free(pglock_holders *list);

#ifdef __cplusplus
}
#endif

#endif /* PGLOCK_H */
