/* doctor_tls.h — the connection's TLS state, as doctor reports it. */
#ifndef PGLOCK_CLI_DOCTOR_TLS_H
#define PGLOCK_CLI_DOCTOR_TLS_H

#include <stddef.h>

#include <libpq-fe.h>

/*
 * Describes conn's TLS in one sentence into buf: whether it is in use,
 * its protocol and cipher, and how far the server was verified, which
 * follows from the sslmode libpq connected with (verify-full: the
 * certificate and the host name; verify-ca: the certificate only;
 * require, prefer: nothing, libpq checked no certificate).
 */
void doctor_tls(PGconn *conn, char *buf, size_t len);

#endif
