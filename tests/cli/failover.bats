#!/usr/bin/env bats
# shellcheck disable=SC2154  # out, K: set by setup_run (helpers.bash)
# A real failover: the standby is promoted, on servers of the test's own
# (failover_helpers.bash).  Multi-host conninfo (target_session_attrs=
# read-write) for run, lead and doctor; the primary stopped (fast,
# immediate) then the standby promoted: the holder's job stopped and exit
# 74, lead followers retrying through the outage, exactly one leader
# afterwards on the new primary (timed); a wait at the standby before the
# promotion.  Tokens: failover_tokens.bats; the old primary left running:
# failover_split_brain.bats.  Leases are 3 s.

load helpers
load failover_helpers
bats_require_minimum_version 1.5.0

@test "multi-host conninfo: run and lead find the primary with the standby listed first; doctor names each host's role" {
    # The job asks the primary for its own lock's backend: it is there.
    PRIMARY=$PRIMARY run -0 "$PGLOCK_BIN" run --try -d "$MULTI" "$K" -c \
        'echo "pid=$PGLOCK_BACKEND_PID"; psql -X -A -t "$PRIMARY" -c "select count(*) from pg_stat_activity where pid = $PGLOCK_BACKEND_PID"'
    [ "${lines[1]}" = 1 ]
    local pid=${lines[0]#pid=}
    [[ $pid =~ ^[0-9]+$ ]]
    # ... and gone a moment after the run (polled: a backend ends a little
    # after its client's Terminate)
    wait_until 10 eval '[ "$(q "select count(*) from pg_stat_activity where pid = $pid")" -eq 0 ]'
    bg a lead -v -d "$MULTI" --lease=3s "$K" -c "$(leader_job a)"
    wait_until 10 leaders_at_least 1
    wait_until 10 held_on "$PRIMARY" "$K"
    [ "$(count_on "$STANDBY" "$K" t)" -eq 0 ]

    run -0 "$PGLOCK_BIN" doctor -d "$MULTI"
    grep -E "^ok +hosts: " <<<"$output"
    grep -E "127\.0\.0\.1:$SPORT standby" <<<"$output"
    grep -E "127\.0\.0\.1:$PPORT primary" <<<"$output"
    run -0 "$PGLOCK_BIN" doctor --json -d "$MULTI"
    [ "$(py '[(h["port"], h["role"]) for h in d["hosts"]]')" = "[('$SPORT', 'standby'), ('$PPORT', 'primary')]" ]
}

@test "primary stopped (fast), standby promoted: holder exits 74, followers retry, one leader on the new primary" {
    failover_scene fast
}

@test "primary stopped (immediate), standby promoted: holder exits 74, followers retry, one leader on the new primary" {
    failover_scene immediate
}
