#!/usr/bin/env bats
# The run history read by roles with only the documented GRANTs (those
# pglock init prints and docs/operations.md names): a reader without pg_read_all_stats tells a run going from one that
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

@test "a reader without pg_read_all_stats: another role's run is running, not unrecorded; check is OK on the last finished run; metrics agree; --prune keeps it" {
    [ "$(q "select pg_has_role('pglock_user', 'pg_read_all_stats', 'USAGE')")" = f ]
    "$PGLOCK_BIN" run --record --host-label=night1 "$K" -- true
    bg a run --record --host-label=night2 "$K" \
        -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 reader_outcome_is "$K" running
    run -0 "$PGLOCK_BIN" history -d "$READER" "$K"
    [[ "${lines[1]}" == *" running "* ]]
    run -0 "$PGLOCK_BIN" check -d "$READER" "$K" --within=1h
    [[ "$output" == "PGLOCK OK - $K succeeded on night1, started "* ]]
    # metrics: the last finished run (as check), and one run going
    local id
    id=$(q "select $(name_sql "$K")")
    run -0 --separate-stderr "$PGLOCK_BIN" metrics -d "$READER"
    printf '%s\n' "$output" | promtool check metrics
    [[ "$output" == *"pglock_runs_running{key=\"$id\",name=\"$K\"} 1"* ]]
    [[ "$output" == *"pglock_last_run_outcome{key=\"$id\",name=\"$K\",outcome=\"succeeded\"} 1"* ]]
    [[ "$output" != *"1885826162"* ]] # the run lock is no job's key
    # the runs of the window: both started (their waits recorded), one ended
    [[ "$output" == *"pglock_window_runs{key=\"$id\",name=\"$K\",outcome=\"started\"} 2"* ]]
    [[ "$output" == *"pglock_window_runs{key=\"$id\",name=\"$K\",outcome=\"succeeded\"} 1"* ]]
    [[ "$output" == *"pglock_window_wait_seconds_count{key=\"$id\",name=\"$K\"} 2"* ]]
    [[ "$output" == *"pglock_window_hold_seconds_count{key=\"$id\",name=\"$K\"} 1"* ]]
    # a pruner with the documented grants keeps the run going, deletes
    # the finished one
    q "grant delete on pglock.runs to pglock_user"
    q "update pglock.runs set started_at = started_at - interval '2 days', ended_at = ended_at - interval '2 days' where key_name = '$K'"
    run -0 --separate-stderr "$PGLOCK_BIN" history -d "$READER" --prune=1d
    [ "$(q "select string_agg(host, ',') from pglock.runs where key_name = '$K'")" = night2 ]
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
    [ ! -s "$out/a.err" ] # its end was recorded: no warning
    reader_outcome_is "$K" succeeded
}

@test "through PgBouncer (a transaction hold): the run lock lives in a transaction of the history's connection; the reader sees the run going, then its end" {
    need PGLOCK_TEST_POOLER
    bg a run --record -d "$PGLOCK_TEST_POOLER" "$K" \
        -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 reader_outcome_is "$K" running
    [ "$(py 'd[0]["hold"]')" = xact ]
    local run_id
    run_id=$(py 'd[0]["id"]')
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and granted and objsubid = 2 and classid = 1885826162 and objid::bigint = $run_id")" -eq 1 ]
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
    [ ! -s "$out/a.err" ]
    reader_outcome_is "$K" succeeded
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 2 and classid = 1885826162 and objid::bigint = $run_id")" -eq 0 ]
}

@test "running?: a row with no run lock (an older pglock's) whose backend still holds the key reads running? to a reader that cannot see that backend, running to one that can; check names the last finished run or is UNKNOWN; --prune keeps it" {
    "$PGLOCK_BIN" run --record --host-label=night1 "$K" -- true
    hold_key "$K"
    q "insert into pglock.runs (key, key_name, classid, objid, objsubid, host, hold, backend_pid, backend_start)
       select '$(q "select $(name_sql "$K")")', '$K', l.classid, l.objid, l.objsubid, 'old1', 'session', a.pid, a.backend_start
       from pg_locks l join pg_stat_activity a on a.pid = l.pid
       where l.pid = $holder_pid and l.locktype = 'advisory'" >/dev/null
    reader_outcome_is "$K" 'running?'
    outcome_is_for_superuser() {
        run -0 "$PGLOCK_BIN" history --json -d "$DB" "$K"
        [ "$(py 'd[0]["outcome"]')" = running ]
    }
    outcome_is_for_superuser
    run -0 "$PGLOCK_BIN" check -d "$READER" "$K" --within=1h
    [[ "$output" == "PGLOCK OK - $K succeeded on night1, started "*", a later run started "*" on old1 is going or ended unrecorded (cannot tell without pg_read_all_stats) | age="* ]]
    run -0 "$PGLOCK_BIN" metrics -d "$READER"
    [[ "$output" == *"pglock_runs_undetermined{key=\""*"\",name=\"$K\"} 1"* ]]
    q "grant delete on pglock.runs to pglock_user"
    q "update pglock.runs set started_at = started_at - interval '2 days', ended_at = ended_at - interval '2 days' where key_name = '$K'"
    run -0 --separate-stderr "$PGLOCK_BIN" history -d "$READER" --prune=1d
    [ "$(q "select string_agg(host, ',') from pglock.runs where key_name = '$K'")" = old1 ]
    # no finished run to name: UNKNOWN, not CRITICAL
    run -3 "$PGLOCK_BIN" check -d "$READER" "$K" --within=1h
    [[ "$output" == "PGLOCK UNKNOWN - $K has no finished run recorded, a later run started "* ]]
    # once the backend lets the key go, anyone can tell: unrecorded
    q "select pg_terminate_backend($holder_pid)" >/dev/null
    wait_until 10 reader_outcome_is "$K" unrecorded
}

@test "init --reader/--pruner/--recorder/--grant-to print GRANTs for real role names, quoted; --apply runs them in one transaction" {
    local other=$PGLOCK_TEST_OTHER_DB
    q "drop schema if exists pglock cascade" "$other"
    run -0 --separate-stderr "$PGLOCK_BIN" init -d "$other" --reader='Mon "Itor"' --pruner=pglock_user
    [ "$output" = '-- "Mon ""Itor""" reads them (history, check, metrics, doctor --record):
GRANT USAGE ON SCHEMA pglock TO "Mon ""Itor""";
GRANT SELECT ON pglock.runs TO "Mon ""Itor""";
-- "pglock_user" prunes them (history --prune):
GRANT USAGE ON SCHEMA pglock TO "pglock_user";
GRANT SELECT, DELETE ON pglock.runs TO "pglock_user";' ]
    # the template: the pruner's line grants what --prune needs
    run -0 --separate-stderr "$PGLOCK_BIN" init -d "$other"
    [[ "$output" == *"GRANT SELECT, DELETE ON pglock.runs TO pruner_role;"* ]]
    [[ "$output" != *"pg_read_all_stats"* ]]
    # --apply: the pruner may now prune
    run -0 --separate-stderr "$PGLOCK_BIN" init -q -d "$other" --pruner=pglock_user --apply
    run -0 --separate-stderr "$PGLOCK_BIN" history -d "$other user=pglock_user" --prune=1d
    [[ "$stderr" == "pglock: deleted 0 runs" ]]
    # one transaction: a role that does not exist grants nothing
    q "revoke all on pglock.runs from pglock_user; revoke all on schema pglock from pglock_user" "$other"
    run -69 --separate-stderr "$PGLOCK_BIN" init -q -d "$other" --grant-to=pglock_user --reader=no_such_role_27 --apply
    [ "$stderr" = 'pglock: error: could not grant: role "no_such_role_27" does not exist' ]
    [ "$(q "select has_table_privilege('pglock_user', 'pglock.runs', 'SELECT')" "$other")" = f ]
    run -64 "$PGLOCK_BIN" init -d "$other" --apply
}

# reader_metric_line METRIC ID: the reader's sample of METRIC for the
# key ID (as metrics prints it) in $line.
reader_metric_line() {
    run --separate-stderr "$PGLOCK_BIN" metrics -d "$READER"
    [ "$status" -eq 0 ] || { echo "metrics: $status $stderr"; return 1; }
    line=$(grep "^$1{key=\"$2\"" <<<"$output") || return 1
}

# The wait's age as status has it (pg_locks.waitstart, which every role
# reads), not pg_stat_activity.query_start, which a role without
# pg_read_all_stats cannot read for other roles' sessions; the name as
# status has it, from the pglock application_name that hashes back to
# the key (no registry, nothing recorded).
@test "a reader without pg_read_all_stats: metrics give the oldest wait's age and the lock's name, as status does" {
    bg a run "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    bg b run "$K" -- true
    wait_until 10 waiting_on "$K"
    # a wait of more than 0 s, shown under the lock's name (waitstart may
    # be unset for an instant after the wait begins: a few polls)
    local id
    id=$(q "select $(name_sql "$K")")
    wait_until 2 eval 'reader_metric_line pglock_oldest_wait_seconds "$id" &&
        [ "$line" != "pglock_oldest_wait_seconds{key=\"$id\",name=\"$K\"} 0" ]'
    [[ "$line" == "pglock_oldest_wait_seconds{key=\"$id\",name=\"$K\"} "* ]]
    run -0 --separate-stderr "$PGLOCK_BIN" metrics -d "$READER"
    printf '%s\n' "$output" | promtool check metrics
    [[ "$output" == *"pglock_locks_held{key=\"$id\",name=\"$K\"} 1"* ]]
    [[ "$output" == *"pglock_locks_waiting{key=\"$id\",name=\"$K\"} 1"* ]]
    # status, as the same role, names it alike and sees the same waiter
    run -0 --separate-stderr "$PGLOCK_BIN" status --json -d "$READER" "$K"
    [ "$(py '[l["name"] for l in d["locks"]]')" = "['$K']" ]
    touch "$out/a.release"
    finish a 10
    finish b 10
    [ "$(status_of b)" -eq 0 ]
}
