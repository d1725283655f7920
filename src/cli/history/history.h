/*
 * history.h — the run history in the database (schema "pglock", table
 * pglock.runs), shared by `pglock init`, `run --record`, `lead --record`,
 * `history`, `check` and `metrics`.  Internal to the CLI.
 *   history_sql.c   the schema, its version, and the SQL that reads it
 *   history_conn.c  a connection tried with a deadline, bounded queries
 *   run_record.c    what run and lead record
 */
#ifndef PGLOCK_CLI_HISTORY_H
#define PGLOCK_CLI_HISTORY_H

#include <stdint.h>
#include "cli.h"

/*
 * The schema version this pglock creates and reads, and its revision.
 * A version changes only with what an older pglock could no longer write
 * to: every pglock of version 1 checks for exactly 1.  A revision adds
 * what older ones need not know of (a nullable column), so that hosts
 * of either revision go on recording while a fleet is upgraded.
 *   revision 1  the first table
 *   revision 2  wait_ms (pglock's start to the grant) and skip_reason
 *               ('busy' or 'timed_out' for an outcome 'skipped')
 */
#define HISTORY_SCHEMA_VERSION 1
#define HISTORY_SCHEMA_REVISION 2

/* `pglock init`'s statements, in one transaction (idempotent). */
extern const char history_init_sql[];
/* The GRANTs each kind of role needs: NULL-terminated templates with one
 * %s, the role's quoted identifier (PQescapeIdentifier()). */
enum {
    HISTORY_RECORDER,
    HISTORY_READER,
    HISTORY_PRUNER,
    HISTORY_EVERY,
    HISTORY_ROLE_KINDS
};
extern const char *const history_role_kind_names[HISTORY_ROLE_KINDS];
extern const char *const history_grants[HISTORY_ROLE_KINDS][3];
/* SELECT: 1 when pglock.runs exists; NULL params.  Answers one row:
 * (exists bool, version int or NULL, may_record bool (USAGE, SELECT,
 * INSERT, UPDATE), may_select bool, may_prune bool (+ DELETE), revision
 * int: 1 when the comment names none). */
extern const char history_probe_sql[];
/* The revision a probe found. */
int history_revision(PGresult *probe);
/* The revision-2 columns of row r as a reader selects them: the column,
 * or a NULL of its type on a revision-1 table (no such column). */
const char *history_wait_ms_col(int revision);
const char *history_skip_reason_col(int revision);
/*
 * The run lock: while a recorded run lives, its history connection holds
 * the advisory lock (HISTORY_RUN_LOCK_NS, id mod 2^32), a pair key
 * ('pglr') that every role sees in pg_locks.
 */
#define HISTORY_RUN_LOCK_NS 1885826162
#define HISTORY_RUN_LOCK_NS_SQL "1885826162"
/*
 * The outcome of row r, decided on the server: the stored one once the
 * end is recorded; else "running" while the lock connection's backend
 * still holds the key and the run lock is held; "unrecorded" once it is
 * not; "running?" when the row names no run lock that can decide (one
 * written by an older pglock) and the reader may not see the backend's
 * identity in pg_stat_activity; "failover" when its fencing token names
 * an older timeline than the server's (a promotion or a restore since it
 * started: its end, if recorded, was on a server that is gone).
 */
extern const char history_outcome_expr[];

/* Opens a connection with conn's parameters, application_name and
 * client_encoding UTF8, without blocking past deadline (pglock_now_ms()
 * scale; < 0: none).  NULL with one line in err. */
PGconn *history_connect(const cli_conn *conn, const char *application_name,
                        int64_t deadline, char *err, size_t errlen);
/* Runs sql with text params on idle conn, waiting at most until deadline;
 * the result (caller PQclear()s), or NULL with one line in err, and then
 * conn is closed and set to NULL when it could not be trusted further
 * (a timeout, a lost connection). */
PGresult *history_exec(PGconn **conn, const char *sql, int nparams,
                       const char *const *params, int64_t deadline, char *err,
                       size_t errlen);

/* An age: a DURATION (cli_parse_duration()), or whole days ("30d").
 * 0, or -1 with one line in err. */
#define HISTORY_AGE_MAX_DAYS 36500
int history_parse_age(const char *text, long *out_ms, char *err, size_t errlen);
/* An AGE option's reader (CLI_OPT_CALL, a long field in ms): CLI_GO_ON,
 * else the usage error's exit status (printed). */
cli_step history_age_option(const char *command, const cli_opt *o,
                            cli_common *target, const char *value);

/* Exit status and message for a probe that says the history cannot be
 * used by this role (missing table, another version, no privilege): 0
 * when it can be used for what is asked (want_insert: recording). */
int history_check_probe(PGresult *probe, int want_insert, int exit_code);

#endif
