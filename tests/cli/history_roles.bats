#!/usr/bin/env bats
# The run history read by roles with only the documented GRANTs (issue
# 27): a reader without pg_read_all_stats tells a run going from one that
# ended unrecorded (the run lock in pg_locks), says "running?" where
# nobody can tell, and a pruner keeps what it cannot prove finished;
# init prints and applies the GRANTs for real role names.
# The recorder is the harness's superuser; the reader is pglock_user, an
# ordinary role, granted USAGE and SELECT here and revoked in teardown.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    "$PGLOCK_BIN" init -q -d "$DB"
    q "grant usage on schema pglock to pglock_user; grant select on pglock.runs to pglock_user"
    READER="$DB user=pglock_user"
    export READER
}
teardown() {
    teardown_run
    [ -z "${holder_pid:-}" ] || q "select pg_terminate_backend($holder_pid)" >/dev/null || true
    q "revoke all on pglock.runs from pglock_user; revoke all on schema pglock from pglock_user" >/dev/null
}

# reader_outcome_is KEY OUTCOME: the newest run of KEY, as the reader
# sees it, has OUTCOME now; the history as JSON in $output.
reader_outcome_is() {
    run --separate-stderr "$PGLOCK_BIN" history --json -d "$READER" "$1"
    [ "$status" -eq 0 ] || { echo "history: $status $stderr"; return 1; }
    [ "$(py 'd[0]["outcome"] if d else None')" = "$2" ]
}

# hold_key KEY: a psql session of the superuser holds the text key KEY,
# as an older pglock's run would; its backend pid in $holder_pid.
hold_key() {
    psql -X -q "$DB" -c "select pg_advisory_lock($(name_sql "$1"))" \
        -c "select pg_sleep(60)" >/dev/null 2>&1 &
    wait_until 10 eval "[ \"\$(advisory_count \"\$(name_sql \"$1\")\" t)\" -eq 1 ]"
    holder_pid=$(q "select pid from pg_locks where locktype = 'advisory' and granted
        and objsubid = 1 and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$1")")
}

@test "--record checks SELECT too (INSERT ... RETURNING needs it): without it, 69 before the lock" {
    local other=$PGLOCK_TEST_OTHER_DB
    q "drop schema if exists pglock cascade" "$other"
    "$PGLOCK_BIN" init -q -d "$other"
    q "grant usage on schema pglock to pglock_user; grant insert, update on pglock.runs to pglock_user" "$other"
    run -69 --separate-stderr "$PGLOCK_BIN" run --record -d "$other user=pglock_user" "$K" -- touch "$out/ran"
    [ "$stderr" = "pglock: error: permission denied to record runs in pglock.runs
pglock: hint: \"pglock init\" prints the GRANTs a role needs." ]
    [ ! -e "$out/ran" ]
    [ "$(q "select count(*) from pglock.runs" "$other")" -eq 0 ]
}

