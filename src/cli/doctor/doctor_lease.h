/* doctor_lease.h — does a lease fit the HA manager's earliest promotion? */
#ifndef PGLOCK_CLI_DOCTOR_LEASE_H
#define PGLOCK_CLI_DOCTOR_LEASE_H

#include <stddef.h>

/* What doctor --promotion-after checks: run's and lead's lease options,
 * as they take them. */
typedef struct doctor_promotion {
    long promotion_ms;  /* the earliest promotion after a silent primary
                           death; -1: not asked */
    long lease_ms;      /* --lease, else run's and lead's default */
    long kill_after_ms; /* --kill-after, -1: its default for the lease */
} doctor_promotion;

/*
 * After a silent primary death (frozen, or gone without closing its
 * sockets) the lock passes at the promotion, which the old server's
 * lease does not bound: the job must be gone before it.  Sets *fits and
 * says why in one sentence in reason; when it does not fit, fix names
 * the longest lease that would.  Returns 0, or -1 with one line in
 * reason when run would refuse the lease itself (a usage error).
 */
int doctor_promotion_check(const doctor_promotion *p, int *fits, char *reason,
                           size_t rlen, char *fix, size_t flen);

#endif
