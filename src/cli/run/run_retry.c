/*
 * Waiting between reconnects, for `pglock lead` (after a loss) and
 * `pglock run` (a connection lost while waiting): a jittered backoff, and
 * a pause that a stop signal ends at once.
 */
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>
#include "run.h"

int run_pause_ms(long ms)
{
    int64_t until = pglock_now_ms() + ms;
    for (;;) {
        if (run_stop_signal())
            return run_stop_signal();
        int64_t left = until - pglock_now_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {run_event_fd(), POLLIN, 0};
        if (poll(&p, 1, (int)left) > 0) {
            unsigned char buf[64];
            while (read(run_event_fd(), buf, sizeof buf) > 0) {
            }
        }
    }
}

void run_backoff_seed(void)
{
    srandom((unsigned)(getpid() ^ (unsigned)pglock_now_ms()));
}

long run_next_backoff(long *base)
{
    long b = *base;
    *base = b * 2 > RUN_BACKOFF_MAX_MS ? RUN_BACKOFF_MAX_MS : b * 2;
    return b / 2 + (long)(random() % (b / 2 + 1));
}
