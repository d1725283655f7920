/*
 * pglock terminate — end a stuck holder of KEY by name, after saying who
 * it is.
 *
 * The story: look (one query, pglock_holders_list()) and list the sessions that hold
 * KEY; nobody: exit 1.  Several (shared holders) need --all.  Ask on a
 * terminal, else require --yes.  Then ONE statement checks, for each pid
 * shown, that it still holds KEY and that we may signal it, and calls
 * pg_terminate_backend() only for those rows and only if every one may be
 * signalled: a holder that released in between, or a pooled server
 * connection now serving someone else without KEY, is never terminated,
 * and a waiter never is (only granted rows count).
 *
 * With --slots=N, KEY names a semaphore (`run --slots=N KEY`): its N slot
 * keys (run_slots.c) are looked at together, every holder of one is
 * shown, and all of them are ended; an N other than the one in use (the
 * users' declarations, read in the same look) is refused.
 */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "bounded_conn.h"
#include "cli.h"
#include "run.h"

typedef struct terminate_options {
    cli_common common; /* first: the shared options' fields */
    int yes, all;
    int slots; /* --slots=N, or 0 */
    const char *key_text;
} terminate_options;
CLI_COMMON_FIRST(terminate_options);

static const cli_opt terminate_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Options:"},
    {.type = CLI_OPT_FLAG,
     .short_name = 'y',
     .long_name = "yes",
     .field = offsetof(terminate_options, yes),
     .help = "do not ask (needed when stdin is not a terminal)"},
    {.type = CLI_OPT_FLAG,
     .long_name = "all",
     .field = offsetof(terminate_options, all),
     .help = "end every holder when several hold KEY (shared)"},
    {.type = CLI_OPT_CALL,
     .long_name = "slots",
     .field = offsetof(terminate_options, slots),
     .value_name = "N",
     .call = run_slots_option,
     .help = "KEY is a semaphore of N slots (run --slots=N):\n"
             "end the holders of its slots"},
    {.type = CLI_OPT_END}};

static const cli_opt *const terminate_tables[] = {terminate_opts, cli_keys_opts,
                                                  cli_conn_opts, cli_help_opts,
                                                  NULL};

static void print_help(const cli_common *target)
{
    (void)target;
    printf(
        "pglock terminate ends the session holding KEY (pg_terminate_backend),\n"
        "after showing who it is.  Waiters are never ended.\n\n"
        "Usage:\n"
        "  pglock terminate [OPTION]... KEY\n\n");
    cli_opt_help(stdout, terminate_tables);
    printf(
        "\nPrivilege: superuser, or membership in pg_signal_backend, or the\n"
        "holder's own role; only a superuser may end a superuser's session.\n"
        "With --slots=N every holder of the semaphore's slots is ended.\n"
        "Exit status: 0 terminated, 1 nobody held KEY, 64 usage (several\n"
        "holders without --all, no terminal and no --yes, --slots=N while\n"
        "another N is in use), 69 could not connect or not allowed to\n"
        "signal the holder.\n"
        "See pglock-terminate(1).\n");
}

static const cli_opt_command terminate_command = {"terminate", terminate_tables,
                                                  print_help,
                                                  CLI_OPT_KEY_OPERANDS};

/* CLI_GO_ON, else the exit status. */
static cli_step parse_options(int argc, char **argv, terminate_options *o)
{
    int operand;
    cli_step step = cli_opt_parse(&terminate_command, argc, argv, &o->common,
                                  &operand);
    if (step != CLI_GO_ON)
        return step;
    if (operand >= argc)
        return cli_usage_error("terminate", "no lock key given");
    if (operand + 1 < argc)
        return cli_usage_error("terminate",
                               "one key at a time: \"%s\" is a "
                               "second one",
                               argv[operand + 1]);
    o->key_text = argv[operand];
    return CLI_GO_ON;
}

/* One holder (of slot `slot`, or -1), on one line of stdout. */
static void print_holder(const pglock_holder *e, const cli_registry *reg,
                         int slot)
{
    char app[80], user[80], held[32] = "?", client[80], host[80];
    cli_echo_arg(e->application_name ? e->application_name : "?", 1, app,
                 sizeof app);
    cli_echo_arg(e->user ? e->user : "?", 0, user, sizeof user);
    if (e->held_max_s >= 0)
        cli_format_duration(e->held_max_s, 0, held, sizeof held);
    cli_holder_client(e, client, sizeof client);
    if (slot >= 0)
        printf("  slot %d", slot);
    printf("  backend pid %d", e->pid);
    if (cli_holder_host(e, reg, host, sizeof host))
        printf("  host %s", host);
    printf("  %s  user %s  from %s  session up %s  \"%s\"\n",
           e->mode == PGLOCK_EXCLUSIVE ? "exclusive" : "shared", user, client,
           held, app);
}

/* The holders of the nkeys keys in list (granted rows with a backend),
 * into pids. */
static int find_holders(const pglock_holders *list, const pglock_key *keys,
                        int nkeys, int *pids, const pglock_holder **rows,
                        int max)
{
    int n = 0;
    for (int i = 0; i < pglock_holders_count(list) && n < max; i++) {
        const pglock_holder *e = pglock_holders_get(list, i);
        int mine = 0;
        for (int k = 0; k < nkeys && !mine; k++)
            mine = cli_same_lock(&e->key, &keys[k]);
        if (mine && e->granted && e->pid > 0) {
            rows[n] = e;
            pids[n++] = e->pid;
        }
    }
    return n;
}

/* On a terminal: asks (naming the host of one session, when known); 1
 * for yes.  Elsewhere: 0. */
static int confirmed(int n, const char *key_text, const char *host)
{
    if (!isatty(STDIN_FILENO))
        return 0;
    if (n == 1 && host)
        fprintf(stderr, "Terminate this session (on %s) of lock \"%s\"? [y/N] ",
                host, key_text);
    else
        fprintf(stderr, "Terminate %s of lock \"%s\"? [y/N] ",
                n == 1 ? "this session" : "these sessions", key_text);
    fflush(stderr);
    char line[32];
    if (!fgets(line, sizeof line, stdin))
        return 0;
    return line[0] == 'y' || line[0] == 'Y';
}

/*
 * The one statement.  For each pid shown that still holds the key
 * (granted, same database, same locktag), whether we may signal it (the
 * server's rule: superuser; or, for a non-superuser's session, privileges
 * of its role or of pg_signal_backend), and the terminate itself, only if
 * every row may be signalled.  With PostgreSQL 14+ the terminate waits up
 * to 5 s for the session to end, so that the lock is free on return.
 */
static const char terminate_sql[] =
    "WITH target AS ("
    " SELECT l.pid, a.usename,"
    "  current_setting('is_superuser')::bool"
    "  OR (NOT coalesce(r.rolsuper, true)"
    "      AND (pg_has_role(a.usesysid, 'USAGE')"
    "           OR pg_has_role('pg_signal_backend', 'USAGE'))) AS may"
    " FROM pg_locks l"
    " JOIN pg_stat_activity a ON a.pid = l.pid"
    " LEFT JOIN pg_roles r ON r.oid = a.usesysid"
    " WHERE l.locktype = 'advisory' AND l.granted"
    "  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())"
    "  AND (l.classid, l.objid, l.objsubid) IN"
    "      (SELECT * FROM unnest($1::oid[], $2::oid[], $3::int2[]))"
    "  AND l.pid = ANY ($4::int[]))"
    " SELECT pid, usename, may,"
    "  CASE WHEN bool_and(may) OVER () THEN %s END"
    " FROM target";

/* "{a,b,...}": the locktags' classid, objid or objsubid (part 0, 1, 2) of
 * the nkeys keys. */
static void tag_array(char *buf, size_t len, const pglock_key *keys, int nkeys,
                      int part)
{
    size_t used = (size_t)snprintf(buf, len, "{");
    for (int i = 0; i < nkeys && used < len; i++) {
        uint32_t classid, objid;
        int objsubid;
        pglock_key_locktag(&keys[i], &classid, &objid, &objsubid);
        unsigned long v = part == 0   ? classid
                          : part == 1 ? objid
                                      : (unsigned long)objsubid;
        used += (size_t)snprintf(buf + used, len - used, "%s%lu", i ? "," : "",
                                 v);
    }
    if (used < len)
        snprintf(buf + used, len - used, "}");
}

/* Runs the statement for the nkeys keys; rows in *out (caller
 * PQclear()s), or NULL with err. */
static PGresult *terminate_still_holding(PGconn *conn, const pglock_key *keys,
                                         int nkeys, const int *pids, int n,
                                         char *err, size_t errlen)
{
    char sql[sizeof terminate_sql + 64];
    snprintf(sql, sizeof sql, terminate_sql,
             PQserverVersion(conn) >= 140000 ? "pg_terminate_backend(pid, 5000)"
                                             : "pg_terminate_backend(pid)");
    char c[12 * RUN_MAX_SLOTS + 4], o[12 * RUN_MAX_SLOTS + 4],
        s[3 * RUN_MAX_SLOTS + 4], arr[16 * 64 + 4];
    tag_array(c, sizeof c, keys, nkeys, 0);
    tag_array(o, sizeof o, keys, nkeys, 1);
    tag_array(s, sizeof s, keys, nkeys, 2);
    size_t used = (size_t)snprintf(arr, sizeof arr, "{");
    for (int i = 0; i < n; i++)
        used += (size_t)snprintf(arr + used, sizeof arr - used, "%s%d",
                                 i ? "," : "", pids[i]);
    snprintf(arr + used, sizeof arr - used, "}");
    const char *params[4] = {c, o, s, arr};
    /* bounded: the terminate itself waits at most 5 s */
    pglock_error perr = {0};
    PGresult *res = pglock__exec_params(conn, sql, 4, params, 15000, &perr);
    if (!res) {
        snprintf(err, errlen, "%s", perr.message);
        return NULL;
    }
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        const char *msg = PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY);
        snprintf(err, errlen, "%s", msg ? msg : PQerrorMessage(conn));
        err[strcspn(err, "\n")] = '\0';
        /* the server's own refusal: the same as ours, below */
        if (state && strcmp(state, "42501") == 0)
            snprintf(err, errlen, "42501");
        PQclear(res);
        return NULL;
    }
    return res;
}

static int not_allowed(const char *key_text, const char *who)
{
    cli_error(CLI_EXIT_UNAVAILABLE,
              "permission denied to terminate the holder of "
              "lock \"%s\"%s%s; nothing was terminated",
              key_text, who ? ": " : "", who ? who : "");
    cli_hint("Terminating a session needs superuser, membership in "
             "pg_signal_backend, or the session's own role; only a superuser "
             "may terminate a superuser's session.");
    return CLI_EXIT_UNAVAILABLE;
}

/* Reports the statement's rows: the exit status. */
static int report(PGresult *res, const char *key_text)
{
    int rows = PQntuples(res);
    if (rows == 0) {
        cli_notice(
            "lock \"%s\" is no longer held by the sessions shown; nothing "
            "was terminated",
            key_text);
        return CLI_EXIT_PROBLEM;
    }
    for (int i = 0; i < rows; i++) {
        if (strcmp(PQgetvalue(res, i, 2), "t") != 0) {
            char who[128];
            snprintf(who, sizeof who, "backend pid %s (user %s)",
                     PQgetvalue(res, i, 0),
                     PQgetisnull(res, i, 1) ? "?" : PQgetvalue(res, i, 1));
            return not_allowed(key_text, who);
        }
    }
    int code = 0;
    for (int i = 0; i < rows; i++) {
        if (strcmp(PQgetvalue(res, i, 3), "t") == 0) {
            printf("terminated backend pid %s\n", PQgetvalue(res, i, 0));
        } else {
            code = cli_error(CLI_EXIT_UNAVAILABLE,
                             "backend pid %s was signalled but had not "
                             "ended after 5 s",
                             PQgetvalue(res, i, 0));
        }
    }
    return code;
}

/* Lists the holders and, if allowed, terminates them: the exit status. */
static int terminate(PGconn *conn, const terminate_options *o,
                     const pglock_key *key, const cli_registry *reg)
{
    char err[512];
    pglock_error perr = {0};
    pglock_holders *list = NULL;
    /* --slots=N: the N slots, then every declaration of N */
    run_slots sem; /* 9 kB: no state outlives the call */
    pglock_key keys[2 * RUN_MAX_SLOTS];
    int nkeys = 1, nlook = 1;
    if (o->slots) {
        if (run_slots_make(&sem, key, o->slots) < 0)
            return cli_usage_error("terminate",
                                   "cannot derive the slots of "
                                   "\"%s\"",
                                   o->key_text);
        memcpy(keys, sem.keys, sizeof keys[0] * (size_t)o->slots);
        memcpy(keys + o->slots, sem.decls, sizeof keys[0] * RUN_MAX_SLOTS);
        nkeys = o->slots;
        nlook = o->slots + RUN_MAX_SLOTS;
    } else {
        keys[0] = *key;
    }
    if (pglock_holders_list(&list, conn, keys, nlook, 0, 15000, &perr) < 0)
        return cli_error(CLI_EXIT_UNAVAILABLE, "%s", perr.message);
    int in_use = o->slots ? run_slots_in_use(&sem, list, o->slots) : 0;
    if (in_use) {
        pglock_holders_free(list);
        return cli_error(CLI_EXIT_USAGE,
                         "--slots=%d given, but lock \"%s\" "
                         "is in use with --slots=%d; nothing was terminated",
                         o->slots, o->key_text, in_use);
    }
    int pids[64];
    const pglock_holder *rows[64];
    int n = find_holders(list, keys, nkeys, pids, rows, 64);
    if (n == 0) {
        pglock_holders_free(list);
        if (o->slots)
            cli_notice("no slot of lock \"%s\" is held; nothing to terminate",
                       o->key_text);
        else
            cli_notice("lock \"%s\" is not held; nothing to terminate",
                       o->key_text);
        return CLI_EXIT_PROBLEM;
    }
    printf("%s \"%s\" in database \"%s\" %s held by:\n",
           o->slots ? "the slots of lock" : "lock", o->key_text,
           rows[0]->database ? rows[0]->database : "?",
           o->slots ? "are" : "is");
    for (int i = 0; i < n; i++) {
        int slot = -1;
        for (int k = 0; o->slots && k < nkeys && slot < 0; k++)
            if (cli_same_lock(&rows[i]->key, &keys[k]))
                slot = k;
        print_holder(rows[i], reg, slot);
    }
    fflush(stdout);
    char host[80];
    const char *one_host = cli_holder_host(rows[0], reg, host, sizeof host);
    pglock_holders_free(list);
    /* the holders of a semaphore's slots are named together */
    if (n > 1 && !o->all && !o->slots) {
        cli_error(CLI_EXIT_USAGE,
                  "%d sessions hold lock \"%s\"; nothing was "
                  "terminated",
                  n, o->key_text);
        cli_hint("Use --all to terminate all of them.");
        return CLI_EXIT_USAGE;
    }
    if (!o->yes && !confirmed(n, o->key_text, one_host)) {
        if (isatty(STDIN_FILENO))
            return cli_error(CLI_EXIT_PROBLEM, "nothing was terminated");
        cli_error(CLI_EXIT_USAGE,
                  "not a terminal: --yes is needed to terminate");
        return cli_try_help("terminate");
    }
    PGresult *res = terminate_still_holding(conn, keys, nkeys, pids, n, err,
                                            sizeof err);
    if (!res)
        return strcmp(err, "42501") == 0
                   ? not_allowed(o->key_text, NULL)
                   : cli_error(CLI_EXIT_UNAVAILABLE, "%s", err);
    int code = report(res, o->key_text);
    PQclear(res);
    return code;
}

int cmd_terminate(int argc, char **argv)
{
    terminate_options o;
    memset(&o, 0, sizeof o);
    int rc = parse_options(argc, argv, &o);
    if (rc != CLI_GO_ON)
        return rc;
    char err[512];
    cli_registry *reg = NULL;
    pglock_key key;
    /* parse_options() returns CLI_GO_ON only with key_text set; the
     * analyzer cannot see that cli_usage_error() returns 64. */
    /* NOLINTNEXTLINE(clang-analyzer-core.NullDereference) */
    if ((o.common.keys_file || o.key_text[0] == '@') &&
        cli_registry_load(&reg, o.common.keys_file, err, sizeof err) < 0)
        return cli_usage_error("terminate", "%s", err);
    if (cli_parse_key(o.key_text, reg, &key, err, sizeof err) < 0) {
        cli_registry_free(reg);
        return cli_usage_error("terminate", "%s", err);
    }
    pglock_error perr = {0};
    PGconn *conn = cli_connect(&o.common.conn, "pglock terminate", "UTF8",
                               &perr);
    if (!conn) {
        cli_registry_free(reg);
        return cli_connect_error(&perr, NULL);
    }
    if (pglock_key_resolve(&key, conn, &perr) < 0)
        rc = cli_error(CLI_EXIT_UNAVAILABLE, "%s", perr.message);
    else
        rc = terminate(conn, &o, &key, reg);
    PQfinish(conn);
    cli_registry_free(reg);
    return rc;
}
