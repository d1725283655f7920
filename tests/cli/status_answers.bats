#!/usr/bin/env bats
# pglock status as a shell test and as a reader's tool: `status KEY...`
# answers through its exit status (0 every KEY held, 1 one free, 69 could
# not look, a standby included), --watch --json writes one document per
# line, a name of any length prints whole, and the messages are English
# in the house format.

bats_require_minimum_version 1.5.0

load helpers

setup() { setup_run; }
teardown() { teardown_run; }

# hold NAME KEY: a pglock run holding KEY until $out/NAME.release exists.
hold() {
    bg "$1" run -d "$DB" "$2" -c "$(stamp_job "$1")"
    wait_until 10 file_exists "$out/$1.start"
}
release() {
    touch "$out/$1.release"
    finish "$1" 10
}

@test "status KEY...: 0 when every KEY is held, 1 when one is free" {
    hold a "$K-a"
    hold b "$K-b"
    run "$PGLOCK_BIN" status -d "$DB" "$K-a" "$K-b"
    [ "$status" -eq 0 ]
    run "$PGLOCK_BIN" status -d "$DB" "$K-a" "$K-b" "$K-free"
    [ "$status" -eq 1 ]
    # the table still shows the ones held
    [[ "$output" == *"$K-a (application_name) = key"* ]]
    run "$PGLOCK_BIN" status -d "$DB" --json "$K-a"
    [ "$status" -eq 0 ]
    # -q: the exit status alone
    run "$PGLOCK_BIN" status -q -d "$DB" "$K-a"
    [ "$status" -eq 0 ]
    [ "$output" = "" ]
    run "$PGLOCK_BIN" status -q -d "$DB" "$K-free"
    [ "$status" -eq 1 ]
    [ "$output" = "" ]
    release b
    run "$PGLOCK_BIN" status -d "$DB" "$K-a" "$K-b"
    [ "$status" -eq 1 ]
    release a
    run "$PGLOCK_BIN" status -d "$DB" "$K-a"
    [ "$status" -eq 1 ]
    # no KEY: 0, whatever is held
    run "$PGLOCK_BIN" status -d "$DB"
    [ "$status" -eq 0 ]
}

@test "status KEY: shared holders hold it (0)" {
    bg s1 run -d "$DB" --shared "$K" -c "$(stamp_job s1)"
    bg s2 run -d "$DB" --shared "$K" -c "$(stamp_job s2)"
    wait_until 10 file_exists "$out/s1.start"
    wait_until 10 file_exists "$out/s2.start"
    run "$PGLOCK_BIN" status -d "$DB" "$K"
    [ "$status" -eq 0 ]
    [[ "$output" == *": shared by 2"* ]]
    release s1
    release s2
}

@test "status against a standby: one line saying so, exit 69" {
    need PGLOCK_TEST_STANDBY
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_STANDBY"
    [ "$status" -eq 69 ]
    [ "$output" = "" ]
    [ "$(wc -l <<<"$stderr")" -eq 1 ]
    [[ "$stderr" == "pglock: error: the server is a standby (in recovery): advisory locks are taken on the primary, and none of them can be seen here" ]]
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_STANDBY" "$K"
    [ "$status" -eq 69 ]
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_STANDBY" --json
    [ "$status" -eq 69 ]
    [ "$output" = "" ]
}

@test "status KEY against an unreachable server: 69" {
    run "$PGLOCK_BIN" status -h /nonexistent-socket-dir -p 1 "$K"
    [ "$status" -eq 69 ]
    [[ "$output" == "pglock: error: "* ]]
}

@test "--watch --json: one document per line, no blank line between" {
    hold h "$K"
    bg s status -d "$DB" --watch=100ms --json "$K"
    wait_until 10 eval '[ "$(wc -l <"$out/s.out")" -ge 3 ]'
    kill -INT "$(pid_of s)"
    finish s 10
    [ "$(status_of s)" = 0 ]
    python3 - "$out/s.out" <<'EOF'
import json, sys
lines = open(sys.argv[1]).read().split("\n")
assert lines[-1] == "", "the last document ends with a newline"
for line in lines[:-1]:
    d = json.loads(line)  # a blank line would fail here
    assert d["format"] == 1 and len(d["locks"]) == 1, line
EOF
    release h
}

@test "a registry name of 300 bytes prints whole on the table's title line" {
    name=$(printf 'b%.0s' $(seq 300))
    printf '%s = 72011\n' "$name" >"$out/keys"
    bg h run -d "$DB" 72011 -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    run "$PGLOCK_BIN" status -d "$DB" --keys "$out/keys" 72011
    [ "$status" -eq 0 ]
    grep -Fx "$name (registry) = key 72011: exclusive" <<<"$output"
    release h
}

@test "a registry collision is a pglock: warning" {
    printf 'alpha = 5\nbeta = 5\n' >"$out/keys"
    run --separate-stderr "$PGLOCK_BIN" status -d "$DB" --keys "$out/keys"
    [ "$status" -eq 0 ]
    [ "$stderr" = 'pglock: warning: registry names "alpha" and "beta" are the same key 5' ]
}

@test "one hidden session: the note is English" {
    need PGLOCK_TEST_ORDINARY
    hold h "$K"
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_ORDINARY" "$K"
    [ "$status" -eq 0 ]
    grep -Fx 'note: the client, state and times of 1 session of another role are hidden from role "pglock_user" (grant it pg_read_all_stats)' <<<"$output"
    release h
}

@test "how long, in words: a holder that is running shows an upper bound" {
    # pglock run's session is idle while the job runs: a range or one value
    hold h "$K"
    run "$PGLOCK_BIN" status -d "$DB" "$K"
    grep -E "^  holds [0-9]+ +$(uname -n) +postgres +local +[0-9]+s( to [0-9]+s)? +$(run_app "$K")$" <<<"$output"
    # a session that is busy (pg_sleep) after taking the lock: "up to"
    key=$((7200000 + RANDOM))
    PGAPPNAME=st_busy psql -X -q "$DB" -c "select pg_advisory_lock($key), pg_sleep(30)" >/dev/null 2>&1 &
    busy=$!
    wait_until 10 eval "[ \"\$(q \"select count(*) from pg_locks where locktype = 'advisory' and objid = $key and granted\")\" = 1 ]"
    run "$PGLOCK_BIN" status -d "$DB" "$key"
    # Its backend ends, not psql alone: a backend left in pg_sleep keeps a
    # snapshot for 30 s, which holds back the next suite's VACUUM.
    q "select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'st_busy'" >/dev/null
    wait "$busy" || true
    grep -E "^  holds [0-9]+ +- +postgres +local +up to [0-9]+s +st_busy$" <<<"$output"
    release h
}
