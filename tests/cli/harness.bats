#!/usr/bin/env bats
# The harness itself: a second instance starts, answers, and leaves nothing
# behind when its command ends or when it is killed.  And the benchmarks'
# smoke run, which runs against it.

load helpers

# Runs a second harness (not the one the suite runs under).
second_harness() {
    env -u PGLOCK_TEST_PRIMARY -u PGLOCK_TEST_DIR -u PGLOCK_TEST_SERVER \
        "$BATS_TEST_DIRNAME/../harness/harness.sh" "$@"
}

setup() {
    need PGLOCK_TEST_DIR PGLOCK_BUILD
    out=$BATS_TEST_TMPDIR
}

assert_all_gone_quietly() { assert_all_gone >/dev/null 2>&1; }

assert_all_gone() {
    local pid
    [ -s "$out/pids" ]
    while read -r pid; do
        if alive "$pid"; then
            echo "pid $pid still runs: $(cat /proc/$pid/cmdline | tr '\0' ' ')"
            return 1
        fi
    done <"$out/pids"
    [ ! -e "$(cat "$out/dir")" ]
    # The partition's network namespace is deleted too (root only).
    [ "$(id -u)" != 0 ] || [ -s "$out/netns" ]
    [ ! -s "$out/netns" ] || [ ! -e "/var/run/netns/$(cat "$out/netns")" ]
}

@test "the proxy relays, cuts and counts from a shell" {
    need PGLOCK_TEST_PROXY PGLOCK_TEST_PROXY_BIN
    run proxy_cmd reset
    [ "$output" = ok ]
    [ "$(q 'select 7' "$PGLOCK_TEST_PROXY")" = 7 ]
    run proxy_cmd count
    [[ "$output" == *" roundtrips=1" ]]
    run proxy_cmd bogus
    [ "$status" -ne 0 ]
}

@test "the primary restarts and answers through the pooler" {
    need PGLOCK_TEST_POOLER
    before=$(q 'select pg_postmaster_start_time()')
    "$PGLOCK_TEST_HARNESS" restart-primary
    [ "$(q 'select pg_postmaster_start_time()')" != "$before" ]
    [ "$(q 'select 1' "$PGLOCK_TEST_POOLER")" = 1 ]
}

@test "stop-primary and start-primary" {
    "$PGLOCK_TEST_HARNESS" stop-primary immediate
    run q 'select 1'
    [ "$status" -ne 0 ]
    "$PGLOCK_TEST_HARNESS" start-primary
    [ "$(q 'select 1')" = 1 ]
    [ "$(q 'select 1' "$PGLOCK_TEST_PROXY")" = 1 ]
}

# One harness for two properties (each harness costs about 8 s of CPU):
# the command ran against every server, and the standby answered it; its
# status (3) comes back; and nothing is left behind.
@test "a finished harness leaves no process and no directory, and its command's failing status comes back" {
    run second_harness run --build "$PGLOCK_BUILD" -- bash -c '
        "$PGLOCK_TEST_HARNESS" pids >"$0/pids"
        printf %s "${PGLOCK_TEST_PARTITION_NETNS:-}" >"$0/netns"; echo "$PGLOCK_TEST_DIR" >"$0/dir"
        [ "$(psql -XAtc "select 1" "$PGLOCK_TEST_STANDBY")" = 1 ] || exit 9
        exit 3' "$out"
    [ "$status" -eq 3 ]
    [ "$(wc -l <"$out/pids")" -ge 8 ]
    assert_all_gone
}

@test "a harness killed by SIGTERM, SIGINT or SIGKILL leaves nothing behind" {
    for sig in TERM INT KILL; do
        rm -f "$out/pids" "$out/dir" "$out/child" "$out/netns"
        # Not through a function: $! must be the harness's own pid.  A
        # background job starts with SIGINT ignored; perl restores it, as
        # for a foreground harness that gets a Ctrl-C.
        env -u PGLOCK_TEST_PRIMARY -u PGLOCK_TEST_DIR -u PGLOCK_TEST_SERVER \
            perl -e '$SIG{INT} = "DEFAULT"; exec @ARGV or die' \
            "$BATS_TEST_DIRNAME/../harness/harness.sh" run --build "$PGLOCK_BUILD" -- bash -c '
            echo $$ >"$0/child"
            "$PGLOCK_TEST_HARNESS" pids >"$0/pids.tmp"; mv "$0/pids.tmp" "$0/pids"
            printf %s "${PGLOCK_TEST_PARTITION_NETNS:-}" >"$0/netns"; echo "$PGLOCK_TEST_DIR" >"$0/dir"; exec sleep 60' "$out" 3>&- &
        h=$!
        # A bound, not a wait: on a loaded machine servers take a while.
        wait_until 90 test -s "$out/pids"
        wait_until 5 test -s "$out/dir"
        kill -"$sig" "$h"
        wait "$h" || true
        # SIGKILL: the harness's watchdog cleans up, within a second or so;
        # the command itself is the test's to stop.
        [ "$sig" != KILL ] || kill "$(cat "$out/child")"
        wait_until 20 assert_all_gone_quietly
        assert_all_gone
    done
}

# The benchmarks' smoke run (seconds): it runs against the harness and its
# report has every section.  No number is checked: timings are never
# asserted, and a smoke run's numbers mean nothing.
@test "bench/run.sh --smoke reports every section" {
    need PGLOCK_TEST_PRIMARY
    [ -x "$PGLOCK_BUILD/bench/bench_ops" ] || skip "the benchmarks are not built in $PGLOCK_BUILD"
    run "$BATS_TEST_DIRNAME/../../bench/run.sh" "$PGLOCK_BUILD" --smoke
    echo "$output"
    [ "$status" -eq 0 ]
    for section in "## Machine" "## 1–2. " "## 3. " "## 4. " "## 5. " "## 6. " "## 7. " "## 8. " "## 9. " "## 10. " "## 11. " "## 12. " "## Targets"; do
        grep -qF -- "$section" "$PGLOCK_BUILD/bench-smoke.md"
    done
    grep -qF "Mutual exclusion violations seen: 0." "$PGLOCK_BUILD/bench-smoke.md"
    # pglock itself is in every table, not only the baselines.
    grep -qF "| pglock_lock (try) + pglock_unlock |" "$PGLOCK_BUILD/bench-smoke.md"
    grep -qE "^\| 2 \| none \| pglock \|" "$PGLOCK_BUILD/bench-smoke.md"
    grep -qE "^\| 1 \| pglock \|" "$PGLOCK_BUILD/bench-smoke.md"
    # the interleaved comparisons: run by run, and turn by turn
    grep -qF "| pglock run --try K -- true ÷ the floor, 3 pairs |" "$PGLOCK_BUILD/bench-smoke.md"
    grep -qF "2 turns of 0.1 s each per repetition" "$PGLOCK_BUILD/bench-smoke.md"
    # the contention target's own run, in longer repetitions
    grep -qF "### pglock against raw libpq alone, in longer repetitions" "$PGLOCK_BUILD/bench-smoke.md"
    grep -qF "3 turns of 0.1 s each per repetition" "$PGLOCK_BUILD/bench-smoke.md"
    grep -qE "^\| 2 \| none \| raw libpq wait, again \(A/A control\) \|.* × raw libpq wait \|" "$PGLOCK_BUILD/bench-smoke.md"
    [[ "$output" != *"bench: error"* ]]
    grep -qE "^\| 0 \| the floor again, another connection \(A/A control\) \|" "$PGLOCK_BUILD/bench-smoke.md"
    # etcd beside pglock (CI installs it; without it, one line says so)
    if command -v etcd >/dev/null && command -v etcdctl >/dev/null; then
        grep -qF "| pglock run --try K -- true, same transport ÷ etcdctl lock K true, 3 pairs |" "$PGLOCK_BUILD/bench-smoke.md"
        grep -qF "| etcdctl lock K true ÷ etcdctl put k v (etcd's floor), 3 pairs |" "$PGLOCK_BUILD/bench-smoke.md"
        grep -qE "^\| etcdctl lock --ttl 1 \(the flag's minimum\) \| 2 \| [0-9]+ \([0-9]+–[0-9]+\) \| [0-2] of 2 \|$" "$PGLOCK_BUILD/bench-smoke.md"
        # pglock's killed holder took its command with it, every time
        grep -qE "^\| pglock run K, lease 20 s .* \| 2 \| [0-9]+ \([0-9]+–[0-9]+\) \| 0 of 2 \|$" "$PGLOCK_BUILD/bench-smoke.md"
    else
        grep -qF "etcd is not installed" "$PGLOCK_BUILD/bench-smoke.md"
    fi
    # the targets table judges every goal (none n/a: each figure was found)
    local goal line
    for goal in "§1 lock + unlock ≤ 1.03× raw libpq (Unix socket)" "§3 one key, 2 processes" \
                "§4 distinct keys, 1 processes" "§5 \`pglock run --try K -- true\`" \
                "§7 heartbeat in session hold, 0 other locks" "§7 heartbeat in xact hold, 0 other locks"; do
        line=$(grep -F "| $goal" "$PGLOCK_BUILD/bench-smoke.md")
        [[ "$line" == *"| met |" || "$line" == *"| **missed** |" ]]
    done
    run ! grep -F "| n/a |" "$PGLOCK_BUILD/bench-smoke.md"
}
