/* "Did you mean ...?" for a misspelt command or long option. */
#include <string.h>
#include "cli.h"

/* Edits between a and b (insert, delete, replace, or swap two neighbours:
 * "rnu" is one from "run"); words longer than 31 bytes are never close. */
static int distance(const char *a, const char *b)
{
    enum { MAX = 32 };
    size_t n = strlen(a), m = strlen(b);
    if (n >= MAX || m >= MAX)
        return MAX;
    int d[MAX][MAX];
    for (size_t i = 0; i <= n; i++)
        d[i][0] = (int)i;
    for (size_t j = 0; j <= m; j++)
        d[0][j] = (int)j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            int best = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            if (d[i - 1][j] + 1 < best)
                best = d[i - 1][j] + 1;
            if (d[i][j - 1] + 1 < best)
                best = d[i][j - 1] + 1;
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] &&
                a[i - 2] == b[j - 1] && d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

const char *cli_did_you_mean(const char *word, const char *const *candidates,
                             size_t n)
{
    /* Close enough to be a slip: two edits at most, and fewer edits than
     * half the word ("ls" is not a misspelt "key"). */
    const char *best = NULL;
    int best_d = 3;
    for (size_t i = 0; i < n; i++) {
        int d = distance(word, candidates[i]);
        if (d < best_d && 2 * (size_t)d < strlen(candidates[i])) {
            best = candidates[i];
            best_d = d;
        }
    }
    return best;
}
