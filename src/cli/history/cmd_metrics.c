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
 * status); per key and host (the host its holders' application_name
 * names), locks held; per recorded key: the last finished run's start,
 * end, duration and outcome (as check judges: a run still going does not
 * count), the runs going now, and the runs over a window (metrics_runs.c).
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
#include "metrics.h"

typedef struct metrics_args {
    cli_common common; /* first: the shared options' fields */
    long window_ms;
} metrics_args;
CLI_COMMON_FIRST(metrics_args);

static const cli_opt metrics_window_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Runs:"},
    {.type = CLI_OPT_CALL,
     .long_name = "window",
     .field = offsetof(metrics_args, window_ms),
     .value_name = "AGE",
     .call = history_age_option,
     .help = "count the runs started within AGE (default 24h)"},
    {.type = CLI_OPT_END}};

static const cli_opt *const metrics_tables[] = {metrics_window_opts,
                                                cli_keys_opts, cli_conn_opts,
                                                cli_help_opts, NULL};

static void usage(const cli_common *target)
{
    (void)target;
    printf("pglock metrics prints the advisory locks and the recorded runs of\n"
           "a database as Prometheus metrics (text exposition format).\n\n"
           "Usage:\n  pglock metrics [OPTION]...\n\n");
    cli_opt_help(stdout, metrics_tables);
    printf("\nAGE: 500ms, 30s, 5m, 2h, plain seconds, or days (30d).\n"
           "Exit status: 0, 69 server unavailable (pglock_up 0 is still "
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
    "  AND NOT (l.objsubid = 2 AND l.classid::bigint = " HISTORY_RUN_LOCK_NS_SQL
    ")" /* a run lock, no job's key */
    " GROUP BY 1, 2, 3) g ORDER BY 1, 2, 3";

/* Each granted advisory lock (run locks aside), for the host its holder's
 * application_name names.  Columns: 0 classid, 1 objid, 2 objsubid, 3
 * application_name, 4 the name last recorded for the key (%s, as in
 * locks_fmt). */
static const char holders_fmt[] =
    "SELECT g.*, %s FROM ("
    " SELECT l.classid::bigint AS classid, l.objid::bigint AS objid,"
    "  l.objsubid, a.application_name"
    " FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid"
    " WHERE l.locktype = 'advisory' AND l.granted AND l.database ="
    "  (SELECT oid FROM pg_database WHERE datname = current_database())"
    "  AND NOT (l.objsubid = 2 AND l.classid::bigint = " HISTORY_RUN_LOCK_NS_SQL
    ")) g ORDER BY 1, 2, 3";

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

static const char *const outcomes[] = {"succeeded", "failed",     "killed",
                                       "lost",      "unrecorded", "failover",
                                       NULL};

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

/* The key of row i (columns 0-2 the locktag). */
static void row_key(PGresult *r, int i, pglock_key *key)
{
    long long cls = strtoll(PQgetvalue(r, i, 0), NULL, 10);
    long long obj = strtoll(PQgetvalue(r, i, 1), NULL, 10);
    if (atoi(PQgetvalue(r, i, 2)) == 2)
        pglock_key_pair(key, (int32_t)(uint32_t)cls, (int32_t)(uint32_t)obj);
    else
        pglock_key_int64(key, (int64_t)(((uint64_t)cls << 32) | (uint64_t)obj));
}

/* The lock's name that a pglock application_name among row i's (apps_col:
 * one a line; -1: none) gives key, as status finds it, into buf; or NULL. */
static const char *name_from_applications(PGresult *r, int i, int apps_col,
                                          const pglock_key *key,
                                          const cli_registry *reg, char *buf,
                                          size_t len)
{
    if (apps_col < 0 || PQgetisnull(r, i, apps_col))
        return NULL;
    for (const char *app = PQgetvalue(r, i, apps_col); *app;) {
        size_t n = strcspn(app, "\n");
        char one[64];
        cli_app_said said;
        snprintf(one, sizeof one, "%.*s", (int)n, app);
        if (cli_app_read_holder(one, key, reg, &said)) {
            int at = said.keys[0] == '@';
            snprintf(buf, len, "%.*s", (int)said.keys_len - at, said.keys + at);
            return buf;
        }
        app += n + (app[n] == '\n');
    }
    return NULL;
}

/* {key="...",name="..." for row i (columns 0-2 the locktag; the name
 * from the registry, a pglock application_name in apps_col (-1: none),
 * else name_col's). */
static void labels_named(PGresult *r, int i, int apps_col, int name_col,
                         const cli_registry *reg)
{
    pglock_key key;
    row_key(r, i, &key);
    char id[64], app[64];
    pglock_key_format(&key, id, sizeof id);
    const char *name = reg ? cli_registry_name_of(reg, &key) : NULL;
    if (!name)
        name = name_from_applications(r, i, apps_col, &key, reg, app,
                                      sizeof app);
    if (!name && !PQgetisnull(r, i, name_col))
        name = PQgetvalue(r, i, name_col);
    printf("{key=\"%s\",name=\"", id);
    label(name ? name : "");
    printf("\"");
}

/* The same, with no application_name column (metrics_runs.c's). */
static void labels(PGresult *r, int i, int name_col, const cli_registry *reg)
{
    labels_named(r, i, -1, name_col, reg);
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
        labels_named(r, i, apps_col, name_col, reg);
        printf("} %s\n", PQgetvalue(r, i, col));
    }
}

/* A holder's row and the host its application_name names ("": none). */
typedef struct held_by {
    int row;
    char host[64];
} held_by;

static int by_key_then_host(const void *pa, const void *pb)
{
    const held_by *a = pa, *b = pb;
    return a->row != b->row ? a->row - b->row : strcmp(a->host, b->host);
}

/* Rows of r (holders_fmt) with the same key as row i's, from i on. */
static int same_key_rows(PGresult *r, int i)
{
    int j = i + 1;
    while (j < PQntuples(r) &&
           !strcmp(PQgetvalue(r, j, 0), PQgetvalue(r, i, 0)) &&
           !strcmp(PQgetvalue(r, j, 1), PQgetvalue(r, i, 1)) &&
           !strcmp(PQgetvalue(r, j, 2), PQgetvalue(r, i, 2)))
        j++;
    return j - i;
}

/* pglock_locks_held_by_host: how many of a key's holders are on each
 * host.  One series per key and host that holds it now (host="" for a
 * holder that names none): a few per key for fixed hosts; hosts named
 * anew for each run (a pod's name) make new series at every run. */
static int print_held_by_host(PGresult *r, const cli_registry *reg)
{
    int n = PQntuples(r);
    held_by *h = calloc((size_t)n + 1, sizeof *h);
    if (!h)
        return -1;
    for (int i = 0; i < n;) {
        int m = same_key_rows(r, i);
        pglock_key key;
        row_key(r, i, &key);
        for (int k = i; k < i + m; k++) {
            h[k].row = i; /* a key's rows share the first one's index */
            const char *app = PQgetisnull(r, k, 3) ? NULL : PQgetvalue(r, k, 3);
            if (!cli_app_host(app, &key, reg, h[k].host, sizeof h[k].host))
                h[k].host[0] = '\0';
        }
        i += m;
    }
    qsort(h, (size_t)n, sizeof *h, by_key_then_host);
    header("pglock_locks_held_by_host",
           "Advisory locks granted on the key, by the host its holder's "
           "application_name names (\"\": none).");
    for (int i = 0; i < n;) {
        int j = i + 1;
        while (j < n && !by_key_then_host(&h[i], &h[j]))
            j++;
        printf("pglock_locks_held_by_host");
        labels(r, h[i].row, 4, reg);
        printf(",host=\"");
        label(h[i].host);
        printf("\"} %d\n", j - i);
        i = j;
    }
    free(h);
    return 0;
}

static void print_runs(PGresult *r, PGresult *going, const cli_registry *reg)
{
    gauge(r, "pglock_last_run_start_timestamp_seconds",
          "When the last finished run of the key started (server clock).", 3,
          -1, 6, reg);
    gauge(r, "pglock_last_run_end_timestamp_seconds",
          "When the last finished run of the key ended (absent when its end "
          "was never recorded).",
          4, -1, 6, reg);
    gauge(r, "pglock_last_run_duration_seconds",
          "How long the last finished run of the key took.", 5, -1, 6, reg);
    gauge(going, "pglock_runs_running",
          "Runs of the key going now (absent: none).", 3, -1, 5, reg);
    gauge(going, "pglock_runs_undetermined",
          "Runs of the key that are going or ended unrecorded: pglock "
          "cannot tell (see pglock(1)).",
          4, -1, 5, reg);
    header("pglock_last_run_outcome",
           "1 for the outcome of the last finished run of the key, else 0.");
    for (int i = 0; i < PQntuples(r); i++)
        for (int o = 0; outcomes[o]; o++) {
            printf("pglock_last_run_outcome");
            labels(r, i, 6, reg);
            printf(",outcome=\"%s\"} %d\n", outcomes[o],
                   strcmp(PQgetvalue(r, i, 7), outcomes[o]) == 0);
        }
}

/* 1 when pglock.runs exists and can be read (its revision in
 * *revision), 0 if not, -1 after an error (printed). */
static int history_readable(PGconn **pg, int *revision)
{
    char err[512];
    PGresult *probe = history_exec(pg, history_probe_sql, 0, NULL, -1, err,
                                   sizeof err);
    if (!probe)
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", err), -1;
    int usable = PQgetvalue(probe, 0, 0)[0] == 't' &&
                 PQgetvalue(probe, 0, 3)[0] == 't';
    *revision = usable ? history_revision(probe) : 0;
    PQclear(probe);
    return usable;
}

static void print_up(int up)
{
    header("pglock_up",
           "1 when the database answered every query of "
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
    snprintf(sql, sizeof sql, locks_fmt,
             usable ? recorded_name_sql : "NULL::text",
             PQserverVersion(*pg) >= 140000 ? "l.waitstart"
                                            : "NULL::timestamptz");
    PGresult *r = history_exec(pg, sql, 0, NULL, -1, err, sizeof err);
    if (!r)
        cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    return r;
}

/* Every query first, then the output: all of it, or pglock_up 0 alone. */
static int metrics(PGconn **pg, const cli_registry *reg, long window_ms)
{
    PGresult *locks = NULL, *runs = NULL, *going = NULL, *holders = NULL;
    PGresult *window = NULL;
    int revision;
    int usable = history_readable(pg, &revision);
    if (usable >= 0)
        locks = query_locks(pg, usable);
    if (locks)
        holders = query(pg, holders_fmt,
                        usable ? recorded_name_sql : "NULL::text");
    if (!holders) {
        PQclear(locks);
        return CLI_EXIT_UNAVAILABLE;
    }
    if (usable) {
        runs = query(pg, runs_fmt, history_outcome_expr);
        going = runs ? query(pg, going_fmt, history_outcome_expr) : NULL;
        window = going ? metrics_runs_query(pg, revision, window_ms) : NULL;
    }
    if (usable && !window) {
        PQclear(locks);
        PQclear(runs);
        PQclear(going);
        PQclear(holders);
        return CLI_EXIT_UNAVAILABLE;
    }
    print_up(1);
    gauge(locks, "pglock_locks_held",
          "Advisory locks granted on the key (pg_locks).", 3, 6, 7, reg);
    gauge(locks, "pglock_locks_waiting",
          "Sessions waiting for the key (pg_locks).", 4, 6, 7, reg);
    gauge(locks, "pglock_oldest_wait_seconds",
          "How long the oldest waiter for the key has waited (0: none).", 5, 6,
          7, reg);
    if (print_held_by_host(holders, reg) < 0)
        cli_warning("out of memory: pglock_locks_held_by_host left out");
    header("pglock_history_readable",
           "1 when pglock.runs exists and can be read.");
    printf("pglock_history_readable %d\n", usable);
    if (usable) {
        print_runs(runs, going, reg);
        metrics_runs_print(window, window_ms, reg, labels);
    }
    PQclear(locks);
    PQclear(runs);
    PQclear(going);
    PQclear(holders);
    PQclear(window);
    return 0;
}

static const cli_opt_command metrics_command = {"metrics", metrics_tables,
                                                usage, 0};

int cmd_metrics(int argc, char **argv)
{
    metrics_args a = {.window_ms = METRICS_WINDOW_DEFAULT_MS};
    int operand;
    int rc = cli_opt_parse(&metrics_command, argc, argv, &a.common, &operand);
    if (rc != CLI_GO_ON)
        return rc;
    if (operand < argc)
        return cli_usage_error("metrics", "unexpected argument \"%s\"",
                               argv[operand]);
    cli_registry *reg = NULL;
    char err[512];
    if (cli_registry_load(&reg, a.common.keys_file, err, sizeof err) < 0)
        return cli_usage_error("metrics", "%s", err);
    PGconn *pg = history_connect(&a.common.conn, "pglock metrics", -1, err,
                                 sizeof err);
    rc = pg ? metrics(&pg, reg, a.window_ms)
            : cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    if (rc == CLI_EXIT_UNAVAILABLE)
        print_up(0);
    PQfinish(pg);
    cli_registry_free(reg);
    return rc;
}
