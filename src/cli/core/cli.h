/*
 * cli.h — what the pglock subcommands share: exit codes, error printing,
 * connection options, durations, the key registry.  Internal to the CLI.
 */
#ifndef PGLOCK_CLI_H
#define PGLOCK_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include "pglock.h"

/* Exit codes (sysexits.h values; pglock(1), EXIT STATUS). */
enum {
    CLI_EXIT_PROBLEM = 1,      /* doctor: a problem was found */
    CLI_EXIT_USAGE = 64,       /* bad options, key, duration, lease */
    CLI_EXIT_UNAVAILABLE = 69, /* connect, auth, standby, pooler refused */
    CLI_EXIT_SOFTWARE = 70,    /* internal error */
    CLI_EXIT_LOST = 74,        /* the lock was lost while the job ran */
    CLI_EXIT_CONFLICT = 75,    /* busy (--try) or the wait timed out */
    CLI_EXIT_CANNOT_EXEC = 126,
    CLI_EXIT_NOT_FOUND = 127
};

/*
 * Return conventions, one meaning each, written once here:
 * - a library call returns 0 or a negative PGLOCK_E* code, so `rc < 0`
 *   always means a library error; a function of ours that passes such a
 *   code on says "0, or a PGLOCK_E* code";
 * - a cli_step (a step of a command that may end it: an option's value, a
 *   check, a preparation) returns an exit status (0..255, its message
 *   printed) or CLI_GO_ON;
 * - a check that fills an error buffer returns 0, or -1 with the buffer
 *   set;
 * - a question (a name that asks "whether") returns 1 or 0;
 * - a number (a count, an index, a signal, a slot) is that number alone;
 *   where there may be none, its declaration says which value is none.
 * An outcome with more cases than these is an enum of its own (lead's
 * lead_step, run_refusal, the watchdog's wd_phase), never a mix in one
 * int.  CLI_GO_ON lies outside every exit status and library code:
 * compare it by name, never by sign.
 */
enum { CLI_GO_ON = 256 };
typedef int cli_step;

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
/* The candidate that word most likely misspells (at most two edits), or
 * NULL. */
const char *cli_did_you_mean(const char *word, const char *const *candidates,
                             size_t n);
/* cli_error(CLI_EXIT_USAGE, ...) followed by cli_try_help(command). */
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
    const char *dbname; /* a dbname, conninfo string or URI */
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
    const char *command; /* "run", "lead" or "record" */
    const char *keys;    /* KEYS, keys_len bytes (not NUL-terminated) */
    size_t keys_len;
    const char *host; /* HOST to the end of the string; NULL: none */
    int checked;      /* the check said yes to KEYS */
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
/* A lock holder's application_name, a run's or lead's: 1 when
 * cli_app_read_key() reads it and, with key, its KEYS name key (a name
 * is believed only if it hashes back to the key: application_name is cut
 * at 63 bytes and non-ASCII bytes are rewritten, which changes the hash);
 * else 0.  A --record connection's ("pglock record KEYS") is not one: it
 * holds the run's history lock, not KEYS. */
int cli_app_read_holder(const char *app, const pglock_key *key,
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
 * Options, declared once (option_table.c, as libgit2's CLI declares its
 * cli_opt_spec): each entry says what the option is, which field it
 * fills and how it reads its value, and both the parser (cli_opt_parse())
 * and --help read the same entries, so neither can drift from the other.
 *
 * A command's options live in one struct of its own, whose first member
 * is a cli_common (the fields the shared options fill); an entry names
 * its field by offsetof() in that struct (the shared ones: in
 * cli_common).  A table is an array of entries ended by CLI_OPT_END; a
 * command lists its tables in --help's order.  An entry without help is
 * parsed but not shown.  Entries are written with designated initializers
 * ({.type = CLI_OPT_FLAG, ...}), the rest of an entry zero.
 */
typedef enum cli_opt_type {
    CLI_OPT_END = 0,  /* ends a table */
    CLI_OPT_HEADING,  /* a group heading in --help: help is its text */
    CLI_OPT_FLAG,     /* an int field set to 1 */
    CLI_OPT_SET,      /* an int or enum field set to .set */
    CLI_OPT_COUNT,    /* an int field, one more each time */
    CLI_OPT_STRING,   /* a const char * field: the value as given */
    CLI_OPT_DURATION, /* a long field: the value in ms, cli_parse_duration() */
    CLI_OPT_INT,      /* an int field: decimal digits, .min to .max */
    CLI_OPT_CHOICE,   /* an int or enum field: the value of the word given,
                         one of .choices */
    CLI_OPT_CALL,     /* .call reads the value (checks that need more than
                         one field, or messages of their own) */
    CLI_OPT_VERSION,  /* prints the version: the command ends, 0 */
    CLI_OPT_HELP      /* prints the command's help: the command ends, 0 */
} cli_opt_type;

/* The fields that the shared options fill, first in every command's
 * options. */
typedef struct cli_common {
    cli_conn conn;         /* -h -p -U -d */
    const char *keys_file; /* --keys=FILE, or NULL: $PGLOCK_KEYS */
    int json;              /* --json */
} cli_common;

/* Stated beside a command's options struct T: its cli_common comes
 * first, where the shared options' offsets point. */
#define CLI_COMMON_FIRST(T) \
    _Static_assert(offsetof(T, common) == 0, #T ": cli_common comes first")

/* One word of a CLI_OPT_CHOICE and the value it stands for. */
typedef struct cli_opt_choice {
    const char *word;
    int value;
} cli_opt_choice;

typedef struct cli_opt cli_opt;
/* A CLI_OPT_CALL's reader: command names the command (for messages),
 * the field is cli_opt_field(o, target), value is NULL when none was
 * given (an optional one, or an option without).  CLI_GO_ON, else the
 * exit status (the usage error printed). */
typedef cli_step cli_opt_call_fn(const char *command, const cli_opt *o,
                                 cli_common *target, const char *value);

struct cli_opt {
    cli_opt_type type;
    char short_name; /* 0: long only */
    const char *long_name;
    size_t field;           /* offsetof() the field in the command's options */
    const char *value_name; /* "DURATION": the option takes a value; NULL:
                               it takes none */
    const char *help;       /* lines separated by '\n'; NULL: not shown */
    int optional;           /* the value may be left out: --name[=VALUE] */
    int *global;            /* the field is this global instead (only the
                               output verbosity: cli_quiet, cli_verbosity) */
    int set;                /* CLI_OPT_SET's value */
    long min, max;          /* CLI_OPT_INT's range */
    const cli_opt_choice *choices; /* CLI_OPT_CHOICE's words, ended by
                                      {NULL, 0} */
    cli_opt_call_fn *call;         /* CLI_OPT_CALL's reader */
};

/* The field o fills in target. */
void *cli_opt_field(const cli_opt *o, cli_common *target);

/* The options that several commands share, each declared once, with one
 * help text; a command lists the tables it takes, in its --help's order.
 *   cli_conn_opts     -h -p -U -d (common.conn), under "Connection"
 *   cli_keys_opts     --keys=FILE (common.keys_file), under "Key registry"
 *   cli_output_heading  the "Output" heading alone, for the next three:
 *   cli_json_opts     --json (common.json)
 *   cli_quiet_opts    -q (cli_quiet)
 *   cli_verbose_opts  -v (cli_verbosity)
 *   cli_help_opts     -V and -?/--help, under "Other", last */
extern const cli_opt cli_conn_opts[];
extern const cli_opt cli_keys_opts[];
extern const cli_opt cli_output_heading[];
extern const cli_opt cli_json_opts[];
extern const cli_opt cli_quiet_opts[];
extern const cli_opt cli_verbose_opts[];
extern const cli_opt cli_help_opts[];

/* How a command reads its options. */
enum {
    /* options end at the first operand (run's KEY: what follows is the
     * job's), and -?/--help counts only among them; otherwise operands
     * and options may mix, and help is asked wherever it is before "--" */
    CLI_OPT_STOP_AT_OPERAND = 1,
    /* the operands are KEYs: a refused "-5" is hinted at int:-5 */
    CLI_OPT_KEY_OPERANDS = 2
};
typedef struct cli_opt_command {
    const char *name;             /* "status", for messages */
    const cli_opt *const *tables; /* NULL-terminated, in --help's order */
    /* prints the command's --help on stdout; target is the options */
    void (*print_help)(const cli_common *target);
    unsigned flags; /* CLI_OPT_STOP_AT_OPERAND, CLI_OPT_KEY_OPERANDS */
} cli_opt_command;

/* Reads the options of argv[1..] into target (the command's options,
 * their defaults already set), as cmd declares them.  CLI_GO_ON with
 * *operand the index of the first operand; else the exit status: 0
 * after --help or --version, 64 after a usage error (printed: an unknown
 * option, with "did you mean", a missing or unwanted value, a value its
 * type refuses), 70 if the tables are too big. */
cli_step cli_opt_parse(const cli_opt_command *cmd, int argc, char **argv,
                       cli_common *target, int *operand);
/* A CLI_OPT_DURATION's reading of value into *out_ms, for a
 * CLI_OPT_CALL that reads one too: CLI_GO_ON, else the usage error's
 * exit status ("invalid value for --NAME: ...", printed). */
cli_step cli_opt_read_duration(const char *command, const cli_opt *o,
                               const char *value, long *out_ms);
/* 1 if -? or --help comes before any "--" in argv[1..]: help is asked
 * for wherever it is, as PostgreSQL's tools do (how cli_opt_parse()
 * reads help without CLI_OPT_STOP_AT_OPERAND). */
int cli_opt_help_asked(int argc, char **argv);
/* Prints the tables' entries: headings, then "  -x, --name=VALUE" with
 * the description in one column, for every command alike. */
void cli_opt_help(FILE *out, const cli_opt *const *tables);
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
void cli_holder_describe(const pglock_holder *e, const struct cli_registry *reg,
                         char *buf, size_t len);

/* Parses a DURATION: "500ms", "30s", "5m", "2h" or plain integer seconds
 * ("30").  Strict: no sign, no spaces, no empty string, and at most
 * CLI_DURATION_MAX_MS (PostgreSQL's own timeouts stop there too), so that
 * sums of durations never overflow.  0 on success, -1 with one line in err. */
#define CLI_DURATION_MAX_MS 2147483647L
int cli_parse_duration(const char *text, long *out_ms, char *err,
                       size_t errlen);
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
const pglock_key *cli_registry_lookup(const cli_registry *reg,
                                      const char *name);
/* The registered name that name most likely misspells (as options and
 * commands, cli_did_you_mean()), or NULL. */
const char *cli_registry_near(const cli_registry *reg, const char *name);
/* The first name registered for key (compared by locktag), or NULL. */
const char *cli_registry_name_of(const cli_registry *reg,
                                 const pglock_key *key);
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
