/*
 * pglock status — who holds and who waits, by name.
 *
 * One call per refresh (pglock_holders_list(): one query) gives the
 * requests for the keys asked for, or for every advisory lock; this file
 * looks, has status_model.c name the keys (registry, or a pglock
 * application_name that hashes back to the key), group the requests by
 * key and arrange waiters under whoever blocks them, and hands the result
 * to a renderer: a table (status_text.c), a JSON document
 * (status_json.c), or a live --watch view of either.  With KEYs, the
 * exit status says whether all are held.
 */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/ioctl.h>
#include "json.h"
#include "prefault.h"
#include "status.h"

#define DEFAULT_WATCH_MS 2000L

/* Exit status of `status KEY...` when some KEY is free. */
#define EXIT_SOME_FREE 1

typedef struct status_options {
    cli_common common; /* first: the shared options' fields */
    int watch;
    long watch_ms;
    int all_databases;
    pglock_key *filter; /* the KEYs given; NULL: every key */
    int n_filter;
    int slots;             /* --slots=N: KEY is a semaphore of N slots */
    const char *slot_name; /* that KEY, as given */
} status_options;
CLI_COMMON_FIRST(status_options);

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
    (void)sig;
    interrupted = 1;
}

static cli_opt_call_fn watch_option;

static const cli_opt status_opts[] = {
    {.type = CLI_OPT_HEADING, .help = "Options:"},
    {.type = CLI_OPT_FLAG,
     .long_name = "all-databases",
     .field = offsetof(status_options, all_databases),
     .help = "every database, not only the current one"},
    {.type = CLI_OPT_CALL,
     .long_name = "watch",
     .value_name = "INTERVAL",
     .optional = 1,
     .call = watch_option,
     .help = "redraw every INTERVAL (default 2s) until ^C"},
    {.type = CLI_OPT_CALL,
     .long_name = "slots",
     .field = offsetof(status_options, slots),
     .value_name = "N",
     .call = status_slots_option,
     .help = "KEY is a semaphore of N slots (run --slots=N):\n"
             "show it as one entry even when nobody uses it\n"
             "(one in use is shown so without --slots); 0 when\n"
             "every slot is held"},
    {.type = CLI_OPT_END}};

static const cli_opt *const status_tables[] = {
    status_opts,   cli_output_heading, cli_json_opts, cli_quiet_opts,
    cli_keys_opts, cli_conn_opts,      cli_help_opts, NULL};

static void print_help(const cli_common *target)
{
    (void)target;
    printf(
        "pglock status shows who holds and who waits for advisory locks.\n\n"
        "Usage:\n"
        "  pglock status [OPTION]... [KEY]...\n\n"
        "With no KEY, every advisory lock held or awaited in the database.\n\n");
    cli_opt_help(stdout, status_tables);
    printf("\nExit status: with KEYs, 0 when every KEY is held, 1 when any is\n"
           "free; with no KEY, 0 when it could look.  64 for bad options or\n"
           "keys, 69 when it could not look (no connection, a standby).\n"
           "See pglock-status(1).\n");
}

/* ------------------------------------------------------ one refresh */

/* 1 if every KEY given is held (in any database looked at). */
static int all_held(const status_options *o, const lock_view *views, int nv)
{
    for (int i = 0; i < o->n_filter; i++) {
        int held = 0;
        for (int k = 0; k < nv && !held; k++)
            held = views[k].holders > 0 &&
                   cli_same_lock(&views[k].e[0]->key, &o->filter[i]);
        if (!held)
            return 0;
    }
    return 1;
}

/* Looks once and renders to out.  0 (*held: every KEY is held), or a
 * PGLOCK_E* code with one line in err. */
static int refresh(FILE *out, PGconn *conn, const status_options *o,
                   const cli_registry *reg, int *held, char *err, size_t errlen)
{
    pglock_holders *list = NULL;
    pglock_error perr = {0};
    /* One KEY may name a semaphore: its slots, gate and declarations are
     * read in the same statement, and a declaration in use shows it as
     * one entry (status_slots.c). */
    run_slots sem; /* 9 kB: no state outlives the call */
    pglock_key keys[1 + STATUS_SLOTS_NKEYS];
    int semaphore = o->n_filter == 1 && !o->all_databases &&
                    status_slots_keys(&sem, &o->filter[0], keys + 1) > 0;
    if (semaphore)
        keys[0] = o->filter[0];
    int rc = pglock_holders_list(
        &list, conn, semaphore ? keys : o->filter,
        semaphore ? 1 + STATUS_SLOTS_NKEYS : o->n_filter,
        o->all_databases ? PGLOCK_HOLDERS_ALL_DATABASES : 0,
        cli_query_timeout_ms(conn), &perr);
    if (rc) {
        snprintf(err, errlen, "%s", perr.message);
        return rc;
    }
    int in_use = semaphore ? status_slots_declared(list, &sem) : 0;
    if (in_use) {
        *held = status_slots_render(out, list, &sem, in_use, o->slot_name,
                                    o->common.json);
        pglock_holders_free(list);
        return PGLOCK_OK;
    }
    int n = pglock_holders_count(list);
    /* an array of pointers: sizeof *e is a pointer's size, as meant */
    /* NOLINTNEXTLINE(bugprone-sizeof-expression) */
    const pglock_holder **e = calloc((size_t)n + 1, sizeof *e);
    lock_view *views = calloc((size_t)n + 1, sizeof *views);
    const char **hosts = calloc((size_t)n + 1, sizeof *hosts);
    /* NOLINTNEXTLINE(bugprone-sizeof-expression) */
    prefault(e, ((size_t)n + 1) * sizeof *e);
    prefault(views, ((size_t)n + 1) * sizeof *views);
    prefault(hosts, ((size_t)n + 1) * sizeof *hosts);
    rc = e && views && hosts ? PGLOCK_OK : PGLOCK_ENOMEM;
    if (rc == PGLOCK_OK) {
        int kept = 0;
        for (int i = 0; i < n; i++) {
            const pglock_holder *h = pglock_holders_get(list, i);
            /* not a semaphore: KEY's own requests only */
            if (!semaphore || cli_same_lock(&h->key, &o->filter[0]))
                e[kept++] = h;
        }
        int nv = status_group_locks(e, hosts, kept, reg, views);
        *held = all_held(o, views, nv);
        status_scene s = {views,           nv,   o->all_databases,
                          o->n_filter > 0, conn, reg};
        if (o->common.json)
            status_render_json(out, &s);
        else if (status_render_text(out, &s))
            rc = PGLOCK_ENOMEM;
    }
    if (rc)
        snprintf(err, errlen, "out of memory");
    free(views);
    free(hosts);
    free(e);
    pglock_holders_free(list);
    return rc;
}

/* Sleeps ms, returning early on SIGINT/SIGTERM. */
static void nap(long ms)
{
    int64_t end = pglock_now_ms() + ms;
    while (!interrupted) {
        int64_t left = end - pglock_now_ms();
        if (left <= 0)
            break;
        poll(NULL, 0, left > 1000 ? 1000 : (int)left);
    }
}

/* Draws a frame over the previous one: home the cursor, write each line
 * and clear the rest of it, then clear below.  One write, no blank
 * screen in between, so nothing flickers.  Like watch(1), the frame is
 * cut to the terminal's size: a line that wrapped or a screen that
 * scrolled would leave the next frame misplaced.  (buf is bytes for
 * fwrite(), never a string: no terminating NUL is missing.) */
/* NOLINTBEGIN(bugprone-not-null-terminated-result) */
static void draw_frame(const char *frame, size_t len, int tty, int json)
{
    if (!tty) {
        /* Text frames are set apart by a blank line; JSON documents are
         * one per line, nothing between them. */
        fwrite(frame, 1, len, stdout);
        if (!json)
            fputc('\n', stdout);
        fflush(stdout);
        return;
    }
    struct winsize ws;
    int rows = 24, cols = 80;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_row && ws.ws_col) {
        rows = ws.ws_row;
        cols = ws.ws_col;
    }
    char *buf = malloc(len + (size_t)rows * 4 + 16);
    if (!buf)
        return;
    size_t n = 0;
    memcpy(buf + n, "\033[H", 3);
    n += 3;
    int row = 0, col = 0;
    for (size_t i = 0; i < len && row < rows - 1; i++) {
        if (frame[i] == '\n') {
            memcpy(buf + n, "\033[K\n", 4);
            n += 4;
            row++;
            col = 0;
            continue;
        }
        if (((unsigned char)frame[i] & 0xC0) != 0x80)
            col++; /* a new code point */
        if (col <= cols)
            buf[n++] = frame[i];
    }
    memcpy(buf + n, "\033[J", 3);
    n += 3;
    fwrite(buf, 1, n, stdout);
    fflush(stdout);
    free(buf);
}
/* NOLINTEND(bugprone-not-null-terminated-result) */

static int watch(PGconn *conn, const status_options *o, const cli_registry *reg)
{
    int tty = isatty(STDOUT_FILENO) && !o->common.json;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_interrupt; /* no SA_RESTART: wake the nap */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (tty)
        fputs("\033[?25l\033[H\033[2J", stdout); /* hide cursor, clear once */
    while (!interrupted) {
        char *frame = NULL;
        size_t len = 0;
        FILE *mem = open_memstream(&frame, &len);
        if (!mem)
            break;
        if (!o->common.json) {
            char stamp[32];
            time_t now = time(NULL);
            struct tm tm;
            localtime_r(&now, &tm);
            strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
            fprintf(mem, "Every %.1fs: pglock status    %s\n\n",
                    (double)o->watch_ms / 1000.0, stamp);
        }
        char err[512];
        if (PQstatus(conn) != CONNECTION_OK)
            PQreset(conn);
        int held;
        if (refresh(mem, conn, o, reg, &held, err, sizeof err)) {
            if (o->common.json) { /* still one document per line */
                json_writer w;
                json_init(&w, mem);
                json_object_begin(&w, NULL);
                json_int(&w, "format", 1);
                json_string(&w, "error", err);
                json_object_end(&w);
                json_end(&w);
            } else
                fprintf(mem, "pglock: error: %s\n", err);
        }
        fclose(mem);
        if (!interrupted)
            draw_frame(frame, len, tty, o->common.json);
        free(frame);
        nap(o->watch_ms);
    }
    if (tty)
        fputs("\033[?25h\n", stdout); /* the cursor back */
    fflush(stdout);
    return 0;
}

/* ------------------------------------------------------ options */

/* --watch[=INTERVAL]: redraw, every INTERVAL when given. */
static cli_step watch_option(const char *command, const cli_opt *o,
                             cli_common *target, const char *value)
{
    status_options *so = (status_options *)target; /* (its first member) */
    char err[256];
    (void)o;
    so->watch = 1;
    if (!value)
        return CLI_GO_ON;
    if (cli_parse_duration(value, &so->watch_ms, err, sizeof err))
        return cli_usage_error(command, "invalid --watch interval: %s", err);
    if (so->watch_ms < 100)
        return cli_usage_error(command,
                               "invalid --watch interval \"%s\": "
                               "less than 100ms",
                               value);
    return CLI_GO_ON;
}

static const cli_opt_command status_command = {"status", status_tables,
                                               print_help,
                                               CLI_OPT_KEY_OPERANDS};

/* ------------------------------------------------------ the command */

static PGconn *connect_or_fail(const status_options *o, int *code)
{
    /* Names and application_names arrive as UTF-8 whatever the server's
     * encoding: a startup parameter, not a SET (safe through a pooler). */
    pglock_error err = {0};
    PGconn *conn = cli_connect(&o->common.conn, "pglock status", "UTF8", &err);
    if (!conn)
        *code = cli_connect_error(&err, NULL);
    return conn;
}

/* Parses the KEYs (the nkeys operands at keys) into o->filter; 0 or an
 * exit code. */
static int parse_keys(int nkeys, char **keys, status_options *o,
                      const cli_registry *reg)
{
    char err[512];
    o->filter = calloc((size_t)nkeys + 1, sizeof *o->filter);
    if (!o->filter)
        return cli_error(CLI_EXIT_SOFTWARE, "out of memory");
    for (int i = 0; i < nkeys; i++)
        if (cli_parse_key(keys[i], reg, &o->filter[i], err, sizeof err))
            return cli_usage_error("status", "%s", err);
    o->n_filter = nkeys;
    if (o->slots && (nkeys != 1 || o->watch || o->all_databases))
        return cli_usage_error("status", "--slots takes one KEY, without "
                                         "--watch or --all-databases");
    o->slot_name = nkeys ? keys[0] : NULL;
    return 0;
}

/* Looks once (or watches) on conn; the exit status. */
static int look(PGconn *conn, const status_options *o, const cli_registry *reg)
{
    char err[512];
    for (int i = 0; i < o->n_filter; i++) {
        /* legacy keys' values come from the server; others need nothing */
        pglock_error perr = {0};
        if (pglock_key_resolve(&o->filter[i], conn, &perr))
            return cli_error(CLI_EXIT_UNAVAILABLE, "%s", perr.message);
    }
    if (o->slots)
        return status_slots(conn, &o->filter[0], o->slot_name, o->slots,
                            o->common.json);
    if (o->watch)
        return watch(conn, o, reg);
    int held = 0;
    FILE *out = stdout;
    if (cli_quiet && !(out = fopen("/dev/null", "w")))
        return cli_error(CLI_EXIT_SOFTWARE, "cannot open /dev/null: %s",
                         strerror(errno));
    int rc = refresh(out, conn, o, reg, &held, err, sizeof err);
    if (out != stdout)
        fclose(out);
    if (rc) /* no connection, a standby, a server error: could not look */
        return cli_error(cli_exit_status_for(rc), "%s", err);
    return o->n_filter && !held ? EXIT_SOME_FREE : 0;
}

int cmd_status(int argc, char **argv)
{
    status_options o;
    memset(&o, 0, sizeof o);
    o.watch_ms = DEFAULT_WATCH_MS;
    int operand;
    int rc = cli_opt_parse(&status_command, argc, argv, &o.common, &operand);
    if (rc != CLI_GO_ON)
        return rc;
    char err[512];
    cli_registry *reg = NULL;
    if (cli_registry_load(&reg, o.common.keys_file, err, sizeof err))
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    status_warn_collisions(reg);
    rc = parse_keys(argc - operand, argv + operand, &o, reg);
    if (rc == 0) {
        PGconn *conn = connect_or_fail(&o, &rc);
        if (conn) {
            rc = look(conn, &o, reg);
            PQfinish(conn);
        }
    }
    free(o.filter);
    cli_registry_free(reg);
    return rc;
}
