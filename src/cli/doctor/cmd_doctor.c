/*
 * pglock doctor — is this server, and the path to it, safe for locks?
 *
 * Every finding is ok, warning or problem, with a one-line reason and the
 * fix.  Only read-only statements are sent, never a session-level SET:
 * doctor is meant to run through a pooler, where a SET would leak to the
 * pool's other clients.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "bounded_conn.h"
#include "cli.h"
#include "doctor_hosts.h"
#include "doctor_lease.h"
#include "doctor_tls.h"
#include "history.h"
#include "json.h"
#include "run.h"

#define MAX_FINDINGS 24
#define PROBE_TIMEOUT_MS 3000
/* A keepalive idle time above this leaves a dead client's lock held too
 * long to be a useful bound. */
#define KEEPALIVE_IDLE_LIMIT_S 300

typedef enum { OK, WARNING, PROBLEM } severity;
static const char *const severity_name[] = {"ok", "warning", "problem"};

typedef struct finding {
    const char *check;
    severity status;
    char reason[400];
    char fix[400];
} finding;

typedef struct report {
    finding f[MAX_FINDINGS];
    int n;
} report;

static void add(report *r, const char *check, severity s, const char *fix,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
static void add(report *r, const char *check, severity s, const char *fix,
                const char *fmt, ...)
{
    if (r->n == MAX_FINDINGS)
        return;
    finding *f = &r->f[r->n++];
    f->check = check;
    f->status = s;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->reason, sizeof f->reason, fmt, ap);
    va_end(ap);
    snprintf(f->fix, sizeof f->fix, "%s", fix ? fix : "");
}

/* What the one read-only statement returns, column by column. */
static const char facts_sql[] =
    "SELECT pg_backend_pid(), pg_is_in_recovery(),"
    " current_setting('server_version'),"
    " current_setting('server_version_num')::int,"
    " current_setting('max_locks_per_transaction')::int,"
    " current_setting('max_connections')::int,"
    " current_setting('max_prepared_transactions')::int,"
    " (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted),"
    " (SELECT count(*) FROM pg_locks WHERE NOT fastpath),"
    " inet_server_addr() IS NULL,"
    " current_setting('tcp_keepalives_idle', true),"
    " current_setting('tcp_keepalives_interval', true),"
    " current_setting('tcp_keepalives_count', true),"
    " current_setting('idle_session_timeout', true),"
    " current_setting('idle_in_transaction_session_timeout', true),"
    " current_setting('statement_timeout', true),"
    " current_setting('lock_timeout', true),"
    " current_user,"
    " coalesce((SELECT rolsuper FROM pg_roles WHERE rolname = current_user), false),"
    " pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),"
    " pg_has_role(current_user, 'pg_signal_backend', 'USAGE')";

enum {
    F_PID,
    F_RECOVERY,
    F_VERSION,
    F_VERSION_NUM,
    F_MAX_LOCKS,
    F_MAX_CONN,
    F_MAX_PREPARED,
    F_ADVISORY,
    F_LOCKS,
    F_UNIX,
    F_KA_IDLE,
    F_KA_INTERVAL,
    F_KA_COUNT,
    F_IDLE_SESSION,
    F_IDLE_XACT,
    F_STATEMENT,
    F_LOCK_TIMEOUT,
    F_USER,
    F_SUPER,
    F_READ_STATS,
    F_SIGNAL,
    F_NCOLS
};

static const char *val(const PGresult *res, int col)
{
    return PQgetisnull(res, 0, col) ? NULL : PQgetvalue(res, 0, col);
}

static int is_true(const PGresult *res, int col)
{
    const char *v = val(res, col);
    return v && v[0] == 't';
}

/* ------------------------------------------------ the pooler probe */

/*
 * Waits up to timeout_ms for the whole answer to the query in flight on
 * conn, without a cancel: after a timeout the query is still in flight,
 * to wait for again or to close.  Returns the last result (caller
 * clears), or NULL on timeout (*timed_out) or a connection lost before
 * the server said why.
 */
static PGresult *answer_within(PGconn *conn, int timeout_ms, int *timed_out)
{
    pglock__wait_end end;
    PGresult *res = pglock__answer_until(conn, pglock__deadline(timeout_ms, 0),
                                         &end);
    *timed_out = end == PGLOCK__WAIT_ABANDONED;
    if (*timed_out) {
        PQclear(res);
        return NULL;
    }
    return res;
}

/* Sends sql (no parameters) and waits as answer_within(). */
static PGresult *exec_within(PGconn *conn, const char *sql, int timeout_ms,
                             int *timed_out)
{
    *timed_out = 0;
    if (!PQsendQueryParams(conn, sql, 0, NULL, NULL, NULL, NULL, 0))
        return NULL;
    return answer_within(conn, timeout_ms, timed_out);
}

static int pid_of(PGresult *res)
{
    if (res && PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1)
        return atoi(PQgetvalue(res, 0, 0));
    return 0;
}

/*
 * Which pooling mode, as far as two client connections can tell with
 * read-only statements: B opens a transaction (holding a server
 * connection in transaction mode), then A asks for its backend.  A
 * backend that moved between A's transactions, or that B was handed, or
 * A waiting for a server while B's transaction holds one, means the pool
 * hands backends out per transaction.  A refused BEGIN means statement
 * mode.  Anything else cannot be told apart from session mode.
 */
static void probe_pool_mode(report *r, PGconn *a, int a_pid, const cli_conn *cc)
{
    static const char session_fix[] =
        "through a transaction-mode pooler use transaction locks only "
        "(pglock run/lead --mode=auto or --mode=xact hold theirs in a "
        "transaction); session locks need PostgreSQL directly";
    int timed_out;
    pglock_error err = {0};
    PGconn *b = cli_connect(cc, "pglock doctor", NULL, &err);
    if (!b) {
        add(r, "pool_mode", WARNING, session_fix,
            "pooling mode unknown: a second connection failed (%s)",
            err.message);
        return;
    }
    PGresult *res = exec_within(b, "BEGIN READ ONLY", PROBE_TIMEOUT_MS,
                                &timed_out);
    if (!res || PQresultStatus(res) != PGRES_COMMAND_OK) {
        /* PgBouncer ends the connection with a FATAL saying so */
        if ((res && strstr(PQresultErrorMessage(res), "statement pooling")) ||
            strstr(PQerrorMessage(b), "statement pooling"))
            add(r, "pool_mode", PROBLEM,
                "connect through a pool in session or transaction mode, or "
                "directly to PostgreSQL",
                "statement pooling: no transaction can span two statements, "
                "so neither session nor transaction locks can be used");
        else
            add(r, "pool_mode", WARNING, session_fix,
                "pooling mode unknown: %s",
                timed_out ? "no server connection was free for a second client"
                          : "a read-only transaction could not begin");
        PQclear(res);
        PQfinish(b);
        return;
    }
    PQclear(res);
    int b_pid = pid_of(res = exec_within(b, "SELECT pg_backend_pid()",
                                         PROBE_TIMEOUT_MS, &timed_out));
    PQclear(res);
    res = exec_within(a, "SELECT pg_backend_pid()", PROBE_TIMEOUT_MS,
                      &timed_out);
    int a_waited = timed_out;
    int a_pid2 = pid_of(res);
    PQclear(res);
    PQclear(exec_within(b, "ROLLBACK", PROBE_TIMEOUT_MS, &timed_out));
    PQfinish(b);
    if (a_waited) /* B is done: A's question gets its answer now */
        PQclear(answer_within(a, PROBE_TIMEOUT_MS, &timed_out));
    if (a_waited || (b_pid && b_pid == a_pid) || (a_pid2 && a_pid2 != a_pid)) {
        /* What pglock run and lead expect: fine for them, a trap for a
         * session lock taken by any other tool. */
        add(r, "pool_mode", OK, NULL,
            "transaction pooling (%s): pglock's transaction locks work "
            "here; a session lock taken through it by another tool would "
            "stay on a backend that other clients then use",
            a_waited ? "a client waited for a server connection while "
                       "another client's transaction held one"
            : (b_pid && b_pid == a_pid)
                ? "a second client was handed the first client's backend"
                : "one client's transactions ran on different backends");
        return;
    }
    add(r, "pool_mode", WARNING, session_fix,
        "pooling mode unknown: each client kept its own backend here "
        "(session pooling looks like this, so does an idle pool)");
}

/* ------------------------------------------------ the checks */

static void check_version(report *r, const PGresult *res)
{
    int num = atoi(val(res, F_VERSION_NUM));
    const char *v = val(res, F_VERSION);
    if (num >= 140000)
        add(r, "server_version", OK, NULL,
            "PostgreSQL %s: leases (idle_session_timeout) and "
            "pg_locks.waitstart are available (14 or newer)",
            v);
    else
        add(r, "server_version", PROBLEM,
            "upgrade to PostgreSQL 14 or newer; until then run pglock run "
            "and lead with --mode=xact",
            "PostgreSQL %s: no idle_session_timeout (14), so pglock run and "
            "lead refuse session locks here; --mode=xact works (its lease is "
            "idle_in_transaction_session_timeout), and pglock status has no "
            "pg_locks.waitstart%s",
            v, num < 110000 ? "; sha256() for text keys in SQL needs 11" : "");
}

static void check_standby(report *r, const PGresult *res)
{
    if (is_true(res, F_RECOVERY))
        add(r, "standby", PROBLEM,
            "connect to the primary (e.g. target_session_attrs=read-write "
            "in the conninfo)",
            "the server is a standby (in recovery): advisory locks are not "
            "replicated, so a lock taken here excludes nobody on the primary");
    else
        add(r, "standby", OK, NULL,
            "the server is a primary (not in recovery)");
}

/* A multi-host conninfo: each host's role; two primaries is a split brain
 * (a failover that left the old primary running). */
static void check_hosts(report *r, const doctor_host *h, int n)
{
    char list[320] = "";
    size_t len = 0;
    int primaries = 0, unreachable = 0;
    for (int i = 0; i < n; i++) {
        primaries += !strcmp(h[i].role, "primary");
        unreachable += !strcmp(h[i].role, "unreachable");
        int w = snprintf(list + len, sizeof list - len, "%s%s:%s %s",
                         i ? ", " : "", h[i].host, h[i].port, h[i].role);
        if (w > 0 && (size_t)w < sizeof list - len)
            len += (size_t)w;
    }
    static const char *const count_word[] = {"no", "one", "two", "three"};
    const char *many = primaries < 4 ? count_word[primaries] : "several";
    if (primaries > 1)
        add(r, "hosts", PROBLEM,
            "fence the old primary (stop it, or stop it taking connections) "
            "before clients use the new one: the HA layer must do this",
            "the hosts disagree: %s primaries (%s); advisory locks are not "
            "replicated, so a lock taken on one excludes nobody on the other",
            many, list);
    else if (primaries == 0 || unreachable)
        add(r, "hosts", WARNING,
            primaries ? "check the unreachable hosts"
                      : "promote a standby, or point pglock at the primary",
            "%s primary among the hosts doctor could reach (%s)", many, list);
    else
        add(r, "hosts", OK, NULL, "one primary among the hosts listed (%s)",
            list);
}

static void check_lock_table(report *r, const PGresult *res)
{
    long per = atol(val(res, F_MAX_LOCKS));
    long conns = atol(val(res, F_MAX_CONN));
    long prepared = atol(val(res, F_MAX_PREPARED));
    long floor = per * (conns + prepared);
    long advisory = atol(val(res, F_ADVISORY));
    long locks = atol(val(res, F_LOCKS));
    severity s = OK;
    if (locks * 10 >= floor * 9)
        s = PROBLEM;
    else if (locks * 2 >= floor)
        s = WARNING;
    add(r, "lock_table", s,
        s == OK ? NULL
                : "raise max_locks_per_transaction (needs a restart), "
                  "or hold fewer locks",
        "room for at least %ld locks (max_locks_per_transaction %ld x "
        "(max_connections %ld + max_prepared_transactions %ld); a floor, "
        "not a ceiling: spare shared memory and other backend slots add "
        "more); %ld advisory locks held now, %ld locks in the table",
        floor, per, conns, prepared, advisory, locks);
}

static int is_zero(const char *setting)
{
    return !setting || !strcmp(setting, "0");
}

/* Says whose link each finding is about: through a pooler the server's
 * settings (and inet_server_addr()) are those of the pooler's own link to
 * the server, while this client's link ends at the pooler, whose
 * keepalives are the pooler's settings. */
static void check_keepalives(report *r, const PGresult *res, PGconn *conn,
                             int pooled)
{
    const char *host = PQhost(conn);
    char client[200] = "";
    if (pooled)
        snprintf(client, sizeof client,
                 "; this client's link to the pooler "
                 "is %s (its keepalives are the pooler's own settings, which "
                 "doctor cannot read)",
                 host && host[0] == '/' ? "a Unix-domain socket" : "TCP");
    if (is_true(res, F_UNIX)) {
        if (pooled)
            add(r, "keepalives", OK, NULL,
                "the pooler's link to the server is a Unix-domain socket: "
                "TCP keepalives do not apply to it%s",
                client);
        else
            add(r, "keepalives", OK, NULL,
                "this client's link to the server is a Unix-domain socket: "
                "TCP keepalives do not apply to it (run doctor over TCP to "
                "see what TCP clients get)");
        return;
    }
    const char *link = pooled ? "the pooler's TCP links to the server"
                              : "this client's TCP link to the server";
    const char *idle = val(res, F_KA_IDLE);
    long idle_s = idle ? atol(idle) : 0;
    if (idle_s == 0 || idle_s > KEEPALIVE_IDLE_LIMIT_S)
        add(r, "keepalives", WARNING,
            "set tcp_keepalives_idle/interval/count (and tcp_user_timeout) on "
            "the server; pglock run sets its own lease and keepalives",
            "%s: tcp_keepalives_idle %s s (0 = the kernel's default, usually "
            "2 h), interval %s s, count %s: a client that vanishes without "
            "closing its connection keeps its locks that long%s",
            link, idle ? idle : "?",
            val(res, F_KA_INTERVAL) ? val(res, F_KA_INTERVAL) : "?",
            val(res, F_KA_COUNT) ? val(res, F_KA_COUNT) : "?", client);
    else
        add(r, "keepalives", OK, NULL,
            "%s: tcp_keepalives_idle %s s, interval %s s, count %s: a vanished "
            "client's locks are freed within minutes%s",
            link, idle, val(res, F_KA_INTERVAL) ? val(res, F_KA_INTERVAL) : "?",
            val(res, F_KA_COUNT) ? val(res, F_KA_COUNT) : "?", client);
}

static void check_timeout(report *r, const PGresult *res, int col,
                          const char *name, const char *effect, const char *fix)
{
    const char *v = val(res, col);
    if (!v)
        add(r, name, OK, NULL, "%s does not exist on this server", name);
    else if (is_zero(v))
        add(r, name, OK, NULL, "%s is 0 (off) for this role", name);
    else
        add(r, name, WARNING, fix, "%s is %s for this role: %s", name, v,
            effect);
}

static void check_timeouts(report *r, const PGresult *res)
{
    check_timeout(r, res, F_IDLE_SESSION, "idle_session_timeout",
                  "a client idle that long while holding a session lock "
                  "(psql, an app) is disconnected and loses it; pglock run "
                  "sets its own value",
                  "reset it for roles that hold locks idle "
                  "(ALTER ROLE ... RESET idle_session_timeout)");
    check_timeout(r, res, F_IDLE_XACT, "idle_in_transaction_session_timeout",
                  "a holder of transaction locks that idles in its "
                  "transaction that long is disconnected and loses them",
                  "raise or reset it for roles that hold transaction locks");
    check_timeout(r, res, F_STATEMENT, "statement_timeout",
                  "a wait in pg_advisory_lock() (or a job in one statement) "
                  "is cancelled after it; pglock sets 0 on its own lock "
                  "connection, but not behind a pooler",
                  "reset it for roles that wait for locks, or pass a "
                  "timeout to the wait itself");
    check_timeout(r, res, F_LOCK_TIMEOUT, "lock_timeout",
                  "every lock wait gives up after it",
                  "reset it for roles that wait for locks; pglock sets its "
                  "own per wait");
}

/* "GRANT role TO user", the user written as an SQL identifier: in double
 * quotes, each '"' doubled, so that the hint can be pasted as it is. */
static void grant_fix(char *fix, size_t len, const char *role, const char *user)
{
    int n = snprintf(fix, len, "GRANT %s TO \"", role);
    if (n < 0 || (size_t)n + 2 > len) {
        fix[0] = '\0';
        return;
    }
    size_t o = (size_t)n;
    for (; *user && o + 3 < len; user++) {
        if (*user == '"')
            fix[o++] = '"';
        fix[o++] = *user;
    }
    fix[o++] = '"';
    fix[o] = '\0';
}

/* What status and terminate need of a role.  A role checked for
 * --record only records runs, which needs neither: told, not warned. */
static void check_privileges(report *r, const PGresult *res, int want_record)
{
    const char *user = val(res, F_USER);
    int super = is_true(res, F_SUPER);
    severity lacking = want_record ? OK : WARNING;
    const char *not_needed = want_record ? " (recording runs does not need it)"
                                         : "";
    char fix[256];
    if (super || is_true(res, F_READ_STATS))
        add(r, "see_sessions", OK, NULL,
            "role \"%s\" sees every session in pg_stat_activity (%s)", user,
            super ? "superuser" : "pg_read_all_stats");
    else {
        grant_fix(fix, sizeof fix, "pg_read_all_stats", user);
        add(r, "see_sessions", lacking, fix,
            "role \"%s\" cannot see other roles' sessions: pglock status "
            "shows their locks without client, state or times%s",
            user, not_needed);
    }
    if (super || is_true(res, F_SIGNAL))
        add(r, "signal_backends", OK, NULL,
            "role \"%s\" can end a stuck holder with pg_terminate_backend() (%s)",
            user, super ? "superuser" : "pg_signal_backend");
    else {
        grant_fix(fix, sizeof fix, "pg_signal_backend", user);
        add(r, "signal_backends", lacking, fix,
            "role \"%s\" cannot end another role's stuck holder with "
            "pg_terminate_backend()%s",
            user, not_needed);
    }
}

/*
 * The run history: always when pglock.runs exists, and with --record
 * (the role will record runs) also when it does not, which is then a
 * problem.  What the role may do with it (record, read, prune) is a
 * warning when it may not, a problem when it may not record and
 * --record was asked.
 */
static void check_history(report *r, PGconn *conn, const char *user,
                          int want_record)
{
    int timed_out;
    PGresult *p = exec_within(conn, history_probe_sql, PROBE_TIMEOUT_MS,
                              &timed_out);
    if (PQresultStatus(p) != PGRES_TUPLES_OK || PQntuples(p) != 1 ||
        PQnfields(p) < 5) {
        char msg[300];
        doctor_first_line(msg, sizeof msg,
                          p           ? PQresultErrorMessage(p)
                          : timed_out ? "no answer in time"
                                      : PQerrorMessage(conn));
        if (want_record)
            add(r, "run_history", PROBLEM, NULL,
                "could not read the run history's catalog: %s", msg);
        PQclear(p);
        return;
    }
    if (!is_true(p, 0)) {
        if (want_record)
            add(r, "run_history", PROBLEM,
                "pglock init (once, as a role "
                "that may create a schema)",
                "no run history in database "
                "\"%s\": --record would exit 69",
                PQdb(conn));
        PQclear(p);
        return;
    }
    const char *v = val(p, 1);
    if (!v || atoi(v) != HISTORY_SCHEMA_VERSION) {
        add(r, "run_history", PROBLEM,
            "pglock init, with this version of "
            "pglock",
            "pglock.runs has schema version %s; this pglock "
            "reads version %d",
            v ? v : "(none)", HISTORY_SCHEMA_VERSION);
        PQclear(p);
        return;
    }
    add(r, "run_history", OK, NULL, "pglock.runs, schema version %s", v);
    int record = is_true(p, 2), read = is_true(p, 3), prune = is_true(p, 4);
    char fix[256];
    snprintf(fix, sizeof fix,
             "pglock init --%s='%s' prints the GRANTs "
             "(--apply runs them)",
             !record ? "recorder" : "pruner", user);
    if (record && read && prune)
        add(r, "history_grants", OK, NULL,
            "role \"%s\" may record, read "
            "and prune runs",
            user);
    else if (want_record && record)
        /* the recorder's grants (pglock init --recorder): all its job needs */
        add(r, "history_grants", OK, NULL,
            "role \"%s\" may record runs%s; "
            "pruning them is another role's job (pglock init --pruner)",
            user, read ? " and read them" : "");
    else
        /* Without --record the role's job is not known: only a role that
         * may do nothing with the history is warned. */
        add(r, "history_grants",
            want_record               ? PROBLEM
            : record || read || prune ? OK
                                      : WARNING,
            fix, "role \"%s\" may not %s%s%s%s%s", user,
            record ? "" : "record runs (USAGE, SELECT, INSERT, UPDATE)",
            !record && !read ? ", " : "",
            read ? "" : "read them (USAGE, SELECT)",
            (!record || !read) && !prune ? ", " : "",
            prune ? "" : "prune them (USAGE, SELECT, DELETE)");
    PQclear(p);
}

/* ------------------------------------------------ output */

static void print_text(const report *r, PGconn *conn)
{
    const char *host = PQhost(conn);
    printf("pglock doctor: user %s, database %s, %s%s port %s\n", PQuser(conn),
           PQdb(conn), host && host[0] == '/' ? "socket " : "host ",
           host ? host : "?", PQport(conn));
    int problems = 0, warnings = 0;
    for (int i = 0; i < r->n; i++) {
        const finding *f = &r->f[i];
        printf("%-8s %s: %s\n", severity_name[f->status], f->check, f->reason);
        if (f->status != OK && f->fix[0])
            printf("%-8s fix: %s\n", "", f->fix);
        problems += f->status == PROBLEM;
        warnings += f->status == WARNING;
    }
    printf("%d problem%s, %d warning%s\n", problems, problems == 1 ? "" : "s",
           warnings, warnings == 1 ? "" : "s");
}

static void print_json(const report *r, PGconn *conn, const doctor_host *hosts,
                       int nhosts)
{
    json_writer w;
    json_init(&w, stdout);
    int problems = 0, warnings = 0;
    json_object_begin(&w, NULL);
    json_int(&w, "format", 1);
    json_string(&w, "host", PQhost(conn));
    json_string(&w, "port", PQport(conn));
    json_string(&w, "database", PQdb(conn));
    json_string(&w, "user", PQuser(conn));
    if (nhosts > 1) {
        json_array_begin(&w, "hosts");
        for (int i = 0; i < nhosts; i++) {
            json_object_begin(&w, NULL);
            json_string(&w, "host", hosts[i].host);
            json_string(&w, "port", hosts[i].port);
            json_string(&w, "role", hosts[i].role);
            json_string(&w, "error", hosts[i].error[0] ? hosts[i].error : NULL);
            json_object_end(&w);
        }
        json_array_end(&w);
    }
    json_array_begin(&w, "findings");
    for (int i = 0; i < r->n; i++) {
        const finding *f = &r->f[i];
        json_object_begin(&w, NULL);
        json_string(&w, "check", f->check);
        json_string(&w, "status", severity_name[f->status]);
        json_string(&w, "reason", f->reason);
        json_string(&w, "fix", f->status != OK && f->fix[0] ? f->fix : NULL);
        json_object_end(&w);
        problems += f->status == PROBLEM;
        warnings += f->status == WARNING;
    }
    json_array_end(&w);
    json_int(&w, "problems", problems);
    json_int(&w, "warnings", warnings);
    json_object_end(&w);
    json_end(&w);
}

/* ------------------------------------------------ the command */

typedef struct doctor_options {
    cli_common common; /* first: the shared options' fields */
    int record;
    doctor_promotion promo; /* lease_ms -1 until given or defaulted */
} doctor_options;
CLI_COMMON_FIRST(doctor_options);

static const cli_opt doctor_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Options:"},
    {.type = CLI_OPT_FLAG,
     .long_name = "record",
     .field = offsetof(doctor_options, record),
     .help = "check the run history for --record (else only when\n"
             "pglock.runs exists)"},
    {.type = CLI_OPT_DURATION,
     .long_name = "promotion-after",
     .field = offsetof(doctor_options, promo.promotion_ms),
     .value_name = "DURATION",
     .help = "check run's and lead's lease against the HA\n"
             "manager's earliest promotion after a silent\n"
             "primary death (Patroni: ttl - loop_wait)"},
    {.type = CLI_OPT_DURATION,
     .long_name = "lease",
     .field = offsetof(doctor_options, promo.lease_ms),
     .value_name = "DURATION",
     .help = "the lease to check, as run takes it (default 20s)"},
    {.type = CLI_OPT_DURATION,
     .long_name = "kill-after",
     .field = offsetof(doctor_options, promo.kill_after_ms),
     .value_name = "DURATION",
     .help = "the kill-after to check, as run takes it"},
    {.type = CLI_OPT_END}};

static const cli_opt *const doctor_tables[] = {
    doctor_opts,   cli_output_heading, cli_json_opts,
    cli_conn_opts, cli_help_opts,      NULL};

static void print_help(const cli_common *target)
{
    (void)target;
    printf(
        "pglock doctor checks the server and the path to it.\n\n"
        "Usage:\n"
        "  pglock doctor [OPTION]...\n\n"
        "Each finding is ok, warning or problem, with the reason and the fix.\n"
        "Only read-only statements are sent (safe through a pooler).\n\n");
    cli_opt_help(stdout, doctor_tables);
    printf("\nExit status: 0 with no problem, 1 with a problem, 64 for bad\n"
           "options, 69 when it could not connect.\n"
           "See pglock-doctor(1).\n");
}

/* Connects and reads facts_sql's one row: CLI_GO_ON with *conn and
 * *res (the caller's to free), else the exit status, its error printed
 * and nothing left open. */
static cli_step read_facts(const cli_conn *cc, PGconn **conn, PGresult **res)
{
    pglock_error err = {0};
    *res = NULL;
    *conn = cli_connect(cc, "pglock doctor", NULL, &err);
    if (!*conn)
        return cli_connect_error(&err, NULL);
    *res = cli_query(*conn, facts_sql, 0, NULL, &err);
    if (PQresultStatus(*res) == PGRES_TUPLES_OK && PQntuples(*res) == 1 &&
        PQnfields(*res) == F_NCOLS)
        return CLI_GO_ON;
    char msg[512];
    doctor_first_line(msg, sizeof msg,
                      !*res ? err.message
                      : PQresultErrorMessage(*res)[0]
                          ? PQresultErrorMessage(*res)
                          : PQerrorMessage(*conn));
    /* No answer, an error, a lost connection: unavailable.  An answer of
     * the wrong shape is ours to fix. */
    int ours = PQresultStatus(*res) == PGRES_TUPLES_OK;
    PQclear(*res);
    PQfinish(*conn);
    *res = NULL;
    *conn = NULL;
    return cli_error(ours ? CLI_EXIT_SOFTWARE : CLI_EXIT_UNAVAILABLE,
                     "could not read the server's settings: %s", msg);
}

/* Whether a pooler is in the path (libpq's backend pid is not the
 * server's), with its findings: the pooler, its pool mode, its waiters.
 * 1 if one is, else 0. */
static int check_pooler(report *r, PGconn *conn, const PGresult *res,
                        const cli_conn *cc)
{
    int protocol_pid = PQbackendPID(conn);
    int sql_pid = atoi(val(res, F_PID));
    if (protocol_pid == sql_pid) {
        add(r, "pooler", OK, NULL,
            "no pooler in the path: PQbackendPID() and pg_backend_pid() are "
            "both %d",
            sql_pid);
        return 0;
    }
    /* The setup docs/deployment.md recommends: run and lead (--mode=auto)
     * hold their locks in a transaction here.  PgBouncer's backend pid is
     * a random 32-bit cancel key: unsigned, as in run. */
    add(r, "pooler", OK, NULL,
        "a pooler is in the path (PQbackendPID() %u is not the server's "
        "pg_backend_pid() %d): pglock run and lead hold their locks in a "
        "transaction here (--mode=auto, the default); session locks are "
        "refused",
        (unsigned)protocol_pid, sql_pid);
    probe_pool_mode(r, conn, sql_pid, cc);
    add(r, "pooled_waiters", WARNING,
        "wait with a timeout (or --try), and size the pool above the number "
        "of clients that may wait at once",
        "each client waiting for a lock holds a pooled server connection for "
        "its whole wait: enough waiters exhaust the pool and stall every "
        "other client");
    return 1;
}

static const cli_opt_command doctor_command = {"doctor", doctor_tables,
                                               print_help, 0};

/* CLI_GO_ON, else the exit status. */
static cli_step parse_options(int argc, char **argv, doctor_options *o)
{
    memset(o, 0, sizeof *o);
    o->promo = (doctor_promotion){-1, -1, -1};
    int operand;
    cli_step step = cli_opt_parse(&doctor_command, argc, argv, &o->common,
                                  &operand);
    if (step != CLI_GO_ON)
        return step;
    if (operand < argc)
        return cli_usage_error("doctor", "unexpected argument \"%s\"",
                               argv[operand]);
    if ((o->promo.lease_ms >= 0 || o->promo.kill_after_ms >= 0) &&
        o->promo.promotion_ms < 0)
        return cli_usage_error("doctor", "--lease and --kill-after are checked "
                                         "against --promotion-after, which is "
                                         "missing");
    if (o->promo.lease_ms < 0)
        o->promo.lease_ms = RUN_LEASE_DEFAULT_MS;
    return CLI_GO_ON;
}

int cmd_doctor(int argc, char **argv)
{
    doctor_options o;
    cli_step step = parse_options(argc, argv, &o);
    if (step != CLI_GO_ON)
        return step;
    cli_conn cc = o.common.conn;
    doctor_promotion promo = o.promo;
    const int json = o.common.json, record = o.record;
    /* The lease check is arithmetic: its bad input is refused before any
     * connection. */
    char promo_reason[sizeof((finding *)0)->reason];
    char promo_fix[sizeof promo_reason];
    int promo_fits = 0;
    if (promo.promotion_ms >= 0 &&
        doctor_promotion_check(&promo, &promo_fits, promo_reason,
                               sizeof promo_reason, promo_fix,
                               sizeof promo_fix) < 0)
        return cli_usage_error("doctor", "%s", promo_reason);

    PGconn *conn;
    PGresult *res;
    step = read_facts(&cc, &conn, &res);
    if (step != CLI_GO_ON)
        return step;

    report r;
    memset(&r, 0, sizeof r);
    check_version(&r, res);
    check_standby(&r, res);
    doctor_host hosts[DOCTOR_MAX_HOSTS];
    int nhosts = doctor_hosts(conn, hosts, DOCTOR_MAX_HOSTS);
    if (nhosts > 1)
        check_hosts(&r, hosts, nhosts);
    int pooled = check_pooler(&r, conn, res, &cc);
    char tls[sizeof r.f[0].reason];
    doctor_tls(conn, tls, sizeof tls);
    add(&r, "tls", OK, NULL, "%s", tls);
    check_lock_table(&r, res);
    check_keepalives(&r, res, conn, pooled);
    check_timeouts(&r, res);
    check_privileges(&r, res, record);
    check_history(&r, conn, val(res, F_USER), record);
    if (promo.promotion_ms >= 0)
        add(&r, "promotion", promo_fits ? OK : PROBLEM, promo_fix, "%s",
            promo_reason);

    if (json)
        print_json(&r, conn, hosts, nhosts);
    else
        print_text(&r, conn);
    PQclear(res);
    PQfinish(conn);
    for (int i = 0; i < r.n; i++)
        if (r.f[i].status == PROBLEM)
            return CLI_EXIT_PROBLEM;
    return 0;
}
