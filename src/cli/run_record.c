/*
 * `run --record` and `lead --record`: each run leaves a row in pglock.runs
 * (history.h).  The history's connection is a second one, opened before
 * the lock is taken (so that a missing table fails the command before it
 * holds anything), and used for one INSERT after the grant and one UPDATE
 * at the end, each bounded by a deadline.  Never the lock connection: in a
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
#include "run.h"

enum { OPT_RECORD = 400, OPT_HOST_LABEL };

const cli_opt run_record_opts[] = {
    {0, 0, NULL, 0, NULL, "History (see pglock init):"},
    {OPT_RECORD, 0, "record", CLI_OPT_NO_VALUE, NULL,
     "record the run in pglock.runs (or PGLOCK_RECORD=1)"},
    {OPT_HOST_LABEL, 0, "host-label", CLI_OPT_VALUE, "NAME",
     "the host recorded (default: the host name)"},
    CLI_OPT_END};

int run_record_option(run_args *a, int id, const char *value)
{
    switch (id) {
    case OPT_RECORD:
        a->record = 1;
        return -1;
    case OPT_HOST_LABEL:
        if (!*value)
            return cli_usage_error(a->command, "invalid value for --host-label: "
                                   "it is empty");
        pglock_key probe; /* a name's rule: valid UTF-8, as stored */
        if (pglock_key_text(&probe, value) < 0)
            return cli_usage_error(a->command, "invalid value for --host-label: "
                                   "it is not valid UTF-8");
        a->host_label = value;
        return -1;
    default:
        return -2;
    }
}

/* One of words, ignoring case. */
static int is_one_of(const char *value, const char *const *words)
{
    for (; *words; words++)
        if (strcasecmp(value, *words) == 0)
            return 1;
    return 0;
}

int run_record_env(run_args *a)
{
    static const char *const yes[] = {"1", "yes", "true", "on", NULL};
    static const char *const no[] = {"0", "no", "false", "off", "", NULL};
    const char *env = getenv("PGLOCK_RECORD");
    if (!env || is_one_of(env, no))
        return -1;
    if (is_one_of(env, yes)) {
        a->record = 1;
        return -1;
    }
    /* A typo must not turn the history off without a word. */
    return cli_usage_error(a->command, "invalid value for PGLOCK_RECORD: \"%s\" "
                           "(1, yes, true or on to record; 0, no, false or off not to)",
                           env);
}

static int recording(const run_state *st)
{
    return st->args->record;
}

static void close_record(run_state *st)
{
    PQfinish(st->record_conn);
    st->record_conn = NULL;
    st->record_id = 0;
}

int run_record_prepare(run_state *st)
{
    if (!recording(st))
        return -1;
    close_record(st);
    char app[64], err[512];
    run_application_name(app, "record", st->args->key_text);
    /* No lock is held yet; the bound only keeps a dead server from
     * hanging the command before it contends. */
    int64_t deadline = pglock_now_ms() + st->lease.client_ms;
    st->record_conn = history_connect(&st->args->conn, app, deadline, err, sizeof err);
    PGresult *probe = st->record_conn
        ? history_exec(&st->record_conn, history_probe_sql, 0, NULL, deadline,
                       err, sizeof err)
        : NULL;
    if (!probe) {
        cli_warning("could not reach the run history: %s; the run will not be "
                    "recorded", err);
        close_record(st);
        return -1;
    }
    int rc = history_check_probe(probe, 1, CLI_EXIT_UNAVAILABLE);
    PQclear(probe);
    if (rc) {
        close_record(st);
        return rc;
    }
    return -1;
}

/* The program recorded: its name only, never its arguments. */
static const char *program_name(const run_args *a)
{
    if (!a->argv)
        return "sh";
    const char *slash = strrchr(a->argv[0], '/');
    return slash && slash[1] ? slash + 1 : a->argv[0];
}

static const char insert_sql[] =
    "INSERT INTO pglock.runs (key, key_name, classid, objid, objsubid, host,"
    " os_user, pid, command, hold, backend_pid, backend_start, xact_start,"
    " fencing_token, outcome, ended_at)"
    " SELECT $1::text, $2::text, $3::bigint, $4::bigint, $5::int, $6::text,"
    " $7::text, $8::int, $9::text, $10::text, p.pid, a.backend_start,"
    " CASE WHEN $10::text = 'xact' THEN a.xact_start END, $12::bigint,"
    " $13::text, CASE WHEN $13::text IS NOT NULL THEN now() END"
    " FROM (SELECT $11::int AS pid) p"
    " LEFT JOIN pg_stat_activity a ON a.pid = p.pid"
    " RETURNING id";

/* Inserts the row (outcome NULL: a run under way) by deadline. */
static void insert_row(run_state *st, const char *outcome, int64_t deadline)
{
    const run_args *a = st->args;
    pglock_key key;
    char err[512], cls[16], obj[16], sub[16], pid[16], bpid[16], tok[24];
    char host[256];
    uint32_t classid = 0, objid = 0;
    int objsubid = 0;
    /* From the resolved id ("123" or "42:9"): a legacy key's value is
     * known only there. */
    int ns, nsid;
    if (strchr(st->key_id, ':') && sscanf(st->key_id, "%d:%d", &ns, &nsid) == 2)
        pglock_key_pair(&key, ns, nsid);
    else
        pglock_key_int64(&key, strtoll(st->key_id, NULL, 10));
    pglock_key_locktag(&key, &classid, &objid, &objsubid);
    snprintf(cls, sizeof cls, "%u", classid);
    snprintf(obj, sizeof obj, "%u", objid);
    snprintf(sub, sizeof sub, "%d", objsubid);
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    snprintf(bpid, sizeof bpid, "%d", pglock_client_backend_pid(st->client));
    snprintf(tok, sizeof tok, "%lld", (long long)st->token);
    if (a->host_label)
        snprintf(host, sizeof host, "%s", a->host_label);
    else if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = '\0';
    struct passwd *pw = getpwuid(geteuid());
    int held = outcome == NULL;
    const char *params[13] = {
        st->key_id, a->key_text, cls, obj, sub, host,
        pw ? pw->pw_name : getenv("USER"), pid, program_name(a),
        !held ? NULL
        : pglock_client_hold_mode(st->client) == PGLOCK_HOLD_XACT ? "xact"
                                                                  : "session",
        held ? bpid : NULL, held && st->token ? tok : NULL, outcome};
    PGresult *r = history_exec(&st->record_conn, insert_sql, 13, params,
                               deadline, err, sizeof err);
    if (!r) {
        cli_warning("could not record the %s of the run: %s", held ? "start"
                    : "skip", err);
        return;
    }
    st->record_id = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    cli_verbose("recorded as run %lld", st->record_id);
    PQclear(r);
}

void run_record_start(run_state *st)
{
    if (!st->record_conn)
        return;
    /* A step taken while the lock is held: within the client deadline. */
    insert_row(st, NULL, pglock_client_confirmed_at(st->client) +
                             st->lease.client_ms);
}

void run_record_not_run(run_state *st, int rc)
{
    if (st->record_conn && (rc == PGLOCK_EBUSY || rc == PGLOCK_ETIMEDOUT))
        insert_row(st, "skipped", pglock_now_ms() + st->lease.client_ms);
    close_record(st);
}

static const char *outcome_of(const run_state *st, int code)
{
    if (st->lost && code == st->args->lost_code)
        return "lost";
    if (st->job_exited && WIFSIGNALED(st->job_status))
        return "killed";
    return code == 0 ? "succeeded" : "failed";
}

static const char update_sql[] =
    "UPDATE pglock.runs SET ended_at = now(), exit_status = $2::int,"
    " outcome = $3::text WHERE id = $1::bigint";

void run_record_end(run_state *st, int code)
{
    if (!st->record_conn || !st->record_id) {
        close_record(st);
        return;
    }
    /* While the lock is still ours, within the client deadline; after a
     * loss, or past it, the lock no longer depends on us: a bound of its
     * own, so that a dead server cannot hold the exit. */
    int64_t deadline = pglock_client_confirmed_at(st->client) + st->lease.client_ms;
    if (st->lost || deadline < pglock_now_ms() + st->lease.margin_ms)
        deadline = pglock_now_ms() + st->lease.client_ms;
    char id[24], status[16], err[512];
    snprintf(id, sizeof id, "%lld", st->record_id);
    snprintf(status, sizeof status, "%d", code);
    const char *params[3] = {id, status, outcome_of(st, code)};
    PGresult *r = history_exec(&st->record_conn, update_sql, 3, params,
                               deadline, err, sizeof err);
    if (!r)
        cli_warning("could not record the end of the run: %s", err);
    PQclear(r);
    close_record(st);
}
