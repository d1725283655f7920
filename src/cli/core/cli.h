/*
 * cli.h — what the pglock subcommands share: exit codes, error printing,
 * connection options, durations, the key registry.  Internal to the CLI.
 */
#ifndef PGLOCK_CLI_H
#define PGLOCK_CLI_H

#include <getopt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "pglock.h"

/* Exit codes (sysexits.h values; pglock(1), EXIT STATUS). */
enum {
    CLI_EXIT_PROBLEM = 1,        /* doctor: a problem was found */
    CLI_EXIT_USAGE = 64,         /* bad options, key, duration, lease */
    CLI_EXIT_UNAVAILABLE = 69,   /* connect, auth, standby, pooler refused */
    CLI_EXIT_SOFTWARE = 70,      /* internal error */
    CLI_EXIT_LOST = 74,          /* the lock was lost while the job ran */
    CLI_EXIT_CONFLICT = 75,      /* busy (--try) or the wait timed out */
    CLI_EXIT_CANNOT_EXEC = 126,
    CLI_EXIT_NOT_FOUND = 127
};

/*
 * Return conventions, one meaning each.  A library call returns 0 or a
 * negative PGLOCK_E* code, so `rc < 0` always means a library error.  A
 * step of a command that may end it (an option, a check, a preparation)
 * returns an exit status (0..255, its message printed) or CLI_GO_ON; an
 * option function that is asked about an id not its own returns
 * CLI_OPT_NOT_MINE, so that the next one is asked.  Both lie outside
 * every exit status and library code: compare them by name, never by
 * sign.
 */
enum { CLI_GO_ON = 256, CLI_OPT_NOT_MINE = 257 };

/* The one mapping from a library code (a negative PGLOCK_E*) to an exit
 * status, for the codes a command has no story of its own for: 64 for
 * PGLOCK_EINVAL (the user's options or key), 70 for PGLOCK_ENOMEM and
 * PGLOCK_ESTATE (our fault), 69 for the rest (the server or the path to
 * it). */
int cli_exit_status_for(int pglock_code);

/* "pglock: error: MESSAGE\n" on stderr; returns code, so that
 * `return cli_error(CLI_EXIT_UNAVAILABLE, "...")` reads naturally. */
int cli_error(int code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* "pglock: warning: MESSAGE\n" on stderr, unless -q. */
void cli_warning(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* "pglock: hint: MESSAGE\n" on stderr. */
void cli_hint(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* cli_error(CLI_EXIT_USAGE, ...) followed by cli_try_help(command). */
/* The candidate that word most likely misspells (at most two edits), or
 * NULL. */
const char *cli_did_you_mean(const char *word, const char *const *candidates,
                             size_t n);
int cli_usage_error(const char *command, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* `Try "pglock COMMAND --help" for more information.` on stderr; returns
 * CLI_EXIT_USAGE (after an error and hints of one's own). */
int cli_try_help(const char *command);
/* "pglock: MESSAGE\n" on stderr, unless -q: an expected outcome that is
 * neither an error nor a warning (the lock is busy). */
void cli_notice(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Set by -q: cli_verbose() prints nothing, errors still print. */
extern int cli_quiet;
/* Set by -v: cli_verbose() prints "pglock: TIMESTAMP message". */
extern int cli_verbosity;
void cli_verbose(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* -h -p -U -d, as PostgreSQL's tools.  NULL members are left to libpq. */
typedef struct cli_conn {
    const char *host;
    const char *port;
    const char *user;
    const char *dbname;   /* a dbname, conninfo string or URI */
} cli_conn;

/* Fills keywords/values (room for 8 entries incl. the NULL terminator)
 * for pglock_client_open_params() / PQconnectdbParams(..., 1). */
void cli_conn_params(const cli_conn *conn, const char *application_name,
                     const char *keywords[8], const char *values[8]);
/* "pglock COMMAND KEYS on HOST" into buf (app_name.c): the
 * application_name that tells every role which lock a session is for and
 * which host holds it; "pglock COMMAND KEYS" when host is NULL or "".
 * At most 63 bytes (NAMEDATALEN - 1) as the server shows them (a byte
 * outside printable ASCII counts as its "\xNN"), cut on UTF-8 character
 * boundaries, so the server never cuts it.  When both do not fit, the
 * host is cut first if KEYS is printable ASCII and fits (only a whole,
 * unrewritten name can name the lock: status hashes it back); otherwise
 * KEYS cannot name it anyway, and the host keeps at least half the room. */
void cli_application_name(char buf[64], const char *command, const char *keys,
                          const char *host);

struct cli_registry; /* the key registry, below */
/* What a pglock application_name says (borrowed from it). */
typedef struct cli_app_said {
    const char *command;  /* "run", "lead" or "record" */
    const char *keys;     /* KEYS, keys_len bytes (not NUL-terminated) */
    size_t keys_len;
    const char *host;     /* HOST to the end of the string; NULL: none */
    int checked;          /* the check said yes to KEYS */
} cli_app_said;
/* Whether text (a candidate KEYS, NUL-terminated) is the right one. */
typedef int cli_app_check(const char *text, void *arg);
/* Reads app: 1 when it is a pglock command's, else 0 (out zeroed).  A
 * name may contain " on " and an older pglock wrote no host, so the
 * splits are tried with check (NULL: none): KEYS before each " on " from
 * the last, then KEYS whole; the first that checks out wins.  Else HOST
 * is what follows the last " on ". */
int cli_app_read(const char *app, cli_app_check *check, void *arg,
                 cli_app_said *out);
/* 1 if text, as a run's KEYS, names key: a name that hashes back to it
 * (what application_name cut or rewrote does not), or "@NAME" that reg
 * (or NULL) maps to it. */
int cli_app_names_key(const char *text, const pglock_key *key,
                      const struct cli_registry *reg);
/* cli_app_read(), each KEYS checked with cli_app_names_key() against key
 * and reg (key NULL: unchecked). */
int cli_app_read_key(const char *app, const pglock_key *key,
                     const struct cli_registry *reg, cli_app_said *out);
/* The host in app, a holder of key, into buf; NULL when it names none
 * (not pglock's, or written by an older pglock). */
const char *cli_app_host(const char *app, const pglock_key *key,
                         const struct cli_registry *reg, char *buf, size_t len);

/* Connects with cli_conn_params(conn, application_name) and, when
 * client_encoding is not NULL, that client_encoding (a startup
 * parameter), bounded as pglock__connect_params() is.  Returns the
 * connection (caller PQfinish()es it), or NULL with err set. */
PGconn *cli_connect(const cli_conn *conn, const char *application_name,
                    const char *client_encoding, pglock_error *err);
/* cli_connect() that also gives up at deadline (pglock_now_ms()'s clock;
 * -1: none), with "could not connect in time". */
PGconn *cli_connect_until(const cli_conn *conn, const char *application_name,
                          const char *client_encoding, int64_t deadline,
                          pglock_error *err);
/* Prints a failed connect's error, prefixed by "what: " when what is not
 * NULL, and libpq's hint; returns the exit status (64 when libpq refused
 * the options, else 69). */
int cli_connect_error(const pglock_error *err, const char *what);
/* libpq's hint for a refused connection or a missing socket, if message
 * is one. */
void cli_connect_hint(const char *message);

/* pglock__exec_params() bounded by conn's connect_timeout (else
 * PGLOCK_CONNECT_TIMEOUT_S): every query of the one-shot commands. */
PGresult *cli_query(PGconn *conn, const char *sql, int nparams,
                    const char *const *params, pglock_error *err);
/* That bound, in ms (PGLOCK_WAIT_FOREVER for connect_timeout=0), for the
 * library calls that take one (status's pglock_holders_list()). */
long cli_query_timeout_ms(PGconn *conn);

/*
 * Options, declared once in tables (option_table.c): the parser and --help both
 * read them.  A table is an array ended by CLI_OPT_END; an entry without
 * long_name is a group heading (its help is the heading's text), and a
 * table that opens without one continues the group before it; an entry
 * without help is parsed but not shown.  Ids: a letter, or a command's
 * own from 256 up to 899; 900 and up are the shared ones below.
 */
enum { CLI_OPT_NO_VALUE, CLI_OPT_VALUE, CLI_OPT_OPTIONAL };
#define CLI_OPT_HELP 1000    /* the id of -? and --help */
#define CLI_OPT_DONE 0       /* cli_opt_next(): the options have ended */
#define CLI_OPT_REFUSED 1001 /* cli_opt_next(): a usage error, printed */
typedef struct cli_opt {
    int id;                 /* what cli_opt_next() returns for it */
    char short_name;        /* 0: long only */
    const char *long_name;
    int value;              /* CLI_OPT_NO_VALUE, _VALUE or _OPTIONAL */
    const char *value_name; /* "DURATION", for --help */
    const char *help;       /* lines separated by '\n' */
} cli_opt;
#define CLI_OPT_END {0, 0, NULL, 0, NULL, NULL}

/*
 * The options that several commands share, each declared once, with one
 * help text; a command lists the tables it takes, in its --help's order.
 *   cli_conn_opts     -h -p -U -d (ids 'h' 'p' 'U' 'd', cli_conn_option()),
 *                     under "Connection"
 *   cli_keys_opts     --keys=FILE (id CLI_OPT_KEYS), under "Key registry"
 *   cli_output_heading  the "Output" heading alone, for the next three:
 *   cli_json_opts     --json (id CLI_OPT_JSON)
 *   cli_quiet_opts    -q (id 'q': set cli_quiet)
 *   cli_verbose_opts  -v (id 'v': cli_verbosity++)
 *   cli_help_opts     -V and -?/--help, under "Other", last
 */
enum { CLI_OPT_KEYS = 900, CLI_OPT_JSON };
extern const cli_opt cli_conn_opts[];
extern const cli_opt cli_keys_opts[];
extern const cli_opt cli_output_heading[];
extern const cli_opt cli_json_opts[];
extern const cli_opt cli_quiet_opts[];
extern const cli_opt cli_verbose_opts[];
extern const cli_opt cli_help_opts[];

typedef struct cli_opt_parser {
    const char *command;
    int argc;
    char **argv;
    const cli_opt *const *tables;
    struct option longopts[48];
    char shorts[96];
    int at;           /* optind before the last getopt_long() */
    int key_operands; /* set by a command whose operands are KEYs: a
                         refused "-5" is then hinted at int:-5 */
} cli_opt_parser;

/* Prepares to parse argv[1..] against tables (NULL-terminated).
 * stop_at_operand: options end at the first operand (run's KEY), else
 * operands and options may mix.  0, or -1 if the tables are too big. */
int cli_opt_init(cli_opt_parser *p, const char *command, int argc,
                 char **argv, const cli_opt *const *tables,
                 int stop_at_operand);
/* The next option's id, its value in *value (NULL if none);
 * CLI_OPT_DONE when the options end (optind is then the first operand);
 * or CLI_OPT_REFUSED after printing the usage error (an unknown option, a
 * missing or unwanted value): the command then exits CLI_EXIT_USAGE. */
int cli_opt_next(cli_opt_parser *p, const char **value);
/* Prints the tables' entries: headings, then "  -x, --name=VALUE" with
 * the description in one column, for every command alike. */
void cli_opt_help(FILE *out, const cli_opt *const *tables);

/* Stores arg in conn if c is 'h', 'p', 'U' or 'd'.  Returns 1 if it was
 * one of them, else 0. */
int cli_conn_option(cli_conn *conn, int c, const char *arg);
/* 1 if -? or --help comes before any "--" in argv[1..]: help is asked
 * for wherever it is, as PostgreSQL's tools do. */
int cli_help_asked(int argc, char **argv);
/* The start of a one-shot command's options: print_help() and 0 when
 * help is asked for (cli_help_asked()), else cli_opt_init(p, ...,
 * stop_at_operand 0) and CLI_GO_ON. */
int cli_opt_start(cli_opt_parser *p, const char *command, int argc,
                  char **argv, const cli_opt *const *tables,
                  void (*print_help)(void));
/* What a command does with an option id its own switch leaves: -V prints
 * the version (0), CLI_OPT_REFUSED (the error already printed) is
 * CLI_EXIT_USAGE, -h -p -U -d go into conn (cli_conn_option()) and
 * anything else is ignored.  CLI_GO_ON, else the exit status. */
int cli_shared_option(cli_conn *conn, int id, const char *value);
/* Makes the next getopt_long() start afresh: main or a test may have used
 * getopt before. */
void cli_getopt_reset(void);
/* "pglock VERSION (libpglock VERSION, libpq N)" on stdout: -V, --version
 * of every command. */
void cli_print_version(void);

/* Copies text into out (outlen > 5) for a one-line message: control bytes
 * as \xNN, with quotes also '"' and '\\' escaped by a backslash; cut
 * after 64 bytes with "...". */
void cli_echo_arg(const char *text, int quotes, char *out, size_t outlen);

/* A lock request in words (holder_line.c).  How long it has been held or
 * waited: "41s to 2m13s" (an idle holder: the lock is older than its last
 * statement's end and younger than its session), "up to 2m13s" (an upper
 * bound alone), "1m02s" (a waiter's exact waitstart), "hidden", "unknown". */
void cli_holder_how_long(const pglock_holder *e, char *buf, size_t len);
/* Where the session comes from: "10.0.0.5:41234", "[::1]:41234", "local"
 * (a Unix socket), "hidden", "no session", "prepared transaction". */
void cli_holder_client(const pglock_holder *e, char *buf, size_t len);
/* The host its pglock application_name names (cli_app_host(), checked
 * against reg), for one line (cli_echo_arg()); NULL when none. */
const char *cli_holder_host(const pglock_holder *e,
                            const struct cli_registry *reg, char *buf,
                            size_t len);
/* One phrase: cron-3 (backend pid 812, user app, client 10.0.0.5:41234,
 * "pglock run K on cron-3", held 41s to 2m13s); without a host, backend
 * pid 812 (user app, ...). */
void cli_holder_describe(const pglock_holder *e,
                         const struct cli_registry *reg, char *buf,
                         size_t len);

/* Parses a DURATION: "500ms", "30s", "5m", "2h" or plain integer seconds
 * ("30").  Strict: no sign, no spaces, no empty string, and at most
 * CLI_DURATION_MAX_MS (PostgreSQL's own timeouts stop there too), so that
 * sums of durations never overflow.  0 on success, -1 with one line in err. */
#define CLI_DURATION_MAX_MS 2147483647L
int cli_parse_duration(const char *text, long *out_ms, char *err, size_t errlen);
/* s seconds for people, rounded, in at most two units: "41s" ("41.3s"
 * with tenths), "2m13s", "3h05m", "2d04h". */
void cli_format_duration(double s, int tenths, char *buf, size_t len);
/* Writes v in decimal at p, at least min_digits digits (zeros in front,
 * at most 20), and returns the end; p needs 21 bytes.  No NUL. */
char *cli_put_decimal(char *p, long long v, int min_digits);

/*
 * The key registry (--keys FILE / PGLOCK_KEYS): lines "name = KEY" (KEY in
 * pglock_key_parse() syntax) or a bare "name" (hashed by the rule);
 * '#' comments and blank lines are ignored.  A registry owns its text.
 */
typedef struct cli_registry cli_registry;
/* NULL path: PGLOCK_KEYS, else an empty registry.  0 or -1 with err. */
int cli_registry_load(cli_registry **out, const char *path, char *err,
                      size_t errlen);
/* Same, from a buffer (for fuzzing and tests). */
int cli_registry_parse(cli_registry **out, const char *text, size_t len,
                       const char *origin, char *err, size_t errlen);
void cli_registry_free(cli_registry *reg);
/* The file the registry came from, or NULL when none was given. */
const char *cli_registry_origin(const cli_registry *reg);
/* The key registered under name, or NULL. */
const pglock_key *cli_registry_lookup(const cli_registry *reg, const char *name);
/* The registered name that name most likely misspells (as options and
 * commands, cli_did_you_mean()), or NULL. */
const char *cli_registry_near(const cli_registry *reg, const char *name);
/* The first name registered for key (compared by locktag), or NULL. */
const char *cli_registry_name_of(const cli_registry *reg, const pglock_key *key);
/* Calls fn for each pair of names that share one key. */
void cli_registry_collisions(const cli_registry *reg,
                             void (*fn)(const char *a, const char *b,
                                        const pglock_key *key, void *arg),
                             void *arg);

/* A key as the user wrote it: pglock_key_parse() syntax, or "@NAME" looked
 * up in reg (a missing entry is an error).  0, or -1 with one line in err. */
int cli_parse_key(const char *text, const cli_registry *reg, pglock_key *out,
                  char *err, size_t errlen);
/* 1 if a and b take the same lock (the same locktag; same_lock.c).
 * Unresolved legacy keys have no locktag yet: they are the same when
 * their expressions are. */
int cli_same_lock(const pglock_key *a, const pglock_key *b);

/* Subcommands: argv[0] is the subcommand name; they return the exit code. */
int cmd_run(int argc, char **argv);
int cmd_lead(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_key(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_init(int argc, char **argv);
int cmd_history(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_metrics(int argc, char **argv);
int cmd_terminate(int argc, char **argv);

#endif
