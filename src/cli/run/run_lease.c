/* `pglock run`'s lease: lease_rules.h's arithmetic, checked against
 * --lease and --kill-after (a kill-after longer than T_s/6 brings the
 * client deadline forward). */
#include <stdio.h>
#include "lease_rules.h"
#include "run.h"

void run_format_ms(long ms, char *buf, size_t len)
{
    if (ms % 3600000L == 0 && ms > 0)
        snprintf(buf, len, "%ldh", ms / 3600000L);
    else if (ms % 60000L == 0 && ms > 0)
        snprintf(buf, len, "%ldm", ms / 60000L);
    else if (ms % 1000L == 0)
        snprintf(buf, len, "%lds", ms / 1000L);
    else
        snprintf(buf, len, "%ldms", ms);
}

int run_lease_derive(run_lease *out, long lease_ms, long kill_after_ms,
                     char *err, size_t errlen)
{
    char a[32], b[32], d[32];
    if (lease_ms < RUN_LEASE_MIN_MS || lease_ms > RUN_LEASE_MAX_MS) {
        run_format_ms(lease_ms, a, sizeof a);
        run_format_ms(RUN_LEASE_MIN_MS, b, sizeof b);
        snprintf(err, errlen,
                 "lease %s is out of range (at least %s, at most 24 days)", a,
                 b);
        return -1;
    }
    out->server_ms = lease_ms;
    out->margin_ms = lease_margin_ms(lease_ms);
    if (kill_after_ms < 0)
        kill_after_ms = lease_default_kill_after_ms(lease_ms);
    out->kill_after_ms = kill_after_ms;
    long max = lease_stop_budget_max_ms(lease_ms);
    if (kill_after_ms > max) {
        run_format_ms(kill_after_ms, b, sizeof b);
        run_format_ms(lease_ms, d, sizeof d);
        snprintf(err, errlen,
                 "--kill-after=%s breaks the lease: more than "
                 "half of --lease=%s",
                 b, d);
        return -1;
    }
    out->client_ms = lease_client_deadline_for(lease_ms, kill_after_ms);
    out->heartbeat_ms = lease_heartbeat_for(lease_ms, kill_after_ms);
    return 0;
}
