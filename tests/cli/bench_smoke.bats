#!/usr/bin/env bats
# The benchmarks' smoke run (seconds): it runs against the harness and its
# report has every section.  No number is checked: timings are never
# asserted, and a smoke run's numbers mean nothing.

load helpers

setup() {
    need PGLOCK_TEST_PRIMARY PGLOCK_BUILD
    [ -x "$PGLOCK_BUILD/bench/bench_ops" ] || skip "the benchmarks are not built in $PGLOCK_BUILD"
}

@test "bench/run.sh --smoke reports every section" {
    run "$BATS_TEST_DIRNAME/../../bench/run.sh" "$PGLOCK_BUILD" --smoke
    echo "$output"
    [ "$status" -eq 0 ]
    for section in "## Machine" "## 1–2. " "## 3. " "## 4. " "## 5. " "## 6. " "## 7. " "## 8. " "## 9. " "## 10. "; do
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
}
