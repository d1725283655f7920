/*
 * bench_pairs — two commands timed in turn, run by run: A then B, then B
 * then A, and so on.  A machine that drifts (another process, a CPU's
 * clock, the server's caches) then weighs on both alike, where a tool that
 * runs all of A's runs and then all of B's (hyperfine) shows the drift as
 * a difference between them.
 *
 *   bench_pairs RUNS WARMUP NAME_A NAME_B -- A [ARG...] -- B [ARG...]
 *
 * Each run is a fork, exec and wait, timed from before the fork to after
 * the wait, like hyperfine -N (output to /dev/null); both commands must
 * exit 0.  Prints one
 * markdown table row: the two medians (min–max) in ms, the ratio of the
 * medians, and the median (10th–90th percentile) of the pairs' ratios B/A.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "bench.h"

static double run_once(char **argv)
{
    int64_t t0 = bench_now_ns();
    pid_t pid = fork();
    if (pid < 0)
        bench_die("fork: %s", strerror(errno));
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);
        if (null >= 0)
            dup2(null, STDOUT_FILENO);
        execvp(argv[0], argv);
        _exit(127);
    }
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            bench_die("waitpid: %s", strerror(errno));
    double ms = (double)(bench_now_ns() - t0) / 1e6;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        bench_die("%s exited with status %d", argv[0],
                  WIFEXITED(status) ? WEXITSTATUS(status)
                                    : 128 + WTERMSIG(status));
    return ms;
}

int main(int argc, char **argv)
{
    if (argc < 9 || strcmp(argv[5], "--") != 0)
        bench_die(
            "usage: bench_pairs RUNS WARMUP NAME_A NAME_B -- A [ARG...] -- B [ARG...]");
    int runs = atoi(argv[1]), warmup = atoi(argv[2]);
    const char *name_a = argv[3], *name_b = argv[4];
    char **a = argv + 6, **b = NULL;
    for (char **p = a; *p; p++)
        if (strcmp(*p, "--") == 0) {
            *p = NULL;
            b = p + 1;
            break;
        }
    if (runs < 1 || warmup < 0 || !b || !*b || !*a)
        bench_die(
            "usage: bench_pairs RUNS WARMUP NAME_A NAME_B -- A [ARG...] -- B [ARG...]");

    for (int i = 0; i < warmup; i++) {
        run_once(a);
        run_once(b);
    }
    double *ta = calloc((size_t)runs, sizeof *ta),
           *tb = calloc((size_t)runs, sizeof *tb),
           *ratio = calloc((size_t)runs, sizeof *ratio);
    if (!ta || !tb || !ratio)
        bench_die("out of memory");
    for (int i = 0; i < runs; i++) {
        if (i % 2 == 0) {
            ta[i] = run_once(a);
            tb[i] = run_once(b);
        } else {
            tb[i] = run_once(b);
            ta[i] = run_once(a);
        }
        ratio[i] = tb[i] / ta[i];
    }
    char sa[64], sb[64];
    bench_spread(sa, sizeof sa, "%.2f", ta, (size_t)runs);
    bench_spread(sb, sizeof sb, "%.2f", tb, (size_t)runs);
    double ma = bench_quantile(ta, (size_t)runs, 0.5),
           mb = bench_quantile(tb, (size_t)runs, 0.5);
    double r50 = bench_quantile(ratio, (size_t)runs, 0.5);
    double r10 = bench_quantile(ratio, (size_t)runs, 0.1);
    double r90 = bench_quantile(ratio, (size_t)runs, 0.9);
    printf("| %s ÷ %s, %d pairs | %s | %s | %.2f × | %.2f × (%.2f–%.2f) |\n",
           name_b, name_a, runs, sa, sb, mb / ma, r50, r10, r90);
    free(ta);
    free(tb);
    free(ratio);
    return 0;
}
