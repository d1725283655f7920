/*
 * The lease against promotion (docs/guarantees.md, "Behind an HA
 * manager"): the job is stopped by T_c + kill-after after the last
 * confirmed heartbeat was sent, which is no later than the primary's
 * death; a standby promoted P after that death grants the lock at once.
 * So T_c + kill-after + margin <= P, the same sum that lease_rules.h
 * keeps within T_s on one server (with the default kill-after it is
 * T_s itself, so the lease must not exceed P).  The lease is derived as
 * run derives it, so doctor accepts exactly the leases run accepts.
 */
#include <stdio.h>
#include "doctor_lease.h"
#include "lease_rules.h"
#include "run.h"

/* The bound of lease_ms with kill_after_ms as run takes it, or -1 when
 * run would refuse the pair. */
static long bound_of(long lease_ms, long kill_after_ms, run_lease *out)
{
    char err[200];
    if (run_lease_derive(out, lease_ms, kill_after_ms, err, sizeof err) < 0)
        return -1;
    return lease_work_bound_ms(out->server_ms, out->kill_after_ms);
}

/* The longest lease, in whole seconds when it is one or more, whose bound
 * fits within promotion_ms with this kill-after; 0 if none.  The bound
 * grows with the lease and is at least half of it, so the answer is below
 * 2P + 1 s; leases run refuses (a kill-after above half) are skipped. */
static long longest_fitting(long promotion_ms, long kill_after_ms)
{
    run_lease l;
    long lo = RUN_LEASE_MIN_MS, hi = 2 * promotion_ms + 1000, best = 0;
    if (kill_after_ms > 0 && 2 * kill_after_ms > lo)
        lo = 2 * kill_after_ms;
    while (lo <= hi) {
        long mid = lo + (hi - lo) / 2;
        long b = bound_of(mid, kill_after_ms, &l);
        if (b >= 0 && b <= promotion_ms) {
            best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (best >= 1000 && bound_of(best / 1000 * 1000, kill_after_ms, &l) >= 0)
        best = best / 1000 * 1000;
    return best;
}

int doctor_promotion_check(const doctor_promotion *p, int *fits, char *reason,
                           size_t rlen, char *fix, size_t flen)
{
    run_lease l;
    char lease[32], kill[32], tc[32], margin[32], promo[32], bound[32];
    if (run_lease_derive(&l, p->lease_ms, p->kill_after_ms, reason, rlen) < 0)
        return -1;
    long b = lease_work_bound_ms(l.server_ms, l.kill_after_ms);
    run_format_ms(l.server_ms, lease, sizeof lease);
    run_format_ms(l.kill_after_ms, kill, sizeof kill);
    run_format_ms(l.client_ms, tc, sizeof tc);
    run_format_ms(l.margin_ms, margin, sizeof margin);
    run_format_ms(p->promotion_ms, promo, sizeof promo);
    run_format_ms(b, bound, sizeof bound);
    *fits = b <= p->promotion_ms;
    snprintf(reason, rlen,
             "--lease=%s %s a promotion after %s: after a silent primary "
             "death the command is gone by T_c %s + kill-after %s after the "
             "last confirmed heartbeat, plus a margin of %s, so %s%s",
             lease, *fits ? "fits" : "does not fit", promo, tc, kill, margin,
             bound,
             *fits ? ", before a standby can be promoted"
                   : ", and a promoted standby can grant the lock "
                     "sooner: two holders at once");
    fix[0] = '\0';
    if (*fits)
        return 0;
    /* An explicit kill-after is kept in the advice; the default one
     * follows the lease. */
    long best = longest_fitting(p->promotion_ms, p->kill_after_ms);
    if (best == 0) {
        snprintf(fix, flen,
                 "no lease fits a promotion after %s%s%s: %s"
                 "promote later (Patroni: a longer ttl)",
                 promo, p->kill_after_ms >= 0 ? " with --kill-after=" : "",
                 p->kill_after_ms >= 0 ? kill : "",
                 p->kill_after_ms >= 0 ? "a shorter --kill-after, or " : "");
        return 0;
    }
    run_format_ms(best, lease, sizeof lease);
    snprintf(fix, flen,
             "run and lead with --lease=%s%s%s or shorter, or "
             "promote later (Patroni promotes ttl - loop_wait after a silent "
             "death at the earliest)",
             lease, p->kill_after_ms >= 0 ? " --kill-after=" : "",
             p->kill_after_ms >= 0 ? kill : "");
    return 0;
}
