/*
 * cli_opt_parse(): every command's options, read as its tables declare
 * them (cli.h), into the fields they name.  The scanning itself is
 * getopt_long()'s; an option is known by its entry, never by a number of
 * its own: getopt_long() is given each entry's index.
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli.h"

/* The most options one command takes, its shared ones included. */
#define MAX_OPTS 64
/* getopt_long() returns a long option's index past every char. */
#define FIRST_INDEX 256

typedef struct parser {
    const cli_opt_command *cmd;
    int argc;
    char **argv;
    const cli_opt *entries[MAX_OPTS]; /* the options, by index */
    struct option longopts[MAX_OPTS + 1];
    char shorts[2 * MAX_OPTS + 3];
    int at; /* optind before the last getopt_long() */
} parser;

/* Makes the next getopt_long() start afresh: main or a test may have used
 * getopt before. */
static void getopt_reset(void)
{
#ifdef __GLIBC__
    optind = 0; /* glibc: 0 also resets its scanning state */
#else
    optind = 1;
#endif
    opterr = 0;
}

/* 0, or -1 if the tables hold more than MAX_OPTS options. */
static int parser_init(parser *p, const cli_opt_command *cmd, int argc,
                       char **argv)
{
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->argc = argc;
    p->argv = argv;
    size_t n = 0, ns = 0;
    /* "+": stop at the first operand; ":": a missing value is ':', not
     * '?'. */
    if (cmd->flags & CLI_OPT_STOP_AT_OPERAND)
        p->shorts[ns++] = '+';
    p->shorts[ns++] = ':';
    for (const cli_opt *const *t = cmd->tables; *t; t++)
        for (const cli_opt *o = *t; o->type != CLI_OPT_END; o++) {
            if (o->type == CLI_OPT_HEADING)
                continue;
            if (n == MAX_OPTS)
                return -1;
            p->entries[n] = o;
            p->longopts[n] = (struct option){o->long_name,
                                             !o->value_name ? no_argument
                                             : o->optional  ? optional_argument
                                                            : required_argument,
                                             NULL, FIRST_INDEX + (int)n};
            n++;
            /* -? is left out of shorts: getopt then refuses it with
             * optopt '?', which tells it apart from other refusals. */
            if (o->short_name && o->short_name != '?') {
                p->shorts[ns++] = o->short_name;
                if (o->value_name)
                    p->shorts[ns++] = ':';
            }
        }
    getopt_reset();
    return 0;
}

/* The argument getopt_long() was reading when it refused: optind has
 * moved past it once its last character was read, not before ("-55"
 * stops at its first '5').  In getopt_long()'s permuting mode the
 * operands skipped on the way to it lie between p->at and optind, and
 * are no options. */
static const char *refused_arg(const parser *p)
{
    const char *before = p->argv[optind - 1];
    if (optind >= p->argc || (optind > p->at && before[0] == '-' && before[1]))
        return before;
    return p->argv[optind];
}

/* 1 if s is a negative integer as a user would write a key, "-5". */
static int negative_integer(const char *s)
{
    if (s[0] != '-' || !s[1])
        return 0;
    return strspn(s + 1, "0123456789") == strlen(s + 1);
}

/* The long name that word (an unknown --word[=VALUE]) most likely
 * misspells, or NULL. */
static const char *near_long_name(const parser *p, const char *arg)
{
    const char *names[MAX_OPTS];
    size_t n = 0;
    for (; p->longopts[n].name; n++)
        names[n] = p->longopts[n].name;
    char word[64];
    snprintf(word, sizeof word, "%.*s", (int)strcspn(arg + 2, "="), arg + 2);
    return cli_did_you_mean(word, names, n);
}

/* Prints the usage error for what getopt_long() refused (c: '?' or ':');
 * returns CLI_EXIT_USAGE. */
static cli_step refused(const parser *p, int c)
{
    const char *command = p->cmd->name;
    const char *arg = refused_arg(p);
    int is_long = strncmp(arg, "--", 2) == 0;
    char shown[8];
    snprintf(shown, sizeof shown, "-%c", optopt);
    const char *name = is_long ? arg : shown;
    if (c == ':')
        return cli_usage_error(command, "option \"%s\" needs a value", name);
    /* A long option that takes no value, given one, has optopt set. */
    if (is_long && optopt && strchr(arg, '='))
        return cli_usage_error(command, "option \"%s\" takes no value", arg);
    const char *near = is_long ? near_long_name(p, arg) : NULL;
    cli_error(CLI_EXIT_USAGE, "unrecognized option \"%s\"", name);
    if (near)
        cli_hint("Did you mean \"--%s\"?", near);
    else if (!is_long && (p->cmd->flags & CLI_OPT_KEY_OPERANDS) &&
             optopt >= '0' && optopt <= '9')
        /* a negative key, which no option parser can tell from options */
        cli_hint("A negative key is written int:%s.",
                 negative_integer(arg) ? arg : "-N");
    return cli_try_help(command);
}

/* The entry of what getopt_long() returned: a long option's index, or
 * the option whose letter it is. */
static const cli_opt *entry_of(const parser *p, int c)
{
    if (c >= FIRST_INDEX)
        return p->entries[c - FIRST_INDEX];
    for (int i = 0; p->entries[i]; i++)
        if (p->entries[i]->short_name == c)
            return p->entries[i];
    return NULL;
}

/* CLI_OPT_INT: decimal digits only (no sign, no space), o->min to
 * o->max. */
static cli_step read_int(const char *command, const cli_opt *o,
                         const char *value, int *out)
{
    size_t len = strlen(value);
    long v = len && len <= 18 && strspn(value, "0123456789") == len
                 ? strtol(value, NULL, 10)
                 : -1;
    if (v < o->min || v > o->max)
        return cli_usage_error(command,
                               "invalid value for --%s: \"%s\" (expected "
                               "%ld to %ld)",
                               o->long_name, value, o->min, o->max);
    *out = (int)v;
    return CLI_GO_ON;
}

/* CLI_OPT_CHOICE: the value of the word given, else the error that lists
 * them ("expected session, xact or auto"). */
static cli_step read_choice(const char *command, const cli_opt *o,
                            const char *value, int *out)
{
    char words[256] = "";
    size_t used = 0, n = 0;
    for (const cli_opt_choice *c = o->choices; c->word; c++, n++)
        if (strcmp(value, c->word) == 0) {
            *out = c->value;
            return CLI_GO_ON;
        }
    for (size_t i = 0; i < n && used < sizeof words; i++)
        used += (size_t)snprintf(words + used, sizeof words - used, "%s%s",
                                 i == 0       ? ""
                                 : i == n - 1 ? " or "
                                              : ", ",
                                 o->choices[i].word);
    return cli_usage_error(command,
                           "invalid value for --%s: \"%s\" (expected %s)",
                           o->long_name, value, words);
}

cli_step cli_opt_read_duration(const char *command, const cli_opt *o,
                               const char *value, long *out_ms)
{
    char err[256];
    if (cli_parse_duration(value, out_ms, err, sizeof err) < 0)
        return cli_usage_error(command, "invalid value for --%s: %s",
                               o->long_name, err);
    return CLI_GO_ON;
}

/* What option o does with value (NULL: none), into target.  CLI_GO_ON,
 * else the exit status. */
static cli_step apply(const parser *p, const cli_opt *o, cli_common *target,
                      const char *value)
{
    const char *command = p->cmd->name;
    void *field = cli_opt_field(o, target);
    switch (o->type) {
    case CLI_OPT_FLAG:
        *(int *)field = 1;
        return CLI_GO_ON;
    case CLI_OPT_SET:
        *(int *)field = o->set;
        return CLI_GO_ON;
    case CLI_OPT_COUNT:
        ++*(int *)field;
        return CLI_GO_ON;
    case CLI_OPT_STRING:
        *(const char **)field = value;
        return CLI_GO_ON;
    case CLI_OPT_DURATION:
        return cli_opt_read_duration(command, o, value, field);
    case CLI_OPT_INT:
        return read_int(command, o, value, field);
    case CLI_OPT_CHOICE:
        return read_choice(command, o, value, field);
    case CLI_OPT_CALL:
        return o->call(command, o, target, value);
    case CLI_OPT_VERSION:
        cli_print_version();
        return 0;
    case CLI_OPT_HELP:
        p->cmd->print_help(target);
        return 0;
    default:
        return cli_error(CLI_EXIT_SOFTWARE, "internal error: option --%s",
                         o->long_name);
    }
}

int cli_opt_help_asked(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
        if (!strcmp(argv[i], "-?") || !strcmp(argv[i], "--help"))
            return 1;
    return 0;
}

cli_step cli_opt_parse(const cli_opt_command *cmd, int argc, char **argv,
                       cli_common *target, int *operand)
{
    if (!(cmd->flags & CLI_OPT_STOP_AT_OPERAND) &&
        cli_opt_help_asked(argc, argv)) {
        cmd->print_help(target);
        return 0;
    }
    parser p;
    if (parser_init(&p, cmd, argc, argv) < 0)
        return cli_error(CLI_EXIT_SOFTWARE, "too many options");
    for (;;) {
        p.at = optind > 0 ? optind : 1; /* glibc's 0: start again at 1 */
        int c = getopt_long(argc, argv, p.shorts, p.longopts, NULL);
        if (c == -1)
            break;
        const cli_opt *o = c == '?' && optopt == '?' ? entry_of(&p, '?')
                           : c == '?' || c == ':'    ? NULL
                                                     : entry_of(&p, c);
        if (!o)
            return refused(&p, c);
        cli_step step = apply(&p, o, target, optarg);
        if (step != CLI_GO_ON)
            return step;
    }
    *operand = optind;
    return CLI_GO_ON;
}
