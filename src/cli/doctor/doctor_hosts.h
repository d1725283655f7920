/* doctor_hosts.h — the hosts of a multi-host conninfo, one by one. */
#ifndef PGLOCK_CLI_DOCTOR_HOSTS_H
#define PGLOCK_CLI_DOCTOR_HOSTS_H

#include <stddef.h>
#include <libpq-fe.h>

#define DOCTOR_MAX_HOSTS 16

typedef struct doctor_host {
    char host[256]; /* as listed: a name, an address or a socket directory */
    char port[32];
    const char *role; /* "primary", "standby" or "unreachable" */
    char error[256];  /* why unreachable, first line of libpq's message */
} doctor_host;

/*
 * For a connection made from a multi-host conninfo ("host=a,b port=1,2",
 * whatever target_session_attrs), connects to each listed host alone
 * (target_session_attrs=any, connect_timeout 3 s unless one was given)
 * and asks pg_is_in_recovery().  Fills out[] and returns the number of
 * hosts listed; 0 or 1 means a single host, and nothing was probed.
 */
int doctor_hosts(PGconn *conn, doctor_host *out, int max);

/* Copies msg's first line into buf (len bytes) as a finding's reason:
 * "unknown error" when it has none. */
void doctor_first_line(char *buf, size_t len, const char *msg);

#endif
