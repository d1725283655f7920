/*
 * pglock key: how a key maps to a bigint or pair, to pg_locks, and to the
 * SQL any client can run to take the same lock.  Needs a server only for
 * the hashtext forms, whose value the server computes.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"
#include "json.h"

typedef struct key_opts {
    cli_common common; /* first: the shared options' fields */
    int sql;
    pglock_mode mode;
    pglock_scope scope;
    const cli_registry *reg;
} key_opts;
CLI_COMMON_FIRST(key_opts);
/* (--shared and --xact set them as ints) */
_Static_assert(sizeof(pglock_mode) == sizeof(int) &&
                   sizeof(pglock_scope) == sizeof(int),
               "enum fields are ints");

static const cli_opt key_opts_table[] = {
    {.type = CLI_OPT_HEADING, .help = "Options:"},
    {.type = CLI_OPT_FLAG,
     .long_name = "sql",
     .field = offsetof(key_opts, sql),
     .help = "also print the SQL that takes the same lock"},
    {.type = CLI_OPT_SET,
     .long_name = "shared",
     .field = offsetof(key_opts, mode),
     .set = PGLOCK_SHARED,
     .help = "the SQL takes a shared lock"},
    {.type = CLI_OPT_SET,
     .long_name = "xact",
     .field = offsetof(key_opts, scope),
     .set = PGLOCK_XACT,
     .help = "the SQL takes a transaction-level lock"},
    {.type = CLI_OPT_END}};

/* A note before the connection options: a heading alone. */
static const cli_opt key_server_note[] = {
    {.type = CLI_OPT_HEADING, .help = "(only hashtext keys need a server)"},
    {.type = CLI_OPT_END}};

static const cli_opt *const key_tables[] = {key_opts_table,  cli_output_heading,
                                            cli_json_opts,   cli_keys_opts,
                                            key_server_note, cli_conn_opts,
                                            cli_help_opts,   NULL};

static void usage(const cli_common *target)
{
    FILE *to = stdout;
    (void)target;
    fputs(
        "pglock key shows how each KEY maps to a bigint or pair, to pg_locks,\n"
        "and to SQL.\n"
        "\n"
        "Usage:\n"
        "  pglock key [OPTION]... KEY...\n"
        "\n"
        "Keys:\n"
        "  123, int:-5              a 64-bit integer\n"
        "  42:9, pair:42:9          a pair (namespace, id) of 32-bit integers\n"
        "  nightly-billing, text:7  a name, hashed by the SHA-256 rule\n"
        "  hashtext:NAME            the server's hashtext(NAME)\n"
        "  hashtextextended:SEED:NAME  the server's hashtextextended(NAME, SEED)\n"
        "  @NAME                    NAME looked up in the registry\n"
        "A key that starts with a digit, '-', '+' or ':' must be an integer or\n"
        "NS:ID; write text:KEY for such a name.  The syntax in full:\n"
        "pglock(1), KEYS, and docs/keys.md.\n"
        "\n",
        to);
    cli_opt_help(to, key_tables);
    fputs("\nExit status: 0 ok, 64 bad key or option, 69 server needed but\n"
          "unavailable.\n"
          "See pglock-key(1).\n",
          to);
}

/* Prints s with control characters escaped, so one key stays one line. */
static void print_escaped(const char *s)
{
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7F)
            printf("\\x%02X", c);
        else
            putchar(c);
    }
}

static const char *kind_words(pglock_key_kind kind)
{
    switch (kind) {
    case PGLOCK_KEY_INT64:
        return "64-bit integer";
    case PGLOCK_KEY_PAIR:
        return "pair (namespace, id)";
    case PGLOCK_KEY_TEXT:
        return "name, SHA-256 rule";
    case PGLOCK_KEY_HASHTEXT:
        return "hashtext(name), computed by the server";
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        return "hashtextextended(name, seed), computed by the server";
    }
    return "unknown";
}

/* The SQL that takes the same lock (pglock_key_sql()), malloc'd; NULL
 * when out of memory. */
static char *key_sql(const pglock_key *key, const key_opts *o)
{
    int n = pglock_key_sql(key, o->mode, o->scope, NULL, 0);
    char *sql = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (sql)
        pglock_key_sql(key, o->mode, o->scope, sql, (size_t)n + 1);
    return sql;
}

/* The key's SQL forms, malloc'd: *sql takes the lock (key_sql()); for a
 * key named by text (SHA-256 rule, hashtext), *bigint takes the same lock
 * by its bigint, the form to type at a psql prompt, else it is NULL (the
 * SQL already is that form).  0, or CLI_EXIT_SOFTWARE having said "out of
 * memory" (nothing to free). */
static int key_sql_forms(const pglock_key *key, const key_opts *o, char **sql,
                         char **bigint)
{
    *sql = key_sql(key, o);
    *bigint = NULL;
    int named = key->kind != PGLOCK_KEY_INT64 && key->kind != PGLOCK_KEY_PAIR;
    if (*sql && named) {
        pglock_key plain;
        pglock_key_int64(&plain, key->id);
        *bigint = key_sql(&plain, o);
    }
    if (!*sql || (named && !*bigint)) {
        free(*sql);
        *sql = NULL; /* nothing left for the caller to use or free */
        return cli_error(CLI_EXIT_SOFTWARE, "out of memory");
    }
    return 0;
}

/* The key's canonical text (id, 64 bytes) and its pg_locks coordinates;
 * 0, or CLI_EXIT_SOFTWARE having said why (a key not yet resolved). */
static int key_coordinates(const pglock_key *key, char *id, uint32_t *classid,
                           uint32_t *objid, int *objsubid)
{
    /* Set on every path: the callers read them when this returns 0, and
     * the analyzer cannot see that cli_error() never does. */
    *classid = *objid = 0;
    *objsubid = 0;
    if (pglock_key_format(key, id, 64) < 0 ||
        pglock_key_locktag(key, classid, objid, objsubid) != PGLOCK_OK)
        return cli_error(CLI_EXIT_SOFTWARE, "cannot show an unresolved key");
    return 0;
}

static int print_key(const char *written, const pglock_key *key,
                     const key_opts *o)
{
    char id[64];
    uint32_t classid, objid;
    int objsubid;
    if (key_coordinates(key, id, &classid, &objid, &objsubid))
        return CLI_EXIT_SOFTWARE;

    printf("%-9s ", "key");
    print_escaped(written);
    putchar('\n');
    printf("%-9s %s\n", "kind", kind_words(key->kind));
    if (key->name && strcmp(key->name, written) != 0) {
        printf("%-9s ", "name");
        print_escaped(key->name);
        putchar('\n');
    }
    if (key->kind == PGLOCK_KEY_HASHTEXTEXTENDED)
        printf("%-9s %lld\n", "seed", (long long)key->seed);
    printf("%-9s %s\n", key->kind == PGLOCK_KEY_PAIR ? "pair" : "bigint", id);
    printf("%-9s classid=%lu objid=%lu objsubid=%d\n", "pg_locks",
           (unsigned long)classid, (unsigned long)objid, objsubid);
    const char *regname = cli_registry_name_of(o->reg, key);
    if (regname) {
        printf("%-9s ", "registry");
        print_escaped(regname);
        printf(" (%s)\n", cli_registry_origin(o->reg));
    }
    if (o->sql) {
        char *sql, *bigint;
        if (key_sql_forms(key, o, &sql, &bigint))
            return CLI_EXIT_SOFTWARE;
        printf("%-9s %s\n", "sql", sql);
        if (bigint)
            printf("%-9s %s\n", "", bigint);
        free(sql);
        free(bigint);
    }
    return 0;
}

static const char *kind_name(pglock_key_kind kind)
{
    switch (kind) {
    case PGLOCK_KEY_INT64:
        return "int64";
    case PGLOCK_KEY_PAIR:
        return "pair";
    case PGLOCK_KEY_TEXT:
        return "text";
    case PGLOCK_KEY_HASHTEXT:
        return "hashtext";
    case PGLOCK_KEY_HASHTEXTEXTENDED:
        return "hashtextextended";
    }
    return "unknown";
}

/* One key as a JSON object.  64-bit values are strings: JSON readers
 * that use doubles would round them. */
static int print_key_json(json_writer *w, const char *written,
                          const pglock_key *key, const key_opts *o)
{
    char id[64], seed[24];
    uint32_t classid, objid;
    int objsubid;
    if (key_coordinates(key, id, &classid, &objid, &objsubid))
        return CLI_EXIT_SOFTWARE;
    json_object_begin(w, NULL);
    json_string(w, "key", written);
    json_string(w, "kind", kind_name(key->kind));
    if (key->name)
        json_string(w, "name", key->name);
    if (key->kind == PGLOCK_KEY_HASHTEXTEXTENDED) {
        snprintf(seed, sizeof seed, "%lld", (long long)key->seed);
        json_string(w, "seed", seed);
    }
    if (key->kind == PGLOCK_KEY_PAIR) {
        json_array_begin(w, "pair");
        json_int(w, NULL, key->ns);
        json_int(w, NULL, key->nsid);
        json_array_end(w);
    } else {
        json_string(w, "bigint", id);
    }
    json_int(w, "classid", classid);
    json_int(w, "objid", objid);
    json_int(w, "objsubid", objsubid);
    const char *regname = cli_registry_name_of(o->reg, key);
    if (regname)
        json_string(w, "registry", regname);
    if (o->sql) {
        char *sql, *bigint;
        if (key_sql_forms(key, o, &sql, &bigint))
            return CLI_EXIT_SOFTWARE;
        json_string(w, "sql", sql);
        if (bigint)
            json_string(w, "sql_bigint", bigint);
        free(sql);
        free(bigint);
    }
    json_object_end(w);
    return 0;
}

/* Computes the legacy keys' values on the server (one connection). */
static int resolve_all(pglock_key *keys, int n, const cli_conn *conn)
{
    PGconn *pg = NULL;
    int rc = 0;
    for (int i = 0; i < n && !rc; i++) {
        uint32_t classid, objid;
        int objsubid;
        if (pglock_key_locktag(&keys[i], &classid, &objid, &objsubid) == 0)
            continue; /* known without the server */
        if (!pg) {
            pglock_error err = {0};
            pg = cli_connect(conn, "pglock key", NULL, &err);
            if (!pg) {
                rc = cli_connect_error(&err, "hashtext keys need the server");
                break;
            }
        }
        pglock_error err = {0};
        if (pglock_key_resolve(&keys[i], pg, &err) != PGLOCK_OK)
            rc = cli_error(CLI_EXIT_UNAVAILABLE, "%s", err.message);
    }
    PQfinish(pg);
    return rc;
}

static const cli_opt_command key_command = {"key", key_tables, usage, 0};

int cmd_key(int argc, char **argv)
{
    key_opts o = {.mode = PGLOCK_EXCLUSIVE, .scope = PGLOCK_SESSION};
    /* "-5" would be an unknown option: say what was meant (unless help
     * is asked for, which cli_opt_parse() answers first). */
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (argv[i][0] == '-' && argv[i][1] >= '0' && argv[i][1] <= '9' &&
            !cli_opt_help_asked(argc, argv))
            return cli_usage_error("key",
                                   "unrecognized option \"%s\" (for a "
                                   "negative key write int:-N)",
                                   argv[i]);
    int operand;
    int rc = cli_opt_parse(&key_command, argc, argv, &o.common, &operand);
    if (rc != CLI_GO_ON)
        return rc;
    if (operand >= argc)
        return cli_usage_error("key", "no key given");

    cli_registry *reg = NULL;
    char err[512];
    if (cli_registry_load(&reg, o.common.keys_file, err, sizeof err) < 0)
        return cli_error(CLI_EXIT_USAGE, "%s", err);
    o.reg = reg;

    int n = argc - operand;
    rc = 0;
    pglock_key *keys = calloc((size_t)n, sizeof *keys);
    if (!keys) {
        cli_registry_free(reg);
        return cli_error(CLI_EXIT_SOFTWARE, "out of memory");
    }
    /* Every key is checked before anything is printed or connected. */
    for (int i = 0; i < n && !rc; i++)
        if (cli_parse_key(argv[operand + i], reg, &keys[i], err, sizeof err))
            rc = cli_error(CLI_EXIT_USAGE, "%s", err);
    if (!rc)
        rc = resolve_all(keys, n, &o.common.conn);
    if (!rc && o.common.json) {
        json_writer w;
        json_init(&w, stdout);
        json_array_begin(&w, NULL);
        for (int i = 0; i < n && !rc; i++)
            rc = print_key_json(&w, argv[operand + i], &keys[i], &o);
        json_array_end(&w);
        json_end(&w);
    }
    for (int i = 0; i < n && !rc && !o.common.json; i++) {
        if (i)
            putchar('\n');
        rc = print_key(argv[operand + i], &keys[i], &o);
    }
    free(keys);
    cli_registry_free(reg);
    if (fflush(stdout) != 0 || ferror(stdout))
        return rc ? rc : cli_error(CLI_EXIT_SOFTWARE, "could not write output");
    return rc;
}
