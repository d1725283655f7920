#!/usr/bin/env bats
# pglock doctor's fix for a role that lacks pg_read_all_stats or
# pg_signal_backend is a GRANT that can be pasted as it is: the role name
# is an SQL identifier, a '"' in it doubled.

bats_require_minimum_version 1.5.0

load helpers

setup() {
    need PGLOCK_TEST_PRIMARY
    PGLOCK_BIN=${PGLOCK_BIN:-build/pglock}
    ROLE="pglock \"q\" $$"
    q "create role \"pglock \"\"q\"\" $$\" login" >/dev/null
}

teardown() {
    q "drop role if exists \"pglock \"\"q\"\" $$\"" >/dev/null || true
}

fix_of() {
    py "[f['fix'] for f in d['findings'] if f['check'] == '$1'][0]"
}

@test "the GRANT hint doubles a '\"' in the role name, and runs as printed" {
    run --separate-stderr "$PGLOCK_BIN" doctor --json -d "$PGLOCK_TEST_PRIMARY user='$ROLE'"
    [ "$status" -eq 0 ]
    [ "$(fix_of see_sessions)" = "GRANT pg_read_all_stats TO \"pglock \"\"q\"\" $$\"" ]
    [ "$(fix_of signal_backends)" = "GRANT pg_signal_backend TO \"pglock \"\"q\"\" $$\"" ]
    # pasted into psql, each hint grants the role what it lacked
    q "$(fix_of see_sessions)"
    q "$(fix_of signal_backends)"
    run --separate-stderr "$PGLOCK_BIN" doctor --json -d "$PGLOCK_TEST_PRIMARY user='$ROLE'"
    [ "$(py "[f['status'] for f in d['findings'] if f['check'] in ('see_sessions', 'signal_backends')]")" = "['ok', 'ok']" ]
}
