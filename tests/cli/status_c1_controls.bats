#!/usr/bin/env bats
# pglock status prints names it does not control (role names here) to a
# terminal: C1 control characters (U+0080..U+009F; U+009B is read as CSI,
# like ESC [) are replaced with '?', as C0 controls (ESC, BEL) are.

bats_require_minimum_version 1.5.0

load helpers
load sessions

setup() {
    need PGLOCK_TEST_PRIMARY
    PGLOCK_BIN=${PGLOCK_BIN:-build/pglock}
    sessions_setup
    CSI=$(printf '\302\233')     # U+009B in UTF-8
    ROLE="pglock_c1_${CSI}31m_$$"
    KEY=$((7300000000 + $$))
    q "create role \"$ROLE\" login" >/dev/null
}

teardown() {
    sessions_teardown
    q "drop role if exists \"$ROLE\"" >/dev/null || true
}

held_by_role() {
    [ "$(q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
             where l.locktype = 'advisory' and l.granted
             and a.usename = '$ROLE'")" = 1 ]
}

@test "a role name with U+009B (CSI) is shown with '?' in its place" {
    session c1_holder "$PGLOCK_TEST_PRIMARY user='$ROLE'" "select pg_advisory_lock($KEY);"
    wait_until 10 held_by_role
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" "$KEY"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"pglock_c1_?31m_$$"* ]]
    [[ "$output" != *"$CSI"* ]]
}
