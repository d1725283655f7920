/*
 * Driving the library's managed hold in loop mode from a poll() loop:
 * the one driver of the job's lease (run_supervisor.c) and of the slot
 * gate's (run_slots_wait.c), which differ only in what a loss means to
 * them.  A step never blocks; it is taken when the hold asked for it and
 * whenever the hold's socket speaks (a heartbeat's answer, the server's
 * close), so that a loss is seen at once.
 */
#include <stdint.h>
#include "run.h"

run_drive run_drive_start(pglock_hold *hold)
{
    return (run_drive){.hold = hold, .step_at = hold ? 0 : INT64_MAX};
}

run_step run_drive_step(run_drive *d, int64_t now)
{
    if (now < d->step_at)
        return RUN_STEP_NOT_DUE;
    long t;
    if (pglock_hold_step(d->hold, &t) != 0) {
        d->step_at = INT64_MAX; /* lost: no step will help */
        return RUN_STEP_LOST;
    }
    d->step_at = now + (t > 0 ? t : 1);
    return RUN_STEP_TAKEN;
}

int64_t run_drive_due(const run_drive *d)
{
    return d->step_at;
}

int run_drive_fd(const run_drive *d)
{
    return d->step_at == INT64_MAX ? -1 : pglock_hold_fd(d->hold);
}

void run_drive_heard(run_drive *d)
{
    if (d->step_at != INT64_MAX)
        d->step_at = 0;
}
