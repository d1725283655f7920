#!/usr/bin/env bats
# shellcheck disable=SC2154  # out, K: set by setup_run (helpers.bash)
# A real failover: the standby is promoted, on servers of the test's own
# (failover_helpers.bash).  Multi-host conninfo (target_session_attrs=
# read-write) for run, lead and doctor; the primary stopped (fast,
# immediate) then the standby promoted: the holder's job stopped and exit
# 74, lead followers retrying through the outage, exactly one leader
# afterwards on the new primary (timed); a wait at the standby before the
# promotion; the old primary left running.  Tokens: failover_tokens.bats.
# Leases are 3 s.

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

# The old primary left running while the standby is promoted: both grant
# the same lock.  pglock cannot prevent it (the HA layer must fence the old
# primary); the test documents the hazard, and that doctor reports two
# primaries.
@test "old primary left running: both primaries grant the same lock (pglock cannot prevent it); doctor reports two primaries" {
    bg a run -d "$PRIMARY" --lease=3s "$K" -c "$(stamp_job a)"
    wait_until 10 file_exists "$out/a.jobpid"
    "$PGLOCK_TEST_HARNESS" promote-standby
    # The promoted standby has no locks: it grants the same key at once,
    # while the old primary's holder still runs its job.
    run -0 "$PGLOCK_BIN" run --try -d "$STANDBY" --lease=3s "$K" \
        -c "cat /proc/$(cat "$out/a.jobpid")/stat >/dev/null && echo both-ran"
    [[ "$output" == *both-ran* ]]
    alive "$(cat "$out/a.jobpid")"
    held_on "$PRIMARY" "$K"

    run -1 "$PGLOCK_BIN" doctor -d "$MULTI"
    grep -E "127\.0\.0\.1:$SPORT primary" <<<"$output"
    grep -E "127\.0\.0\.1:$PPORT primary" <<<"$output"
    grep -E "^problem +hosts: .*two primaries" <<<"$output"
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
}
