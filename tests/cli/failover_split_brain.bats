#!/usr/bin/env bats
# shellcheck disable=SC2154  # out, K: set by setup_run (helpers.bash)
# The old primary left running while the standby is promoted (servers of
# the test's own, see failover_helpers.bash): both grant the same lock.
# pglock cannot prevent it (the HA layer must fence the old primary); the
# test documents the hazard, and that doctor reports two primaries.

load helpers
load failover_helpers
bats_require_minimum_version 1.5.0

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
