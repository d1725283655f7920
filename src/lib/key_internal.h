/* Internals shared by key.c and key_parse.c (never installed). */
#ifndef PGLOCK_KEY_INTERNAL_H
#define PGLOCK_KEY_INTERNAL_H

#include <stddef.h>

/* 1 if the len bytes at s are strict UTF-8: shortest forms only, no
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no NUL byte. */
int pglock__utf8_valid(const char *s, size_t len);

#endif
