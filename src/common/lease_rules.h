/*
 * The lease arithmetic (pglock(1), LEASES) that `pglock run` and the
 * library's managed hold share: with the server's lease T_s, a heartbeat
 * every T_s/6 and the client's deadline T_c = 2*T_s/3 after the last
 * confirmed heartbeat was sent.  Internal, header-only.
 */
#ifndef PGLOCK_LEASE_RULES_H
#define PGLOCK_LEASE_RULES_H

/* T_c = 2*T_s/3, rounded down without overflowing for any long T_s. */
static inline long lease_client_deadline_ms(long lease_ms)
{
    return lease_ms / 3 * 2 + (lease_ms % 3) * 2 / 3;
}

/* How often the lease is renewed: T_s/6, at least 1 ms. */
static inline long lease_heartbeat_ms(long lease_ms)
{
    return lease_ms / 6 > 0 ? lease_ms / 6 : 1;
}

/* After a heartbeat failed on a session that goes on (a cancel), the next
 * one is sent at once; while they keep failing (an error that persists),
 * one every T_s/60, so that T_c still sees several tries without the
 * client and the server spinning. */
static inline long lease_retry_ms(long lease_ms, int failures)
{
    if (failures <= 1)
        return 0;
    return lease_ms / 60 > 0 ? lease_ms / 60 : 1;
}

/* The margin kept before the server's lease ends, for scheduling,
 * reaping and one round trip: T_s/6. */
static inline long lease_margin_ms(long lease_ms)
{
    return lease_ms / 6;
}

/* What is left to stop the work after a client-side loss notice, before
 * the server can end the silent session: T_s - T_c - margin, which is
 * T_s/6 too (at least 1 ms). */
static inline long lease_stop_budget_ms(long lease_ms)
{
    long budget = lease_ms - lease_client_deadline_ms(lease_ms) -
                  lease_margin_ms(lease_ms);
    return budget > 0 ? budget : 1;
}

#endif
