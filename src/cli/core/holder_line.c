/*
 * A lock's holder or waiter in words, as status, terminate and a busy
 * run name it: who (host, backend pid, user, where from, application)
 * and how long.
 */
#include <stdio.h>
#include <string.h>
#include "cli.h"

void cli_holder_how_long(const pglock_holder *e, char *buf, size_t len)
{
    double upper = e->granted ? e->held_max_s : e->waiting_s;
    double lower = e->granted ? e->held_min_s : -1;
    int exact = !e->granted && e->waiting_source &&
                !strcmp(e->waiting_source, "waitstart");
    if (upper < 0 || (!e->granted && !e->waiting_source)) {
        snprintf(buf, len, "%s", e->hidden ? "hidden" : "unknown");
        return;
    }
    char max[32], min[32];
    cli_format_duration(upper, 0, max, sizeof max);
    if (lower >= 0) {
        /* "min to max", or one of them when they read the same */
        cli_format_duration(lower, 0, min, sizeof min);
        if (strcmp(min, max) != 0)
            snprintf(buf, len, "%s to %s", min, max);
        else
            snprintf(buf, len, "%s", max);
    } else {
        snprintf(buf, len, "%s%s", exact ? "" : "up to ", max);
    }
}

void cli_holder_client(const pglock_holder *e, char *buf, size_t len)
{
    if (e->pid == 0)
        snprintf(buf, len, "prepared transaction");
    else if (e->hidden || !e->has_session)
        snprintf(buf, len, "%s", e->hidden ? "hidden" : "no session");
    else if (e->client_port == -1 || !e->client_addr)
        snprintf(buf, len, "local");
    else if (strchr(e->client_addr, ':'))
        snprintf(buf, len, "[%s]:%d", e->client_addr, e->client_port);
    else
        snprintf(buf, len, "%s:%d", e->client_addr, e->client_port);
}

const char *cli_holder_host(const pglock_holder *e, const cli_registry *reg,
                            char *buf, size_t len)
{
    char host[64];
    if (!cli_app_host(e->application_name, &e->key, reg, host, sizeof host))
        return NULL;
    cli_echo_arg(host, 0, buf, len);
    return buf;
}

void cli_holder_describe(const pglock_holder *e, const cli_registry *reg,
                         char *buf, size_t len)
{
    char app[80], user[80], client[80], how_long[64], host[80];
    cli_echo_arg(e->application_name ? e->application_name : "?", 1, app,
                 sizeof app);
    cli_echo_arg(e->user ? e->user : "?", 0, user, sizeof user);
    cli_holder_client(e, client, sizeof client);
    cli_holder_how_long(e, how_long, sizeof how_long);
    /* The host first: it is what the reader asks. */
    if (cli_holder_host(e, reg, host, sizeof host))
        snprintf(buf, len,
                 "%s (backend pid %d, user %s, client %s, \"%s\", "
                 "%s %s)",
                 host, e->pid, user, client, app,
                 e->granted ? "held" : "waiting", how_long);
    else
        snprintf(buf, len, "backend pid %d (user %s, client %s, \"%s\", %s %s)",
                 e->pid, user, client, app, e->granted ? "held" : "waiting",
                 how_long);
}
