/*
 * Why a step of `pglock run` or `pglock lead` failed, returned to its
 * caller in a run_error of the caller's: written once, where the failure
 * is known, and read where it is said.
 */
#include <stdarg.h>
#include <stdio.h>
#include "run.h"

int run_error_set(run_error *err, int rc, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
    err->sqlstate[0] = '\0';
    return rc;
}

int run_error_of(run_error *err, int rc, const pglock_client *client)
{
    snprintf(err->message, sizeof err->message, "%s",
             client ? pglock_client_error(client) : pglock_strerror(rc));
    snprintf(err->sqlstate, sizeof err->sqlstate, "%s",
             client ? pglock_client_sqlstate(client) : "");
    return rc;
}
