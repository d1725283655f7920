/*
 * pglock metrics' runs over a window (--window, default 24 h), per key
 * with rows started in it: how many runs started, how each ended, how
 * many were skipped as busy or timed out waiting, and histograms of the
 * wait (pglock's start to the grant) and of the hold (grant to release).
 *
 * These are counts over a sliding window, not counters since a start:
 * they fall as old runs leave it, and a prune removes rows.  So the
 * counts are gauges, and the histograms are histograms of the runs in
 * the window (their buckets, _sum and _count fall too): compare them
 * with a threshold, never rate() them.
 *
 * Cardinality: a key without a row in the window has no series, and at
 * most METRICS_WINDOW_MAX_KEYS keys (the most recently run) have them;
 * pglock_window_keys says how many had runs, so an alert can tell when
 * some were left out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "history.h"
#include "metrics.h"

#define METRICS_WINDOW_MAX_KEYS 500

/* Upper bounds in seconds: from a wait that is no wait at all to a job of
 * half a day. */
static const char *const bounds[] = {"0.1",   "1",     "5",    "15",   "60",
                                     "300",   "900",   "1800", "3600", "7200",
                                     "14400", "43200", NULL};
#define NBOUNDS 12

/* The outcome label of each count, and the rows it counts (w: a row with
 * o, its outcome as history shows it, and why, its skip_reason). */
static const struct {
    const char *outcome, *filter;
} counts[] = {
    {"started", "w.outcome IS DISTINCT FROM 'skipped'"},
    {"succeeded", "w.o = 'succeeded'"},
    {"failed", "w.o = 'failed'"},
    {"killed", "w.o = 'killed'"},
    {"lost", "w.o = 'lost'"},
    {"unrecorded", "w.o = 'unrecorded'"},
    {"failover", "w.o = 'failover'"},
    {"busy", "w.outcome = 'skipped' AND w.why = 'busy'"},
    {"timed_out", "w.outcome = 'skipped' AND w.why = 'timed_out'"},
    /* an older pglock's skip: busy or timed out, it did not say */
    {"skipped", "w.outcome = 'skipped' AND w.why IS NULL"},
};
#define NCOUNTS (int)(sizeof counts / sizeof counts[0])

/* Columns: 0-2 the locktag, 3 the name last recorded, 4 keys with runs,
 * then NCOUNTS counts, then for the wait and then the hold: count, sum
 * (s), NBOUNDS cumulative buckets. */
#define COL_COUNTS 5
#define COL_WAIT (COL_COUNTS + NCOUNTS)
#define COL_HOLD (COL_WAIT + 2 + NBOUNDS)

/* The hold is known of a run whose end pglock recorded. */
static const char inner_fmt[] =
    " FROM (SELECT r.key, r.classid, r.objid, r.objsubid, r.key_name,"
    "  r.started_at, r.outcome, %s AS o, %s::float8 / 1000 AS wait, %s AS why,"
    "  CASE WHEN r.outcome IN ('succeeded', 'failed', 'killed', 'lost')"
    "   THEN extract(epoch FROM r.ended_at - r.started_at)::float8 END AS hold"
    "  FROM pglock.runs r"
    "  WHERE r.started_at >= now() - $1::bigint * interval '1 millisecond') w"
    " GROUP BY w.key, w.classid, w.objid, w.objsubid"
    " ORDER BY max(w.started_at) DESC LIMIT %d) s"
    " ORDER BY classid, objid, objsubid";

/* Appends to sql (of size len, used so far *used). */
static void add(char *sql, size_t len, size_t *used, const char *fmt,
                const char *a, const char *b)
{
    if (*used < len)
        *used += (size_t)snprintf(sql + *used, len - *used, fmt, a, b);
}

/* A histogram's columns: count, sum, buckets of var, over rows of got. */
static void histogram_cols(char *sql, size_t len, size_t *used, const char *var,
                           const char *got)
{
    char cond[128];
    snprintf(cond, sizeof cond, "%s AND w.%s IS NOT NULL", got, var);
    add(sql, len, used, ", count(*) FILTER (WHERE %s)", cond, NULL);
    add(sql, len, used, ", COALESCE(sum(w.%s) FILTER (WHERE %s), 0)", var,
        cond);
    for (int b = 0; bounds[b]; b++) {
        add(sql, len, used, ", count(*) FILTER (WHERE %s AND w.%s", cond, var);
        add(sql, len, used, " <= %s)", bounds[b], NULL);
    }
}

PGresult *metrics_runs_query(PGconn **pg, int revision, long window_ms)
{
    char sql[16384], err[512], ms[24];
    size_t used = 0;
    add(sql, sizeof sql, &used,
        "SELECT * FROM (SELECT w.classid, w.objid,"
        " w.objsubid, (array_agg(w.key_name ORDER BY w.started_at DESC))[1],"
        " count(*) OVER ()%s%s",
        "", "");
    for (int c = 0; c < NCOUNTS; c++)
        add(sql, sizeof sql, &used, ", count(*) FILTER (WHERE %s)%s",
            counts[c].filter, "");
    histogram_cols(sql, sizeof sql, &used, "wait", counts[0].filter);
    histogram_cols(sql, sizeof sql, &used, "hold", "TRUE");
    if (used < sizeof sql)
        used += (size_t)snprintf(sql + used, sizeof sql - used, inner_fmt,
                                 history_outcome_expr,
                                 history_wait_ms_col(revision),
                                 history_skip_reason_col(revision),
                                 METRICS_WINDOW_MAX_KEYS);
    if (used >= sizeof sql) {
        cli_error(CLI_EXIT_SOFTWARE, "the runs' query is too long");
        return NULL;
    }
    snprintf(ms, sizeof ms, "%ld", window_ms);
    const char *params[1] = {ms};
    PGresult *r = history_exec(pg, sql, 1, params, -1, err, sizeof err);
    if (!r)
        cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    return r;
}

static void header(const char *metric, const char *type, const char *help)
{
    printf("# HELP %s %s\n# TYPE %s %s\n", metric, help, metric, type);
}

/* One histogram: its buckets, +Inf, _sum and _count per key. */
static void histogram(PGresult *r, const char *metric, const char *help,
                      int col, const cli_registry *reg,
                      metrics_labeller *labels)
{
    header(metric, "histogram", help);
    for (int i = 0; i < PQntuples(r); i++) {
        for (int b = 0; b <= NBOUNDS; b++) {
            printf("%s_bucket", metric);
            labels(r, i, 3, reg);
            printf(",le=\"%s\"} %s\n", b < NBOUNDS ? bounds[b] : "+Inf",
                   PQgetvalue(r, i, b < NBOUNDS ? col + 2 + b : col));
        }
        printf("%s_sum", metric);
        labels(r, i, 3, reg);
        printf("} %s\n%s_count", PQgetvalue(r, i, col + 1), metric);
        labels(r, i, 3, reg);
        printf("} %s\n", PQgetvalue(r, i, col));
    }
}

void metrics_runs_print(PGresult *r, long window_ms, const cli_registry *reg,
                        metrics_labeller *labels)
{
    header("pglock_window_seconds", "gauge",
           "The window the pglock_window_ series count runs over "
           "(--window).");
    printf("pglock_window_seconds %.3f\n", window_ms / 1000.0);
    header("pglock_window_keys", "gauge",
           "Keys with runs started in the window (series are printed "
           "for the 500 most recently run).");
    printf("pglock_window_keys %s\n", PQntuples(r) ? PQgetvalue(r, 0, 4) : "0");
    header("pglock_window_runs", "gauge",
           "Runs of the key started in the window: started (the lock "
           "taken), by outcome, busy, timed_out, or skipped (by an "
           "older pglock: busy or timed out).");
    for (int i = 0; i < PQntuples(r); i++)
        for (int c = 0; c < NCOUNTS; c++) {
            printf("pglock_window_runs");
            labels(r, i, 3, reg);
            printf(",outcome=\"%s\"} %s\n", counts[c].outcome,
                   PQgetvalue(r, i, COL_COUNTS + c));
        }
    histogram(r, "pglock_window_wait_seconds",
              "How long the runs of the key started in the window waited, "
              "from pglock's start to the lock (of those that recorded "
              "it).",
              COL_WAIT, reg, labels);
    histogram(r, "pglock_window_hold_seconds",
              "How long the runs of the key started in the window held the "
              "lock, of those whose end was recorded.",
              COL_HOLD, reg, labels);
}
