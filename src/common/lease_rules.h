/*
 * The lease arithmetic, written once: the library's managed hold (hold.c),
 * the lock connection's server-side settings (settings.c) and `pglock run`
 * and `lead` (run_lease.c) all take it from here.  Internal, header-only.
 * The docs explain it once, in pglock(1), LEASES.
 *
 * With the server's lease T_s (idle_session_timeout, or
 * idle_in_transaction_session_timeout with the xact lifetime):
 *   heartbeat          T_s/6      how often the lease is confirmed
 *   client deadline    T_c = 2T_s/3  after the last confirmed heartbeat
 *                                 was sent, the lease counts as lost
 *   stop budget        T_s/6      to stop the work after that (the
 *                                 CLI's default kill-after, at most 10 s)
 *   margin             T_s/6      scheduling, reaping, one round trip
 * so that T_c + stop + margin <= T_s: the work has stopped before the
 * server may free the lock.  A longer stop budget, up to T_s/2, brings
 * T_c forward (lease_client_deadline_for() below).  Without a lease T_s
 * is dead_peer_ms (lease_of()).  And no kernel may end a holder's session
 * before T_s (lease_tcp_*() below).
 */
#ifndef PGLOCK_LEASE_RULES_H
#define PGLOCK_LEASE_RULES_H

#include <stdint.h>

/* T_s of a lock connection: its lease, or without one its dead_peer_ms.
 * The same rule holds either way (the heartbeat, T_c, the stop budget,
 * and no kernel or server timeout ending a holder's session before T_s):
 * a program that sets no lease gets dead_peer_ms as its T_s, so that its
 * managed hold's stop budget is real. */
static inline long lease_of(long lease_ms, long dead_peer_ms)
{
    return lease_ms > 0 ? lease_ms : dead_peer_ms;
}

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
 * T_s/6 too (at least 1 ms): the default stop budget. */
static inline long lease_stop_budget_ms(long lease_ms)
{
    long budget = lease_ms - lease_client_deadline_ms(lease_ms) -
                  lease_margin_ms(lease_ms);
    return budget > 0 ? budget : 1;
}

/*
 * A longer stop budget (the CLI's --kill-after, the hold's
 * stop_budget_ms): up to T_s/2, paid for by an earlier client deadline,
 *   T_c = T_s - stop - margin   (never later than 2T_s/3),
 * so that T_c + stop + margin <= T_s still holds; the heartbeat then
 * comes every T_c/4 (when that is shorter than T_s/6), so that T_c still
 * sees four heartbeats, and the retries after a failed one (T_s/60) many
 * more.  At the cap, T_c = T_s/3 and a heartbeat every T_s/12.  0 (or
 * anything up to T_s/6) keeps the defaults.
 */
static inline long lease_stop_budget_max_ms(long lease_ms)
{
    return lease_ms / 2;
}

/* The CLI's default kill-after: the default stop budget, at most 10 s (a
 * job is not left running on after a loss longer than that unasked). */
static inline long lease_default_kill_after_ms(long lease_ms)
{
    long budget = lease_stop_budget_ms(lease_ms);
    return budget < 10000L ? budget : 10000L;
}

static inline long lease_client_deadline_for(long lease_ms, long stop_ms)
{
    long tc = lease_client_deadline_ms(lease_ms);
    long room = lease_ms - stop_ms - lease_margin_ms(lease_ms);
    return stop_ms > 0 && room < tc ? room : tc;
}

static inline long lease_heartbeat_for(long lease_ms, long stop_ms)
{
    long tc = lease_client_deadline_for(lease_ms, stop_ms);
    long beat = lease_heartbeat_ms(lease_ms);
    if (tc < lease_client_deadline_ms(lease_ms) && tc / 4 < beat)
        beat = tc / 4 > 0 ? tc / 4 : 1;
    return beat;
}

/* "Confirmed until": the lease counts as lost once this passes with no
 * later heartbeat confirmed; at is when the last confirmed one was sent
 * (or, for a bound counted from a fresh start, now). */
static inline int64_t lease_confirmed_until(int64_t at, long deadline_ms)
{
    return at + deadline_ms;
}

/* "The work must be gone by", after a client-side loss. */
static inline int64_t lease_stop_by(int64_t confirmed_until, long stop_ms)
{
    return confirmed_until + stop_ms;
}

/* Whether a step bound by "confirmed until" has less than the margin
 * left at now: too little to count on it, so it takes a bound of its own. */
static inline int lease_too_close(int64_t confirmed_until, int64_t now,
                                  long margin_ms)
{
    return confirmed_until - now < margin_ms;
}

/* How long after the last confirmed heartbeat was sent the work may
 * still run, plus the margin: T_c + the stop budget + margin, never more
 * than T_s.  Nobody else may be granted the lock sooner: on one server
 * T_s guarantees it; behind an HA manager the earliest promotion after a
 * silent primary death must not come sooner either (pglock doctor
 * --promotion-after, docs/guarantees.md). */
static inline long lease_work_bound_ms(long lease_ms, long stop_ms)
{
    return lease_client_deadline_for(lease_ms, stop_ms) + stop_ms +
           lease_margin_ms(lease_ms);
}

/* The stop budget in effect: the one asked for, else (0) T_s/6. */
static inline long lease_stop_budget_for(long lease_ms, long stop_ms)
{
    return stop_ms > 0 ? stop_ms : lease_stop_budget_ms(lease_ms);
}

/*
 * The server-side dead-peer detection of a holder's session, which may
 * end it only after T_s, never before: the client stops its work by T_c +
 * the stop budget after the last confirmed heartbeat was sent, which is
 * the margin before T_s, and the server must not free the lock inside
 * that window: the job may still run there (a partitioned holder's
 * server hears nothing, yet the job stops only by T_c + the stop budget).
 *
 * - tcp_user_timeout = T_s (ms).  Linux ends a connection whose data
 *   stays unacknowledged that long, and, once keepalive probes went
 *   unanswered, one that has received nothing for that long.  Both clocks
 *   start no earlier than the last heartbeat the client saw confirmed
 *   arrived, so no earlier than it was sent: the end comes at T_s after
 *   it or later.
 * - Keepalives idle T_s/3, then probes T_s/9 apart, as many as make
 *   idle + count * interval >= T_s (whole seconds, rounded up): where
 *   tcp_user_timeout does not exist the probe count decides, no earlier.
 */
static inline long lease_ceil_div(long a, long b)
{
    return a / b + (a % b != 0);
}

static inline long lease_tcp_user_timeout_ms(long lease_ms)
{
    return lease_ms;
}

static inline long lease_keepalive_idle_s(long lease_ms)
{
    return lease_ceil_div(lease_ms, 3000);
}

static inline long lease_keepalive_interval_s(long lease_ms)
{
    return lease_ceil_div(lease_ms, 9000);
}

static inline long lease_keepalive_count(long lease_ms)
{
    long idle_ms = lease_keepalive_idle_s(lease_ms) * 1000;
    if (lease_ms <= idle_ms)
        return 1;
    return lease_ceil_div(lease_ms - idle_ms,
                          lease_keepalive_interval_s(lease_ms) * 1000);
}

/* The server's check of a waiter's socket (client_connection_check_
 * interval): T_s/3, at least 1 s, so that a dead waiter's wait ends soon
 * after the kernels gave up on it. */
static inline long lease_check_interval_ms(long lease_ms)
{
    return lease_ms / 3 < 1000 ? 1000 : lease_ms / 3;
}

/* A wait for a lock goes in slices of T_s, each ended by the server's
 * answer: the lock, or lock_timeout's error at the slice's end.  A server
 * whose processes stopped while its kernel still answers TCP (a frozen
 * primary: keepalives and ACKs keep coming) sends nothing else, so no
 * socket error ends a wait on it; an unanswered slice does (its client
 * deadline, then the cancel's bound), about T_s after the server fell
 * silent, as keepalives end a wait on a dead network. */
static inline long lease_wait_slice_ms(long lease_ms)
{
    return lease_ms;
}

/* An acquisition whose wait took longer than T_s/8 is confirmed at once
 * by a heartbeat, which may take at most T_s/2 (else the lock is given
 * up): the lease then counts from a fresh moment, not from the send of
 * the wait, long before the server's idle clock started. */
static inline int lease_wait_needs_confirm(long lease_ms, long waited_ms)
{
    return waited_ms > lease_ms / 8;
}

static inline long lease_confirm_timeout_ms(long lease_ms)
{
    return lease_ms / 2;
}

/* How long a reconnect may hang on a blackholed host: a third of the
 * lease, in libpq's whole seconds, at least 2 (libpq takes 1 as 2). */
static inline long lease_connect_timeout_s(long lease_ms)
{
    return lease_ms / 3000 < 2 ? 2 : lease_ms / 3000;
}

#endif
