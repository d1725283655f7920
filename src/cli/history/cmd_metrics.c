/*
 * pglock metrics — the locks and the recorded runs of one database in the
 * Prometheus text exposition format, for node_exporter's textfile
 * collector (pglock metrics > DIR/pglock.prom.$$ && mv ...) or a scrape
 * through any exporter that runs a command.
 *
 * Per key (labels key="123" or "42:9", name="..." named as status names
 * it: from the registry, else a holder's or waiter's pglock
 * application_name, else the name last recorded for it, else ""): locks
 * held and waiting, the age of the oldest wait (pg_locks.waitstart, as
 * status); per recorded key:
 * the last finished run's start, end, duration and outcome (as check
 * judges: a run still going does not count), and the runs going now.
 * Without a history table only the lock metrics are printed.
 *
 * pglock_up is always printed: 1 when every query was answered; else 0,
 * alone, and the exit status is 69, so that the file a textfile collector
 * reads says the server was not reached instead of keeping old numbers.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "history.h"
#include "status.h"

static const cli_opt *const metrics_tables[] = {cli_keys_opts, cli_conn_opts,
                                                cli_help_opts, NULL};

static void usage(void)
{
    printf("pglock metrics prints the advisory locks and the recorded runs of\n"
           "a database as Prometheus metrics (text exposition format).\n\n"
           "Usage:\n  pglock metrics [OPTION]...\n\n");
    cli_opt_help(stdout, metrics_tables);
    printf("\nExit status: 0, 69 server unavailable (pglock_up 0 is still "
           "printed),\n64 usage.\n"
           "See pglock-metrics(1).\n");
}

/* Columns: 0 classid, 1 objid, 2 objsubid, 3 held, 4 waiting, 5 oldest
 * wait (s), 6 the sessions' pglock application_names, one a line (none
 * holds a newline: the server keeps printable ASCII only), 7 the name
 * last recorded for the key (the first %s: that subquery, or NULL::text
 * without a readable history).
 *
 * The wait's age is pg_locks.waitstart's (the second %s; NULL before
 * PostgreSQL 14), as status has it: every role may read pg_locks, while
 * pg_stat_activity's query_start of another role's session is NULL to a
 * role without pg_read_all_stats (the roles pglock init sets up), which
 * read a 0 there.  query_start stands in only until waitstart is set,
 * as in status.  application_name is shown to every role. */
static const char locks_fmt[] =
    "SELECT g.*, %s FROM ("
    " SELECT l.classid::bigint AS classid, l.objid::bigint AS objid,"
    "  l.objsubid, count(*) FILTER (WHERE l.granted),"
    "  count(*) FILTER (WHERE NOT l.granted),"
    "  COALESCE(extract(epoch FROM now() - min(COALESCE(%s, a.query_start))"
    "   FILTER (WHERE NOT l.granted)), 0)::float8,"
    "  string_agg(DISTINCT a.application_name, E'\\n')"
    "   FILTER (WHERE a.application_name LIKE 'pglock %%')"
    " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.database ="
    "  (SELECT oid FROM pg_database WHERE datname = current_database())"
    "  AND NOT (l.objsubid = 2 AND l.classid::bigint = "
    HISTORY_RUN_LOCK_NS_SQL ")" /* a run lock, no job's key */
    " GROUP BY 1, 2, 3) g ORDER BY 1, 2, 3";

static const char recorded_name_sql[] =
    "(SELECT r.key_name FROM pglock.runs r WHERE r.classid = g.classid"
    " AND r.objid = g.objid AND r.objsubid = g.objsubid"
    " ORDER BY r.started_at DESC LIMIT 1)";

/* The last finished run of each key, as check finds it (skips, runs
 * going and runs that may be going do not count).  Columns: 0 classid,
 * 1 objid, 2 objsubid, 3 start (epoch), 4 end (epoch or NULL), 5 duration
 * (s or NULL), 6 key_name, 7 outcome. */
static const char runs_fmt[] =
    "SELECT classid, objid, objsubid, extract(epoch FROM started_at)::float8,"
    " extract(epoch FROM ended_at)::float8,"
    " extract(epoch FROM ended_at - started_at)::float8, key_name, outcome_now"
    " FROM (SELECT DISTINCT ON (f.key) f.* FROM"
    "  (SELECT r.*, %s AS outcome_now FROM pglock.runs r"
    "   WHERE r.outcome IS DISTINCT FROM 'skipped') f"
    "  WHERE f.outcome_now NOT IN ('running', 'running?')"
    "  ORDER BY f.key, f.started_at DESC) l ORDER BY key";

/* The runs of each key going now.  Columns: 0 classid, 1 objid, 2
 * objsubid, 3 running, 4 running? (cannot tell), 5 key_name. */
static const char going_fmt[] =
    "SELECT classid, objid, objsubid,"
    " count(*) FILTER (WHERE outcome_now = 'running'),"
    " count(*) FILTER (WHERE outcome_now = 'running?'),"
    " (array_agg(key_name ORDER BY started_at DESC))[1]"
    " FROM (SELECT r.*, %s AS outcome_now FROM pglock.runs r"
    "  WHERE r.outcome IS NULL) g"
    " WHERE outcome_now IN ('running', 'running?')"
    " GROUP BY key, classid, objid, objsubid ORDER BY key";

static const char *const outcomes[] = {"succeeded", "failed", "killed", "lost",
                                       "unrecorded", NULL};

/* A label value, escaped as the format wants (\\, \", \n). */
static void label(const char *s)
{
    for (; *s; s++) {
        if (*s == '\\' || *s == '"')
            printf("\\%c", *s);
        else if (*s == '\n')
            printf("\\n");
        else
            putchar(*s);
    }
}

/* The name a pglock application_name among row i's (apps_col: one a
 * line; -1: none) gives key, as status finds it, or NULL. */
static const char *name_from_applications(PGresult *r, int i, int apps_col,
                                          const pglock_key *key,
                                          const cli_registry *reg,
                                          char *buf, size_t len)
{
    if (apps_col < 0 || PQgetisnull(r, i, apps_col))
        return NULL;
    for (const char *app = PQgetvalue(r, i, apps_col); *app;) {
        size_t n = strcspn(app, "\n");
        snprintf(buf, len, "%.*s", (int)n, app);
        const char *name = status_name_from_application(buf, key, reg);
        if (name)
            return name;
        app += n + (app[n] == '\n');
    }
    return NULL;
}

/* {key="...",name="..." for row i (columns 0-2 the locktag; the name
 * from the registry, a pglock application_name in apps_col, else
 * name_col's). */
static void labels(PGresult *r, int i, int apps_col, int name_col,
                   const cli_registry *reg)
{
    long long cls = strtoll(PQgetvalue(r, i, 0), NULL, 10);
    long long obj = strtoll(PQgetvalue(r, i, 1), NULL, 10);
    pglock_key key;
    if (atoi(PQgetvalue(r, i, 2)) == 2)
        pglock_key_pair(&key, (int32_t)(uint32_t)cls, (int32_t)(uint32_t)obj);
    else
        pglock_key_int64(&key, (int64_t)(((uint64_t)cls << 32) | (uint64_t)obj));
    char id[64], app[64];
    pglock_key_format(&key, id, sizeof id);
    const char *name = reg ? cli_registry_name_of(reg, &key) : NULL;
    if (!name)
        name = name_from_applications(r, i, apps_col, &key, reg, app, sizeof app);
    if (!name && !PQgetisnull(r, i, name_col))
        name = PQgetvalue(r, i, name_col);
    printf("{key=\"%s\",name=\"", id);
    label(name ? name : "");
    printf("\"");
}

static void header(const char *metric, const char *help)
{
    printf("# HELP %s %s\n# TYPE %s gauge\n", metric, help, metric);
}

/* One gauge with one sample per row that has a value in col. */
static void gauge(PGresult *r, const char *metric, const char *help, int col,
                  int apps_col, int name_col, const cli_registry *reg)
{
    header(metric, help);
    for (int i = 0; i < PQntuples(r); i++) {
        if (PQgetisnull(r, i, col))
            continue;
        printf("%s", metric);
        labels(r, i, apps_col, name_col, reg);
        printf("} %s\n", PQgetvalue(r, i, col));
    }
}

static void print_runs(PGresult *r, PGresult *going, const cli_registry *reg)
{
    gauge(r, "pglock_last_run_start_timestamp_seconds",
          "When the last finished run of the key started (server clock).", 3, -1, 6, reg);
    gauge(r, "pglock_last_run_end_timestamp_seconds",
          "When the last finished run of the key ended (absent when its end "
          "was never recorded).", 4, -1, 6, reg);
    gauge(r, "pglock_last_run_duration_seconds",
          "How long the last finished run of the key took.", 5, -1, 6, reg);
    gauge(going, "pglock_runs_running",
          "Runs of the key going now (absent: none).", 3, -1, 5, reg);
    gauge(going, "pglock_runs_undetermined",
          "Runs of the key that are going or ended unrecorded: pglock "
          "cannot tell (see pglock(1)).", 4, -1, 5, reg);
    header("pglock_last_run_outcome",
           "1 for the outcome of the last finished run of the key, else 0.");
    for (int i = 0; i < PQntuples(r); i++)
        for (int o = 0; outcomes[o]; o++) {
            printf("pglock_last_run_outcome");
            labels(r, i, -1, 6, reg);
            printf(",outcome=\"%s\"} %d\n", outcomes[o],
                   strcmp(PQgetvalue(r, i, 7), outcomes[o]) == 0);
        }
}

/* 1 when pglock.runs exists and can be read, 0 if not, -1 after an
 * error (printed). */
static int history_readable(PGconn **pg)
{
    char err[512];
    PGresult *probe = history_exec(pg, history_probe_sql, 0, NULL, -1, err, sizeof err);
    if (!probe)
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", err), -1;
    int usable = PQgetvalue(probe, 0, 0)[0] == 't' && PQgetvalue(probe, 0, 3)[0] == 't';
    PQclear(probe);
    return usable;
}

static void print_up(int up)
{
    header("pglock_up", "1 when the database answered every query of "
           "pglock metrics, else 0 (and nothing else is printed).");
    printf("pglock_up %d\n", up);
}

/* Runs fmt with the outcome expression (or the history's name subquery). */
static PGresult *query(PGconn **pg, const char *fmt, const char *arg)
{
    char err[512], sql[8192];
    snprintf(sql, sizeof sql, fmt, arg);
    PGresult *r = history_exec(pg, sql, 0, NULL, -1, err, sizeof err);
    if (!r)
        cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    return r;
}

/* The locks (locks_fmt), with the history's names when usable. */
static PGresult *query_locks(PGconn **pg, int usable)
{
    char err[512], sql[4096];
    snprintf(sql, sizeof sql, locks_fmt, usable ? recorded_name_sql : "NULL::text",
             PQserverVersion(*pg) >= 140000 ? "l.waitstart" : "NULL::timestamptz");
    PGresult *r = history_exec(pg, sql, 0, NULL, -1, err, sizeof err);
    if (!r)
        cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    return r;
}

/* Every query first, then the output: all of it, or pglock_up 0 alone. */
static int metrics(PGconn **pg, const cli_registry *reg)
{
    PGresult *locks = NULL, *runs = NULL, *going = NULL;
    int usable = history_readable(pg);
    if (usable >= 0)
        locks = query_locks(pg, usable);
    if (locks && usable) {
        runs = query(pg, runs_fmt, history_outcome_expr);
        going = runs ? query(pg, going_fmt, history_outcome_expr) : NULL;
    }
    if (!locks || (usable && !going)) {
        PQclear(locks);
        PQclear(runs);
        return CLI_EXIT_UNAVAILABLE;
    }
    print_up(1);
    gauge(locks, "pglock_locks_held", "Advisory locks granted on the key (pg_locks).",
          3, 6, 7, reg);
    gauge(locks, "pglock_locks_waiting", "Sessions waiting for the key (pg_locks).",
          4, 6, 7, reg);
    gauge(locks, "pglock_oldest_wait_seconds",
          "How long the oldest waiter for the key has waited (0: none).", 5, 6, 7, reg);
    header("pglock_history_readable", "1 when pglock.runs exists and can be read.");
    printf("pglock_history_readable %d\n", usable);
    if (usable)
        print_runs(runs, going, reg);
    PQclear(locks);
    PQclear(runs);
    PQclear(going);
    return 0;
}

int cmd_metrics(int argc, char **argv)
{
    cli_conn conn = {NULL, NULL, NULL, NULL};
    const char *value, *keys_file = NULL;
    int id;
    cli_opt_parser p;
    int rc = cli_opt_start(&p, "metrics", argc, argv, metrics_tables, usage);
    if (rc != CLI_GO_ON)
        return rc;
    while ((id = cli_opt_next(&p, &value)) != CLI_OPT_DONE) {
        if (id == CLI_OPT_KEYS)
            keys_file = value;
        else if ((rc = cli_shared_option(&conn, id, value)) != CLI_GO_ON)
            return rc;
    }
    if (optind < argc)
        return cli_usage_error("metrics", "unexpected argument \"%s\"", argv[optind]);
    cli_registry *reg = NULL;
    char err[512];
    if (cli_registry_load(&reg, keys_file, err, sizeof err) < 0)
        return cli_usage_error("metrics", "%s", err);
    PGconn *pg = history_connect(&conn, "pglock metrics", -1, err, sizeof err);
    rc = pg ? metrics(&pg, reg) : cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    if (rc == CLI_EXIT_UNAVAILABLE)
        print_up(0);
    PQfinish(pg);
    cli_registry_free(reg);
    return rc;
}
