/*
 * The database names of one pglock_holders_get() answer: every entry of
 * one database points at one string of that answer, so equal pointers
 * are the whole test for most pairs; a missing name (NULL) sorts as "".
 * For the list's order (holders.c) and `status`'s grouping (cmd_status.c).
 * Internal, header-only.
 */
#ifndef PGLOCK_DATABASE_NAME_H
#define PGLOCK_DATABASE_NAME_H

#include <string.h>

static inline int database_name_cmp(const char *a, const char *b)
{
    return a == b ? 0 : strcmp(a ? a : "", b ? b : "");
}

#endif
