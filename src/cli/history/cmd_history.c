/*
 * pglock history — the recorded runs (pglock.runs), newest first: one line
 * per run or skip, or --json.  --prune=AGE deletes finished rows
 * older than that, at most HISTORY_PRUNE_BATCH per call, so that a prune
 * run from cron never holds a long transaction.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "history.h"
#include "json.h"

#define HISTORY_PRUNE_BATCH 10000
#define HISTORY_DEFAULT_LIMIT 20

typedef struct history_args {
    cli_common common; /* first: the shared options' fields */
    long since_ms;     /* -1: all */
    int limit;
    long prune_ms;   /* -1: no prune */
    int revision;    /* the table's (history_revision()) */
    char **key_args; /* the KEYs as given (the operands), nkeys of them */
    int nkeys;
    char
        keys[4096]; /* the keys asked for, '\n'-separated pglock_key_format() */
} history_args;
CLI_COMMON_FIRST(history_args);

static const cli_opt history_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "History:"},
    {.type = CLI_OPT_CALL,
     .long_name = "since",
     .field = offsetof(history_args, since_ms),
     .value_name = "AGE",
     .call = history_age_option,
     .help = "only runs started within AGE"},
    {.type = CLI_OPT_INT,
     .long_name = "limit",
     .field = offsetof(history_args, limit),
     .value_name = "N",
     .min = 1,
     .max = 1000000,
     .help = "at most N runs (default 20)"},
    {.type = CLI_OPT_CALL,
     .long_name = "prune",
     .field = offsetof(history_args, prune_ms),
     .value_name = "AGE",
     .call = history_age_option,
     .help = "delete finished runs older than AGE (at most\n"
             "10000 a call), then exit"},
    {.type = CLI_OPT_END}};

static const cli_opt *const history_tables[] = {
    history_opts,  cli_output_heading, cli_json_opts, cli_quiet_opts,
    cli_keys_opts, cli_conn_opts,      cli_help_opts, NULL};

static void usage(const cli_common *target)
{
    (void)target;
    printf("pglock history shows the runs recorded by run --record and lead\n"
           "--record, newest first.\n\n"
           "Usage:\n  pglock history [OPTION]... [KEY]...\n\n");
    cli_opt_help(stdout, history_tables);
    printf(
        "\nAGE: 500ms, 30s, 5m, 2h, plain seconds, or days (30d).\n"
        "Outcomes: succeeded, failed, killed, lost, skipped, running,\n"
        "unrecorded (pglock ended without recording the end), running?\n"
        "(cannot tell those two apart), failover (the server failed over\n"
        "while it ran: its end is unknown; see pglock-history(1)).\n"
        "Exit status: 0, 69 server unavailable or no history table, 64 usage.\n"
        "See pglock-history(1).\n");
}

static const cli_opt_command history_command = {"history", history_tables,
                                                usage, CLI_OPT_KEY_OPERANDS};

/* The keys asked for, as stored (pglock_key_format()), into h->keys.
 * With pg NULL it only parses them, before any connection, so that a key
 * that cannot parse is a usage error (64) whether the server is up or not;
 * a legacy key (hashtext) is computed by the server, with pg. */
static int keys_of(history_args *h, PGconn *pg)
{
    cli_registry *reg = NULL;
    char err[512];
    int rc = 0;
    if (cli_registry_load(&reg, h->common.keys_file, err, sizeof err) < 0)
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    size_t used = 0;
    for (int i = 0; i < h->nkeys && !rc; i++) {
        pglock_key key;
        char id[64];
        pglock_error perr = {0};
        if (cli_parse_key(h->key_args[i], reg, &key, err, sizeof err) < 0)
            rc = cli_usage_error("history", "%s", err);
        else if (!pg)
            continue;
        else if (!key.resolved && pglock_key_resolve(&key, pg, &perr) < 0)
            rc = cli_error(CLI_EXIT_UNAVAILABLE, "%s", perr.message);
        else if (pglock_key_format(&key, id, sizeof id) < 0 ||
                 used + strlen(id) + 2 > sizeof h->keys)
            rc = cli_usage_error("history", "too many keys");
        else
            used += (size_t)snprintf(h->keys + used, sizeof h->keys - used,
                                     "%s%s", used ? "\n" : "", id);
    }
    cli_registry_free(reg);
    return rc;
}

/* Columns: 0 id, 1 key, 2 key_name, 3 host, 4 os_user, 5 pid, 6 command,
 * 7 hold, 8 backend_pid, 9 fencing_token, 10 started_at, 11 ended_at,
 * 12 duration (s), 13 exit_status, 14 outcome, 15 wait (s), 16
 * skip_reason (history_sql.c: NULL on a table of revision 1). */
#define HISTORY_COLUMNS \
    "r.id, r.key, r.key_name, r.host, r.os_user, r.pid, r.command, r.hold," \
    " r.backend_pid, r.fencing_token," \
    " to_char(r.started_at AT TIME ZONE 'UTC'," \
    "  'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')," \
    " to_char(r.ended_at AT TIME ZONE 'UTC'," \
    "  'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"')," \
    " extract(epoch FROM COALESCE(r.ended_at, now()) - r.started_at)::float8," \
    " r.exit_status, "

static const char *const history_select_fmt =
    "SELECT " HISTORY_COLUMNS "%s, (%s / 1000.0)::float8, %s"
    " FROM pglock.runs r"
    " WHERE ($1::text IS NULL OR r.key = ANY (string_to_array($1::text, E'\\n')))"
    "  AND ($2::bigint IS NULL"
    "   OR r.started_at >= now() - $2::bigint * interval '1 millisecond')"
    " ORDER BY r.started_at DESC, r.id DESC LIMIT $3::int";

static const char *const prune_fmt =
    "WITH gone AS (DELETE FROM pglock.runs WHERE id IN ("
    " SELECT r.id FROM pglock.runs r"
    " WHERE COALESCE(r.ended_at, r.started_at)"
    "  < now() - $1::bigint * interval '1 millisecond'"
    "  AND %s NOT IN ('running', 'running?') LIMIT %d) RETURNING 1)"
    " SELECT count(*) FROM gone";

static const char *val(PGresult *r, int row, int col)
{
    return PQgetisnull(r, row, col) ? NULL : PQgetvalue(r, row, col);
}

static void json_int_or_null(json_writer *w, const char *k, const char *v)
{
    if (v)
        json_int(w, k, strtoll(v, NULL, 10));
    else
        json_null(w, k);
}

static void print_json(PGresult *r)
{
    json_writer w;
    json_init(&w, stdout);
    json_array_begin(&w, NULL);
    for (int i = 0; i < PQntuples(r); i++) {
        json_object_begin(&w, NULL);
        json_int(&w, "id", strtoll(val(r, i, 0), NULL, 10));
        json_string(&w, "key", val(r, i, 1));
        json_string(&w, "key_name", val(r, i, 2));
        json_string(&w, "host", val(r, i, 3));
        json_string(&w, "os_user", val(r, i, 4));
        json_int_or_null(&w, "pid", val(r, i, 5));
        json_string(&w, "command", val(r, i, 6));
        json_string(&w, "hold", val(r, i, 7));
        json_int_or_null(&w, "backend_pid", val(r, i, 8));
        json_int_or_null(&w, "fencing_token", val(r, i, 9));
        json_string(&w, "started_at", val(r, i, 10));
        json_string(&w, "ended_at", val(r, i, 11));
        json_seconds(&w, "duration_seconds",
                     val(r, i, 11) ? strtod(val(r, i, 12), NULL) : -1);
        json_int_or_null(&w, "exit_status", val(r, i, 13));
        json_string(&w, "outcome", val(r, i, 14));
        json_string(&w, "skipped_as", val(r, i, 16));
        json_seconds(&w, "wait_seconds",
                     val(r, i, 15) ? strtod(val(r, i, 15), NULL) : -1);
        json_object_end(&w);
    }
    json_array_end(&w);
    json_end(&w);
}

/* "12.3s", "1m05s", "-" */
static void format_duration(const char *secs, char *buf, size_t len)
{
    if (!secs)
        snprintf(buf, len, "-");
    else
        cli_format_duration(strtod(secs, NULL), 1, buf, len);
}

/* Terminal columns of UTF-8 text: one per character (what is shown is
 * cli_echo_arg()'s, control bytes already escaped). */
static int columns(const char *s)
{
    int n = 0;
    for (; *s; s++)
        n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

/* One line per run; names with control bytes shown escaped (\xNN); the
 * HOST column as wide as its longest host, TOKEN as its longest token
 * (the timeline in its high bits makes them 15 digits and more). */
static void print_text(PGresult *r)
{
    int width = columns("HOST"), tw = 8;
    for (int i = 0; i < PQntuples(r); i++) {
        if (val(r, i, 9) && (int)strlen(val(r, i, 9)) > tw)
            tw = (int)strlen(val(r, i, 9));
        char host[300];
        cli_echo_arg(val(r, i, 3) ? val(r, i, 3) : "", 0, host, sizeof host);
        if (columns(host) > width)
            width = columns(host);
    }
    printf("%-24s %-10s %8s %4s %*s  %s%*s  %s\n", "STARTED (UTC)", "OUTCOME",
           "DURATION", "EXIT", tw, "TOKEN", "HOST", width - columns("HOST"), "",
           "KEY");
    for (int i = 0; i < PQntuples(r); i++) {
        char host[300], name[300], dur[32];
        cli_echo_arg(val(r, i, 3) ? val(r, i, 3) : "", 0, host, sizeof host);
        cli_echo_arg(val(r, i, 2) ? val(r, i, 2) : val(r, i, 1), 0, name,
                     sizeof name);
        const char *outcome = val(r, i, 14);
        /* a skip took no time; a run that ended unrecorded, or may have,
         * an unknown time */
        format_duration(strcmp(outcome, "skipped") == 0 ||
                                strcmp(outcome, "unrecorded") == 0 ||
                                strcmp(outcome, "failover") == 0 ||
                                strcmp(outcome, "running?") == 0
                            ? NULL
                            : val(r, i, 12),
                        dur, sizeof dur);
        printf("%-24s %-10s %8s %4s %*s  %s%*s  %s\n", val(r, i, 10), outcome,
               dur, val(r, i, 13) ? val(r, i, 13) : "-", tw,
               val(r, i, 9) ? val(r, i, 9) : "-", host, width - columns(host),
               "", name);
    }
}

/* "no runs recorded for KEY, KEY2 (within --since)", for an empty answer
 * in text: a bare header would look like a broken query. */
static void say_none(const history_args *h)
{
    char keys[1024] = "";
    size_t used = 0;
    for (int i = 0; i < h->nkeys && used < sizeof keys; i++) {
        char one[300];
        cli_echo_arg(h->key_args[i], 0, one, sizeof one);
        used += (size_t)snprintf(keys + used, sizeof keys - used, "%s%s",
                                 i > 0 ? ", " : "", one);
    }
    cli_notice("no runs recorded%s%s%s", *keys ? " for " : "", keys,
               h->since_ms >= 0 ? " within --since" : "");
}

static int prune(PGconn **pg, const history_args *h)
{
    char sql[8192], ms[24], err[512];
    snprintf(sql, sizeof sql, prune_fmt, history_outcome_expr,
             HISTORY_PRUNE_BATCH);
    snprintf(ms, sizeof ms, "%ld", h->prune_ms);
    const char *params[1] = {ms};
    PGresult *r = history_exec(pg, sql, 1, params, -1, err, sizeof err);
    if (!r)
        return cli_error(CLI_EXIT_UNAVAILABLE, "could not prune: %s", err);
    long n = strtol(PQgetvalue(r, 0, 0), NULL, 10);
    PQclear(r);
    cli_notice("deleted %ld run%s", n, n == 1 ? "" : "s");
    if (n == HISTORY_PRUNE_BATCH)
        cli_hint("More may remain: run pglock history --prune again.");
    return 0;
}

static int show(PGconn **pg, const history_args *h)
{
    char sql[8192], since[24], limit[24], err[512];
    snprintf(sql, sizeof sql, history_select_fmt, history_outcome_expr,
             history_wait_ms_col(h->revision),
             history_skip_reason_col(h->revision));
    snprintf(since, sizeof since, "%ld", h->since_ms);
    snprintf(limit, sizeof limit, "%d", h->limit);
    const char *params[3] = {h->keys[0] ? h->keys : NULL,
                             h->since_ms >= 0 ? since : NULL, limit};
    PGresult *r = history_exec(pg, sql, 3, params, -1, err, sizeof err);
    if (!r)
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    if (h->common.json)
        print_json(r);
    else if (PQntuples(r) == 0)
        say_none(h);
    else
        print_text(r);
    PQclear(r);
    return 0;
}

int cmd_history(int argc, char **argv)
{
    history_args h;
    memset(&h, 0, sizeof h);
    h.since_ms = h.prune_ms = -1;
    h.limit = HISTORY_DEFAULT_LIMIT;
    int operand;
    int rc = cli_opt_parse(&history_command, argc, argv, &h.common, &operand);
    if (rc != CLI_GO_ON)
        return rc;
    h.key_args = argv + operand;
    h.nkeys = argc - operand;
    if (h.prune_ms >= 0 && h.nkeys)
        return cli_usage_error("history", "--prune deletes for every key: "
                                          "give no KEY with it");
    if ((rc = keys_of(&h, NULL)) != 0)
        return rc;
    char err[512];
    PGconn *pg = history_connect(&h.common.conn, "pglock history", -1, err,
                                 sizeof err);
    if (!pg)
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    PGresult *probe = history_exec(&pg, history_probe_sql, 0, NULL, -1, err,
                                   sizeof err);
    if (!probe)
        rc = cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    else if ((rc = history_check_probe(probe, 0, CLI_EXIT_UNAVAILABLE)) == 0)
        h.revision = history_revision(probe);
    PQclear(probe);
    if (!rc)
        rc = keys_of(&h, pg);
    if (!rc)
        rc = h.prune_ms >= 0 ? prune(&pg, &h) : show(&pg, &h);
    PQfinish(pg);
    return rc;
}
