/*
 * Errors: codes turned into words, from the one list in pglock.h.  A
 * client's copy of its last error is client_state.c's; the pglock_error
 * writers and the SQLSTATE mapping are src/common/error_text.c's, which
 * the command line shares.
 */
#include "internal.h"

/* ------------------------------------------------------ codes to words */

/* From the one list in pglock.h. */
#define ERROR_ROW(name, value, text) {PGLOCK_##name, "PGLOCK_" #name, text},
static const struct {
    int code;
    const char *name;
    const char *text;
} error_table[] = {PGLOCK_ERRNO_MAP(ERROR_ROW)};
#undef ERROR_ROW

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
