/*
 * `run --record` and `lead --record`: each run leaves a row in pglock.runs
 * (history.h).  The history's connection is a second one, opened before
 * the lock is taken (so that a missing table fails the command before it
 * holds anything), and used for one INSERT after the grant and one UPDATE
 * at the end, each bounded by a deadline (the UPDATE on a new connection
 * when that one is gone).  Never the lock connection: in a
 * transaction hold the INSERT would give the holding transaction an xid,
 * and behind PgBouncer it needs a pooled server connection of its own,
 * which may not come in time; then the job runs unrecorded, with a warning.
 *
 * What is recorded of the command is its program name only (sh for -c):
 * a command line can carry secrets (-p PASSWORD, a token in a URL), and
 * the history is read by every role that monitors the job.
 */
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>
#include "cli.h"
#include "history.h"
#include "lease_rules.h"
#include "run.h"

/* --host-label: a name, as stored (valid UTF-8) and never empty. */
static cli_step host_label_option(const char *command, const cli_opt *o,
                                  cli_common *target, const char *value)
{
    if (!*value)
        return cli_usage_error(command,
                               "invalid value for --%s: "
                               "it is empty",
                               o->long_name);
    pglock_key probe; /* a name's rule: valid UTF-8, as stored */
    if (pglock_key_text(&probe, value) < 0)
        return cli_usage_error(command,
                               "invalid value for --%s: "
                               "it is not valid UTF-8",
                               o->long_name);
    *(const char **)cli_opt_field(o, target) = value;
    return CLI_GO_ON;
}

const cli_opt run_record_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "History (see pglock init):"},
    {.type = CLI_OPT_FLAG,
     .long_name = "record",
     .field = offsetof(run_args, record),
     .help = "record the run in pglock.runs (or PGLOCK_RECORD=1)"},
    {.type = CLI_OPT_CALL,
     .long_name = "host-label",
     .field = offsetof(run_args, host_label),
     .value_name = "NAME",
     .call = host_label_option,
     .help = "the host recorded and named in the lock\nconnection's "
             "application_name (default:\nthe host name)"},
    {.type = CLI_OPT_END}};

/* One of words, ignoring case. */
static int is_one_of(const char *value, const char *const *words)
{
    for (; *words; words++)
        if (strcasecmp(value, *words) == 0)
            return 1;
    return 0;
}

cli_step run_record_env(run_args *a)
{
    static const char *const yes[] = {"1", "yes", "true", "on", NULL};
    static const char *const no[] = {"0", "no", "false", "off", "", NULL};
    const char *env = getenv("PGLOCK_RECORD");
    if (!env || is_one_of(env, no))
        return CLI_GO_ON;
    if (is_one_of(env, yes)) {
        a->record = 1;
        return CLI_GO_ON;
    }
    /* A typo must not turn the history off without a word. */
    return cli_usage_error(
        a->command,
        "invalid value for PGLOCK_RECORD: \"%s\" "
        "(1, yes, true or on to record; 0, no, false or off not to)",
        env);
}

/* See run.h. */
const char *run_host_label(const run_args *a, char *buf, size_t len)
{
    if (a->host_label)
        snprintf(buf, len, "%s", a->host_label);
    else if (gethostname(buf, len) != 0)
        return NULL;
    buf[len - 1] = '\0';
    return buf[0] ? buf : NULL;
}

/* The history connection's application_name, "pglock record KEY on
 * HOST": status names the run locks it holds after KEY. */
static void record_app(const run_state *st, char app[64])
{
    char host[256];
    cli_application_name(app, "record", st->args->key_text,
                         run_host_label(st->args, host, sizeof host));
}

static int recording(const run_state *st)
{
    return st->args->record;
}

/* Closing the connection also releases the run locks (run_record_end()
 * records the end first). */
static void close_record(run_record *rec)
{
    PQfinish(rec->conn);
    rec->conn = NULL;
    rec->n = 0;
    rec->xact = 0;
}

/* The history connection idles for the whole run while it holds the run
 * locks: a server's idle_session_timeout must not end it (the lock
 * connection has a lease of its own; this one needs none). */
static const char keep_idle_sql[] =
    "SELECT CASE WHEN current_setting('server_version_num')::int >= 140000"
    " THEN set_config('idle_session_timeout', '0', false) END";

cli_step run_record_prepare(run_state *st)
{
    run_record *rec = &st->rec;
    if (!recording(st))
        return CLI_GO_ON;
    close_record(rec);
    char app[64], err[512];
    record_app(st, app);
    /* No lock is held yet; the bound only keeps a dead server from
     * hanging the command before it contends. */
    int64_t deadline = run_deadline_from_now(st);
    rec->conn = history_connect(&st->args->common.conn, app, deadline, err,
                                sizeof err);
    PGresult *probe = rec->conn ? history_exec(&rec->conn, history_probe_sql, 0,
                                               NULL, deadline, err, sizeof err)
                                : NULL;
    if (!probe) {
        cli_warning("could not reach the run history: %s; the run will not be "
                    "recorded",
                    err);
        close_record(rec);
        return CLI_GO_ON;
    }
    int rc = history_check_probe(probe, 1, CLI_EXIT_UNAVAILABLE);
    if (!rc)
        rec->revision = history_revision(probe);
    PQclear(probe);
    if (rc) {
        close_record(rec);
        return rc;
    }
    PGresult *r = history_exec(&rec->conn, keep_idle_sql, 0, NULL, deadline,
                               err, sizeof err);
    if (!r) {
        cli_warning("could not reach the run history: %s; the run will not be "
                    "recorded",
                    err);
        close_record(rec);
    }
    PQclear(r);
    return CLI_GO_ON;
}

/* The program recorded: its name only, never its arguments. */
static const char *program_name(const run_args *a)
{
    if (!a->argv)
        return "sh";
    const char *slash = strrchr(a->argv[0], '/');
    return slash && slash[1] ? slash + 1 : a->argv[0];
}

/*
 * One row per key, so that a run of several keys is found under each:
 * the keys come as arrays (unnest ... WITH ORDINALITY keeps their order).
 * With --mode=session, each row's run lock is taken by the INSERT itself,
 * so that no reader sees the row without it.  $15 is the time left to
 * the deadline when it was sent: an INSERT that waited past it (a locked
 * table) writes nothing, since pglock gave up on it and the job may be
 * long gone.  Its commit waits for the local WAL flush whatever the
 * server's synchronous_commit (as the end's does: a row a crash could
 * take back would tell of no run at all), but not for a synchronous
 * standby: a commit that waited for one could still land, committed
 * locally, after pglock gave up on it.  On a table of revision 2 (history.h) the row also carries
 * its wait ($16) and why it was skipped ($17), in the same statement;
 * on one of revision 1, which has not those columns, neither.
 */
static const char insert_rev2_cols[] = ", wait_ms, skip_reason";
static const char insert_rev2_vals[] = ", $16::bigint, $17::text";
static const char insert_fmt[] =
    "INSERT INTO pglock.runs (key, key_name, classid, objid, objsubid, host,"
    " os_user, pid, command, hold, backend_pid, backend_start, xact_start,"
    " fencing_token, outcome, ended_at%s)"
    " SELECT k.key, k.name, k.cls, k.obj, k.sub, $6::text,"
    " $7::text, $8::int, $9::text, $10::text, p.pid, a.backend_start,"
    " CASE WHEN $10::text = 'xact' THEN a.xact_start END, $12::bigint,"
    " $13::text, CASE WHEN $13::text IS NOT NULL THEN now() END%s"
    " FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[],"
    "  $5::int[]) WITH ORDINALITY AS k(key, name, cls, obj, sub, n)"
    " CROSS JOIN (SELECT $11::int AS pid,"
    "  set_config('synchronous_commit', 'local', true)) p"
    " LEFT JOIN pg_stat_activity a ON a.pid = p.pid"
    " WHERE clock_timestamp() < now() + $15::bigint * interval '1 millisecond'"
    " ORDER BY k.n"
    " RETURNING id, CASE WHEN $14::bool THEN pg_try_advisory_lock(" HISTORY_RUN_LOCK_NS_SQL
    ", id::bit(32)::int) END";

/* In a transaction hold (behind PgBouncer), the run locks are held in a
 * transaction of the history connection, which a pooler keeps on one
 * server connection until it ends; the server must not end it while it
 * idles. */
static const char xact_run_lock_sql[] =
    "SELECT set_config('idle_in_transaction_session_timeout', '0', true),"
    " CASE WHEN current_setting('server_version_num')::int >= 170000"
    "  THEN set_config('transaction_timeout', '0', true) END,"
    " bool_and(pg_try_advisory_xact_lock(" HISTORY_RUN_LOCK_NS_SQL
    ", id::bit(32)::int)) FROM unnest($1::bigint[]) id";

/* Appends text as one element of an array literal: double-quoted, with
 * '"' and '\\' escaped, so that any name (quotes, commas, braces,
 * newlines) arrives intact.  0, or -1 when buf is full.  Room is kept for
 * the closing "}" and its NUL, which record_keys_make() appends. */
static int array_add(char *buf, size_t len, size_t *used, const char *text)
{
    size_t n = *used;
    if (n + 4 >= len)
        return -1;
    if (n > 1)
        buf[n++] = ',';
    buf[n++] = '"';
    for (; *text; text++) {
        if (n + 4 >= len)
            return -1;
        if (*text == '"' || *text == '\\')
            buf[n++] = '\\';
        buf[n++] = *text;
    }
    buf[n++] = '"';
    buf[n] = '\0';
    *used = n;
    return 0;
}

/* The keys' arrays (ids, names, locktags) for insert_sql.  Each element
 * of the RUN_MAX_KEYS takes its longest text, two quotes and a comma: an
 * id "-2147483648:-2147483648" is 23, an oid 10 digits, an objsubid 1. */
typedef struct record_keys {
    char ids[RUN_MAX_KEYS * 26 + 8], cls[RUN_MAX_KEYS * 13 + 8];
    char obj[RUN_MAX_KEYS * 13 + 8], sub[RUN_MAX_KEYS * 4 + 8];
    char names[16384];
} record_keys;

/* The arrays from st->key_id ("123 42:9", canonical order) and
 * st->key_texts.  0, or -1 if too long. */
static int record_keys_make(const run_state *st, record_keys *k)
{
    size_t u_ids = 1, u_names = 1, u_cls = 1, u_obj = 1, u_sub = 1;
    strcpy(k->ids, "{");
    strcpy(k->names, "{");
    strcpy(k->cls, "{");
    strcpy(k->obj, "{");
    strcpy(k->sub, "{");
    const char *p = st->key_id;
    for (int i = 0; i < st->nkeys; i++) {
        char id[32], num[16];
        size_t n = strcspn(p, " ");
        snprintf(id, sizeof id, "%.*s", (int)n, p);
        p += n + (p[n] == ' ');
        /* From the resolved id ("123" or "42:9"): a legacy key's value is
         * known only there. */
        pglock_key key;
        int ns, nsid;
        if (strchr(id, ':') && sscanf(id, "%d:%d", &ns, &nsid) == 2)
            pglock_key_pair(&key, ns, nsid);
        else
            pglock_key_int64(&key, strtoll(id, NULL, 10));
        uint32_t classid = 0, objid = 0;
        int objsubid = 0;
        pglock_key_locktag(&key, &classid, &objid, &objsubid);
        if (array_add(k->ids, sizeof k->ids, &u_ids, id) < 0 ||
            array_add(k->names, sizeof k->names, &u_names, st->key_texts[i]) <
                0)
            return -1;
        snprintf(num, sizeof num, "%u", classid);
        if (array_add(k->cls, sizeof k->cls, &u_cls, num) < 0)
            return -1;
        snprintf(num, sizeof num, "%u", objid);
        if (array_add(k->obj, sizeof k->obj, &u_obj, num) < 0)
            return -1;
        snprintf(num, sizeof num, "%d", objsubid);
        if (array_add(k->sub, sizeof k->sub, &u_sub, num) < 0)
            return -1;
    }
    /* array_add() kept room for these */
    /* NOLINTBEGIN(clang-analyzer-security.insecureAPI.strcpy) */
    strcat(k->ids, "}");
    strcat(k->names, "}");
    strcat(k->cls, "}");
    strcat(k->obj, "}");
    strcat(k->sub, "}");
    /* NOLINTEND(clang-analyzer-security.insecureAPI.strcpy) */
    return 0;
}

/* The ids of the rows, as an array literal, for the run locks and the
 * end's UPDATE. */
static void ids_array(const run_record *rec, char *buf, size_t len)
{
    size_t used = (size_t)snprintf(buf, len, "{");
    for (int i = 0; i < rec->n && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%lld", i ? "," : "",
                                 rec->ids[i]);
    if (used < len)
        snprintf(buf + used, len - used, "}");
}

/* Takes the run locks in a transaction of the history connection. */
static void xact_run_locks(run_record *rec, int64_t deadline)
{
    char err[512], ids[RUN_MAX_KEYS * 24 + 8];
    ids_array(rec, ids, sizeof ids);
    const char *params[1] = {ids};
    rec->begun_at = pglock_now_ms();
    PGresult *r = history_exec(&rec->conn, "BEGIN", 0, NULL, deadline, err,
                               sizeof err);
    PQclear(r);
    r = r ? history_exec(&rec->conn, xact_run_lock_sql, 1, params, deadline,
                         err, sizeof err)
          : NULL;
    if (!r) {
        cli_warning("could not mark the run as running in the history: %s",
                    err);
        if (rec->conn) /* an error, not a lost connection */
            PQclear(history_exec(&rec->conn, "ROLLBACK", 0, NULL, deadline, err,
                                 sizeof err));
        return;
    }
    rec->xact = 1;
    PQclear(r);
}

/* Inserts the rows (outcome NULL: a run under way; else "skipped", for
 * skip_reason) by deadline. */
static void insert_row(run_state *st, const char *outcome,
                       const char *skip_reason, int64_t deadline)
{
    run_record *rec = &st->rec;
    const run_args *a = st->args;
    record_keys k;
    char err[512], pid[16], bpid[16], tok[24], left[24], wait[24];
    char host[256];
    int held = outcome == NULL;
    int xact = held &&
               pglock_client_lifetime(st->client) == PGLOCK_LIFETIME_XACT;
    if (record_keys_make(st, &k) < 0) {
        cli_warning("could not record the %s of the run: the keys' names are "
                    "too long",
                    held ? "start" : "skip");
        return;
    }
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(bpid, sizeof bpid, "%d", pglock_client_backend_pid(st->client));
    snprintf(tok, sizeof tok, "%lld", (long long)st->token);
    if (!run_host_label(a, host, sizeof host))
        snprintf(host, sizeof host, "?");
    struct passwd *pw = getpwuid(geteuid());
    rec->sent_at = pglock_now_ms();
    snprintf(left, sizeof left, "%lld", (long long)(deadline - rec->sent_at));
    /* the wait: to the grant (st->acquired_at), or to the refusal */
    int64_t waited = (held ? st->acquired_at : rec->sent_at) -
                     rec->contend_from;
    snprintf(wait, sizeof wait, "%lld", (long long)(waited > 0 ? waited : 0));
    int rev2 = rec->revision >= 2;
    char sql[sizeof insert_fmt + 64];
    snprintf(sql, sizeof sql, insert_fmt, rev2 ? insert_rev2_cols : "",
             rev2 ? insert_rev2_vals : "");
    const char *params[17] = {k.ids,
                              k.names,
                              k.cls,
                              k.obj,
                              k.sub,
                              host,
                              pw ? pw->pw_name : getenv("USER"),
                              pid,
                              program_name(a),
                              !held  ? NULL
                              : xact ? "xact"
                                     : "session",
                              held ? bpid : NULL,
                              held && st->token ? tok : NULL,
                              outcome,
                              held && !xact ? "true" : "false",
                              left,
                              wait,
                              skip_reason};
    PGresult *r = history_exec(&rec->conn, sql, rev2 ? 17 : 15, params,
                               deadline, err, sizeof err);
    if (r && PQntuples(r) == 0) { /* the server found it past the deadline */
        PQclear(r);
        r = NULL;
        snprintf(err, sizeof err, "no answer in time");
    }
    if (!r) {
        cli_warning("could not record the %s of the run: %s",
                    held ? "start" : "skip", err);
        return;
    }
    rec->n = PQntuples(r) < RUN_MAX_KEYS ? PQntuples(r) : RUN_MAX_KEYS;
    for (int i = 0; i < rec->n; i++)
        rec->ids[i] = strtoll(PQgetvalue(r, i, 0), NULL, 10);
    cli_verbose("recorded as run %lld", rec->n ? rec->ids[0] : 0);
    PQclear(r);
    if (xact)
        xact_run_locks(rec, deadline);
}

void run_record_start(run_state *st)
{
    run_record *rec = &st->rec;
    if (!rec->conn)
        return;
    /* A step taken while the lock is held: within the client deadline. */
    insert_row(st, NULL, NULL, run_deadline(st));
}

void run_record_not_run(run_state *st, int rc)
{
    run_record *rec = &st->rec;
    if (rec->conn && (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT))
        insert_row(st, "skipped", rc == PGLOCK_EBUSY ? "busy" : "timed_out",
                   run_deadline_from_now(st));
    close_record(rec);
}

static const char *outcome_of(const run_state *st, int code)
{
    if (st->lost && code == st->args->lost_code)
        return "lost";
    if (st->job_exited && WIFSIGNALED(st->job_status))
        return "killed";
    return code == 0 ? "succeeded" : "failed";
}

/*
 * The end, written once: only rows not ended yet (an earlier attempt may
 * have landed after all), and none held by another transaction (that
 * attempt's, not yet committed or rolled back: SKIP LOCKED never waits
 * for it).  The end is $4 after the row's started_at (the server's clock
 * when the INSERT began), counted on our clock from when we sent it to
 * the job's real end.  $5 is our deadline counted from now() (when the
 * transaction began: this statement's, or the run locks' BEGIN), past
 * which the statement writes nothing: it waited for a locked table after
 * we gave up on it.  So a late statement never falsifies an end: it is
 * either on time or a no-op.  Answers (rows ended now, rows there, rows
 * ended before).
 */
static const char update_sql[] =
    "WITH e AS (UPDATE pglock.runs SET"
    "  ended_at = started_at + $4::bigint * interval '1 millisecond',"
    "  exit_status = $2::int, outcome = $3::text"
    " WHERE id IN (SELECT id FROM pglock.runs"
    "  WHERE id = ANY ($1::bigint[]) AND outcome IS NULL"
    "  FOR UPDATE SKIP LOCKED)"
    " AND clock_timestamp() < now() + $5::bigint * interval '1 millisecond'"
    " RETURNING id)"
    " SELECT (SELECT count(*) FROM e), count(*), count(outcome),"
    "  set_config('synchronous_commit', 'local', true)"
    " FROM pglock.runs WHERE id = ANY ($1::bigint[])";

/* In a transaction hold, the UPDATE runs in the run locks' transaction
 * and its COMMIT records the end and frees them at once. */
static PGresult *commit(run_record *rec, PGresult *updated, int64_t deadline,
                        char *err, size_t errlen)
{
    if (!updated || !rec->xact)
        return updated;
    PGresult *c = history_exec(&rec->conn, "COMMIT", 0, NULL, deadline, err,
                               errlen);
    if (!c || strcmp(PQcmdStatus(c), "COMMIT") != 0) {
        if (c)
            snprintf(err, errlen, "the transaction was rolled back");
        PQclear(c);
        PQclear(updated);
        return NULL;
    }
    PQclear(c);
    return updated;
}

/* Writes the end on rec->conn by deadline; NULL with err when it could
 * not (rec->conn then NULL if the connection is gone).  params[4] is
 * filled here. */
static PGresult *write_end(run_record *rec, const char **params,
                           int64_t deadline, char *err, size_t errlen)
{
    char until[24];
    int64_t began = rec->xact ? rec->begun_at : pglock_now_ms();
    snprintf(until, sizeof until, "%lld", (long long)(deadline - began));
    params[4] = until;
    PGresult *r = history_exec(&rec->conn, update_sql, 5, params, deadline, err,
                               errlen);
    return commit(rec, r, deadline, err, errlen);
}

/*
 * The history's connection is gone (a restart, a failover, a reset): the
 * end goes by a fresh connection, tried until deadline, so that a run
 * that lost its lock to a restart is recorded as lost, not left
 * unrecorded.  The run locks went with the old connection's session.
 */
static PGresult *write_end_anew(run_state *st, const char **params,
                                int64_t deadline, char *err, size_t errlen)
{
    run_record *rec = &st->rec;
    char app[64];
    record_app(st, app);
    rec->xact = 0; /* autocommit: no transaction holds the rows now */
    while (pglock_now_ms() < deadline) {
        rec->conn = history_connect(&st->args->common.conn, app, deadline, err,
                                    errlen);
        PGresult *r = rec->conn ? write_end(rec, params, deadline, err, errlen)
                                : NULL;
        if (r || rec->conn) /* written, or refused by the server: final */
            return r;
        /* a server starting up refuses at once: try again shortly */
        int64_t pause = deadline - pglock_now_ms();
        usleep((useconds_t)(pause > 200 ? 200 : pause > 0 ? pause : 0) * 1000);
    }
    return NULL;
}

void run_record_end(run_state *st, int code)
{
    run_record *rec = &st->rec;
    rec->contend_from = pglock_now_ms(); /* lead: the next term's wait */
    if (!rec->n) {
        close_record(rec);
        return;
    }
    /* While the lock is still ours, within the client deadline; after a
     * loss, or past it, the lock no longer depends on us: a bound of its
     * own, so that a dead server cannot hold the exit. */
    int64_t now = pglock_now_ms();
    int64_t deadline = run_deadline(st);
    if (st->lost || lease_too_close(deadline, now, st->lease.margin_ms))
        deadline = run_deadline_from_now(st);
    /* The real end: the job's, not the write's. */
    int64_t end = st->job_exited ? st->job_ended_at : now;
    char ids[RUN_MAX_KEYS * 24 + 8], status[16], err[512];
    char ended[24];
    ids_array(rec, ids, sizeof ids);
    snprintf(status, sizeof status, "%d", code);
    snprintf(ended, sizeof ended, "%lld", (long long)(end - rec->sent_at));
    const char *params[5] = {ids, status, outcome_of(st, code), ended, NULL};
    snprintf(err, sizeof err, "no connection");
    PGresult *r = rec->conn ? write_end(rec, params, deadline, err, sizeof err)
                            : NULL;
    if (!r && !rec->conn)
        r = write_end_anew(st, params, deadline, err, sizeof err);
    if (!r)
        cli_warning("could not record the end of the run: %s", err);
    else if (atoi(PQgetvalue(r, 0, 1)) < rec->n)
        /* pruned, or deleted by hand, while it ran */
        cli_warning("could not record the end of the run: its record (run "
                    "%lld) is no longer in pglock.runs",
                    rec->ids[0]);
    else if (atoi(PQgetvalue(r, 0, 0)) + atoi(PQgetvalue(r, 0, 2)) < rec->n)
        /* past the deadline on the server's side, or an earlier attempt's
         * transaction still holds the rows */
        cli_warning("could not record the end of the run: no answer in time");
    PQclear(r);
    close_record(rec);
}
