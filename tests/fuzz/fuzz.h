/* fuzz.h — what the libFuzzer targets share. */
#ifndef PGLOCK_FUZZ_H
#define PGLOCK_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

/* Aborts (so that libFuzzer keeps the input) when an invariant fails. */
#define CHECK(cond) \
    do { \
        if (!(cond)) { \
            fprintf(stderr, "invariant failed: %s (line %d)\n", #cond, \
                    __LINE__); \
            abort(); \
        } \
    } while (0)

#endif
