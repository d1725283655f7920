/* The library's clock: monotonic, and counting through suspend. */
#include <time.h>
#include "pglock.h"

int64_t pglock_now_ms(void)
{
    struct timespec ts;
#ifdef CLOCK_BOOTTIME
    /* A lease deadline must keep counting while the host sleeps: the
     * server's idle_session_timeout does. */
    if (clock_gettime(CLOCK_BOOTTIME, &ts) != 0)
#endif
        clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
