/* Error codes to words. */
#include "pglock.h"

static const struct {
    int code;
    const char *name;
    const char *text;
} error_table[] = {
    {PGLOCK_OK, "PGLOCK_OK", "success"},
    {PGLOCK_EBUSY, "PGLOCK_EBUSY", "lock is held by another session"},
    {PGLOCK_ETIMEDOUT, "PGLOCK_ETIMEDOUT", "timed out waiting for the lock"},
    {PGLOCK_EINTR, "PGLOCK_EINTR", "wait for the lock was interrupted"},
    {PGLOCK_ENOTHELD, "PGLOCK_ENOTHELD", "lock is not held by this client"},
    {PGLOCK_ECONNLOST, "PGLOCK_ECONNLOST", "connection to the server was lost"},
    {PGLOCK_ECONNECT, "PGLOCK_ECONNECT", "could not connect to the server"},
    {PGLOCK_EPOOLER, "PGLOCK_EPOOLER", "a connection pooler is in the path"},
    {PGLOCK_ESTANDBY, "PGLOCK_ESTANDBY", "server is a standby"},
    {PGLOCK_ELOCKTABLE, "PGLOCK_ELOCKTABLE", "server's lock table is full"},
    {PGLOCK_EINVAL, "PGLOCK_EINVAL", "invalid argument"},
    {PGLOCK_ENOMEM, "PGLOCK_ENOMEM", "out of memory"},
    {PGLOCK_ESERVER, "PGLOCK_ESERVER", "server reported an error"},
    {PGLOCK_ESTATE, "PGLOCK_ESTATE", "operation not allowed in this state"},
    {PGLOCK_EVERSION, "PGLOCK_EVERSION", "server version is too old"},
    {PGLOCK_EAGAIN, "PGLOCK_EAGAIN", "operation still in progress"},
};

static int find(int code)
{
    for (unsigned i = 0; i < sizeof error_table / sizeof error_table[0]; i++)
        if (error_table[i].code == code)
            return (int)i;
    return -1;
}

const char *pglock_strerror(int code)
{
    int i = find(code);
    return i < 0 ? "unknown error" : error_table[i].text;
}

const char *pglock_err_name(int code)
{
    int i = find(code);
    return i < 0 ? "PGLOCK_EUNKNOWN" : error_table[i].name;
}
