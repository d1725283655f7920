#!/usr/bin/env bats
# pglock run: bad input and unreachable servers.  Each gives one clear line
# in PostgreSQL's message style, the documented exit code, never echoes a
# password, and leaves nothing on the server.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    # Nothing of ours may be left on the server afterwards.
    APP=$(run_app "$K")
}

teardown() {
    teardown_run
}

# nothing_left: no session named for a test key and no advisory lock on it.
nothing_left() {
    [ "$(q "select count(*) from pg_stat_activity where application_name like 'pglock run run-test-$BATS_TEST_NUMBER-%'")" -eq 0 ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
    [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]
}

# one_error CODE: the run failed with CODE and said so in one error line.
one_error() {
    [ "$status" -eq "$1" ]
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: ')" -eq 1 ]
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*\.$')" -eq 0 ]
}

@test "bad keys are usage errors (64), never a different text lock" {
    local bad
    for bad in 9223372036854775808 -9223372036854775809 int:9223372036854775808 \
        42:x 42:9:1 4294967296:1 1e3 '' int: pair:1 $'\xff\xfe'; do
        run -64 "$PGLOCK_BIN" run -d "$DB" -- "$bad" -- touch "$out/ran"
        one_error 64
        [ ! -e "$out/ran" ]
    done
    run -64 "$PGLOCK_BIN" run -d "$DB" 42:x -- true
    [[ "$output" == *'42:x'* ]]
    [[ "$output" == *'Try "pglock run --help"'* ]]
}

@test "bad durations are usage errors" {
    local bad
    for bad in 5x -1 '' 1.5ms 1. ' 5' 99999999999999999999 5m3; do
        run -64 "$PGLOCK_BIN" run -w "$bad" -d "$DB" "$K" -- touch "$out/ran"
        one_error 64
        [[ "$output" == *"--wait"* ]]
    done
    run -64 "$PGLOCK_BIN" run --lease=abc -d "$DB" "$K" -- true
    one_error 64
    [ ! -e "$out/ran" ]
}

@test "lease arithmetic violations exit 64 and name the bound" {
    run -64 "$PGLOCK_BIN" run --lease=30s --kill-after=6s -d "$DB" "$K" -- touch "$out/ran"
    one_error 64
    [[ "$output" == *"--kill-after=6s breaks the lease: client deadline 20s + kill-after 6s + margin 5s exceeds --lease=30s"* ]]
    [[ "$output" == *"hint: "*"at most 5s"* ]]
    run -64 "$PGLOCK_BIN" run --lease=500ms -d "$DB" "$K" -- true
    one_error 64
    [[ "$output" == *"lease 500ms is out of range"* ]]
    run "$PGLOCK_BIN" run --lease=30s --kill-after=5s -d "$DB" "$K" -- true
    [ "$status" -eq 0 ]
    [ ! -e "$out/ran" ]
}

@test "bad options and a missing command are usage errors" {
    run -64 "$PGLOCK_BIN" run --bogus "$K" -- true
    one_error 64
    [[ "$output" == *'unrecognized option "--bogus"'* ]]
    run -64 "$PGLOCK_BIN" run -Z "$K" -- true
    one_error 64
    run -64 "$PGLOCK_BIN" run -d "$DB" "$K"
    one_error 64
    [[ "$output" == *"no command given"* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" "$K" --
    one_error 64
    run -64 "$PGLOCK_BIN" run -d "$DB"
    one_error 64
    [[ "$output" == *"no lock key given"* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" "$K" -n -- true
    one_error 64
    run -64 "$PGLOCK_BIN" run -c 'true' -d "$DB" "$K" -- true
    one_error 64
    run -64 "$PGLOCK_BIN" run --conflict-exit-code=256 -d "$DB" "$K" -- true
    one_error 64
    run -64 "$PGLOCK_BIN" run --lost-exit-code=-1 -d "$DB" "$K" -- true
    one_error 64
    run -64 "$PGLOCK_BIN" run --wait
    one_error 64
}

@test "a forgotten key or \"--\" is a usage error, never a lock on a word of the command" {
    # getopt takes a leading "--": "echo" must not become the key
    run -64 "$PGLOCK_BIN" run -d "$DB" -- touch "$out/ran"
    one_error 64
    [[ "$output" == *'no lock key before "--"'* ]]
    run -64 "$PGLOCK_BIN" lead -d "$DB" -- touch "$out/ran"
    one_error 64
    # keys then a command without "--": which word is the command?
    run -64 "$PGLOCK_BIN" run -d "$DB" 7:1 7:2 touch "$out/ran"
    one_error 64
    [[ "$output" == *'no "--" after the key'* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" "$K" touch "$out/ran"
    one_error 64
    [ ! -e "$out/ran" ]
    # nothing was locked: not the word taken for a key, not the pairs, not
    # K (only these keys: the server may carry other suites' sessions)
    [ "$(advisory_count "$(name_sql touch)" t)" -eq 0 ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory'
             and classid = 7 and objid in (1, 2) and objsubid = 2")" -eq 0 ]
}

@test "PGLOCK_LEADER from the caller's environment does not reach run's command" {
    PGLOCK_LEADER=1 run -0 "$PGLOCK_BIN" run -d "$DB" "$K" -c 'echo "leader=${PGLOCK_LEADER-unset}"'
    [ "$output" = "leader=unset" ]
}

@test "--help and --version go to stdout and exit 0" {
    run "$PGLOCK_BIN" run --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"Usage:"* ]]
    [[ "$output" == *"--min-hold"* ]]
    run "$PGLOCK_BIN" run -?
    [ "$status" -eq 0 ]
    run "$PGLOCK_BIN" run -V
    [ "$status" -eq 0 ]
    [[ "$output" == "pglock "[0-9]* ]]
    run "$PGLOCK_BIN" --help
    [ "$status" -eq 0 ]
    run "$PGLOCK_BIN" --version
    [ "$status" -eq 0 ]
}

@test "@NAME not in the registry is a usage error; a registered one works" {
    printf 'billing = 72001\nreports\n' >"$out/keys"
    run -64 "$PGLOCK_BIN" run --keys "$out/keys" -d "$DB" @missing -- touch "$out/ran"
    one_error 64
    [[ "$output" == *missing* ]]
    PGLOCK_KEYS=$out/keys run -64 "$PGLOCK_BIN" run -d "$DB" @missing -- true
    one_error 64
    run -64 "$PGLOCK_BIN" run -d "$DB" --keys "$out/nonexistent" @billing -- true
    one_error 64
    [ ! -e "$out/ran" ]
    run "$PGLOCK_BIN" run --keys "$out/keys" -d "$DB" @billing -- sh -c 'echo $PGLOCK_KEY_ID'
    [ "$status" -eq 0 ]
    [ "$output" = 72001 ]
}

@test "an unreachable server exits 69, a bad conninfo 64, with one error line" {
    run -69 "$PGLOCK_BIN" run -d "host=/nonexistent-dir port=1" "$K" -- touch "$out/ran"
    one_error 69
    run "$PGLOCK_BIN" run -d "bogus_option=1" "$K" -- touch "$out/ran"
    one_error 64
    [[ "$output" == *bogus_option* ]]
    run "$PGLOCK_BIN" run -d "postgresql://%zz" "$K" -- touch "$out/ran"
    [ "$status" -eq 64 ]
    [ ! -e "$out/ran" ]
}

@test "a server that is down: 69 at once" {
    need PGLOCK_TEST_DOWN
    run -69 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_DOWN" "$K" -- touch "$out/ran"
    one_error 69
    [[ "$output" == *"refused"* ]]
    [ ! -e "$out/ran" ]
}

@test "a wrong password: 69, and the password is never printed" {
    need PGLOCK_TEST_PW_CONNINFO
    PGPASSWORD=wrong-secret-42 run -69 "$PGLOCK_BIN" run -v -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
    one_error 69
    [[ "$output" == *"password authentication failed"* ]]
    [[ "$output" != *wrong-secret-42* ]]
    run -69 "$PGLOCK_BIN" run -v -d "$PGLOCK_TEST_PW_CONNINFO password=wrong-secret-43" "$K" -- true
    one_error 69
    [[ "$output" != *wrong-secret-43* ]]
    [ ! -e "$out/ran" ]
    nothing_left
}

@test "a standby is refused: 69" {
    need PGLOCK_TEST_STANDBY
    run -69 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_STANDBY" "$K" -- touch "$out/ran"
    one_error 69
    [[ "$output" == *standby* ]]
    [ ! -e "$out/ran" ]
    [ "$(q "select count(*) from pg_stat_activity where application_name = '$APP'" "$PGLOCK_TEST_STANDBY")" -eq 0 ]
}

@test "--mode=session through a transaction-mode pooler is refused: 69, nothing leaked" {
    need PGLOCK_TEST_POOLER
    run -69 "$PGLOCK_BIN" run --mode=session -d "$PGLOCK_TEST_POOLER" "$K" -- touch "$out/ran"
    one_error 69
    [[ "$output" == *pooler* ]]
    [ ! -e "$out/ran" ]
    # The pool keeps its server connection (and the application_name it
    # last carried); what matters is that no lock is held or queued there.
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
    [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]
}

@test "through a transaction-mode pooler the default holds the lock in a transaction" {
    need PGLOCK_TEST_POOLER
    bg h run -d "$PGLOCK_TEST_POOLER" "$K" -c "touch $out/started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/started"
    # Seen on the server itself: really held, and exclusive.
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 1 ]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = f ]
    touch "$out/release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    wait_until 10 eval '[ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]'
}
