#!/usr/bin/env bats
# pglock run --queue=N: at most N runs wait for a key; one more exits 75
# at once.  The server counts (each waiter holds one of the key's N place
# keys while it waits), so runs that arrive together never both take the
# last place.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# place_sql NAME I: the bigint of place I of the text key NAME's queue.
place_sql() {
    name_sql "$(q "select $(name_sql "$1")")#queue$2"
}
places_held() { advisory_count "$(place_sql "$1" "$2")" t; }

# waiters_on NAME N: exactly N runs wait for the text key NAME.
waiters_on() { [ "$(advisory_count "$(name_sql "$1")" f)" -eq "$2" ]; }

# A holder of $K whose job runs until $out/h.release.
hold_key() {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 20 file_exists "$out/h.start"
}

@test "run --queue=1: one run waits; the next one exits 75 at once, its command not run" {
    hold_key
    bg w run -d "$DB" --queue=1 "$K" -c "touch $out/w.ran"
    wait_until 20 waiters_on "$K" 1
    run -75 "$PGLOCK_BIN" run -d "$DB" --queue=1 "$K" -c "touch $out/third.ran"
    [[ "$output" == *"has 1 run waiting already (--queue=1); the command was not run"* ]]
    [ ! -e "$out/third.ran" ]
    touch "$out/h.release"
    finish h 10
    finish w 20
    [ "$(status_of w)" = 0 ]
    [ -e "$out/w.ran" ]
    [ "$(places_held "$K" 0)" -eq 0 ]
}

@test "run --queue=1: the waiter gives its place back once it holds the key, so the next run may wait behind it" {
    hold_key
    bg w run -d "$DB" --queue=1 "$K" -c "$(stamp_job w)"
    wait_until 20 waiters_on "$K" 1
    touch "$out/h.release"
    finish h 10
    wait_until 20 file_exists "$out/w.start"
    wait_until 10 eval '[ "$(places_held "$K" 0)" -eq 0 ]'
    bg r run -d "$DB" --queue=1 "$K" -c "touch $out/r.ran"
    wait_until 20 waiters_on "$K" 1
    touch "$out/w.release"
    finish w 10
    finish r 20
    [ "$(status_of r)" = 0 ]
    [ -e "$out/r.ran" ]
}

@test "run --queue=2: two runs wait, a third exits 75" {
    hold_key
    bg a run -d "$DB" --queue=2 "$K" -c true
    wait_until 20 waiters_on "$K" 1
    bg b run -d "$DB" --queue=2 "$K" -c true
    wait_until 20 waiters_on "$K" 2
    run -75 "$PGLOCK_BIN" run -d "$DB" --queue=2 "$K" -c "touch $out/third.ran"
    [[ "$output" == *"has 2 runs waiting already (--queue=2)"* ]]
    touch "$out/h.release"
    finish h 10
    finish a 20
    finish b 20
    [ "$(status_of a)" = 0 ]
    [ "$(status_of b)" = 0 ]
}

@test "run --queue=1: two runs arriving together: exactly one waits, the other exits 75" {
    hold_key
    bg a run -d "$DB" --queue=1 "$K" -c true
    bg b run -d "$DB" --queue=1 "$K" -c true
    # one of them is gone with 75 while the other waits
    wait_until 20 eval '! alive "$(pid_of a)" || ! alive "$(pid_of b)"'
    wait_until 20 waiters_on "$K" 1
    touch "$out/h.release"
    finish h 10
    finish a 20
    finish b 20
    [ "$(sort <(status_of a) <(status_of b) | tr '\n' ' ')" = "0 75 " ]
}

@test "run --queue=1: a waiter killed with SIGKILL frees its place with its session" {
    hold_key
    bg w run -d "$DB" --queue=1 "$K" -c "touch $out/w.ran"
    wait_until 20 waiters_on "$K" 1
    kill -KILL "$(pid_of w)"
    finish w 10
    wait_until 20 eval '[ "$(places_held "$K" 0)" -eq 0 ]'
    bg r run -d "$DB" --queue=1 "$K" -c "touch $out/r.ran"
    wait_until 20 waiters_on "$K" 1
    touch "$out/h.release"
    finish h 10
    finish r 20
    [ "$(status_of r)" = 0 ]
    [ ! -e "$out/w.ran" ]
}

@test "run --queue: bad values and conflicting options are usage errors; through a pooler, 69; nothing locked" {
    run -64 "$PGLOCK_BIN" run -d "$DB" --queue=0 "$K" -- true
    [[ "$output" == *'invalid value for --queue: "0"'* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" --queue=x "$K" -- true
    run -64 "$PGLOCK_BIN" run -d "$DB" --queue=65 "$K" -- true
    run -64 "$PGLOCK_BIN" run -d "$DB" --queue=1 --try "$K" -- true
    [[ "$output" == *"--queue cannot be used with --try"* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" --queue=1 --slots=2 "$K" -- true
    run -64 "$PGLOCK_BIN" run -d "$DB" --queue=1 --mode=xact "$K" -- true
    if [ -n "${PGLOCK_TEST_POOLER:-}" ]; then
        run -69 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_POOLER" --queue=1 "$K" -c "touch $out/ran"
        [[ "$output" == *"--queue needs a session lock"* ]]
        [ ! -e "$out/ran" ]
    fi
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
    [ "$(places_held "$K" 0)" -eq 0 ]
}
