/*
 * metrics.h — pglock metrics' parts (internal to the CLI):
 *   cmd_metrics.c   the command, the lock metrics, the last run's
 *   metrics_runs.c  the runs over a window (--window): counts and
 *                   histograms of wait and hold per key
 */
#ifndef PGLOCK_CLI_METRICS_H
#define PGLOCK_CLI_METRICS_H

#include "cli.h"

/* Prints {key="...",name="..." (no closing brace) for row i of r, whose
 * columns 0-2 are the locktag and name_col the name recorded for it:
 * cmd_metrics.c's, passed in, so that the labels are made in one place. */
typedef void metrics_labeller(PGresult *r, int i, int name_col,
                              const cli_registry *reg);

/* --window=AGE's default (24 h). */
#define METRICS_WINDOW_DEFAULT_MS (24L * 3600 * 1000)
/* The window's query on a readable table of that revision: the result,
 * or NULL after one line (printed). */
PGresult *metrics_runs_query(PGconn **pg, int revision, long window_ms);
/* Its series. */
void metrics_runs_print(PGresult *r, long window_ms, const cli_registry *reg,
                        metrics_labeller *labels);

#endif
