#!/usr/bin/env bats
# Every step pglock takes while it holds the lock, outside the command, is
# bounded by the lease: the fencing token (a commit that waits for a
# synchronous standby that is not there; a pooler with no free server
# connection for the token's second connection), and the final ownership
# check.  A command that never started exits 69 and says so; nothing stays
# locked.  Leases are 3 s (T_c 2 s).

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    teardown_run
    # PgBouncer keeps its server connections, named after their last client
    # ("pglock run KEY"): end them, so no later test mistakes them for a
    # pglock left behind (the pooler replaces them as needed).
    q "select count(pg_terminate_backend(pid)) from pg_stat_activity
       where application_name like 'pglock % $K%' and pid <> pg_backend_pid()" >/dev/null
    if [ -n "${sync_set:-}" ]; then
        q "alter system reset synchronous_standby_names" >/dev/null
        q "select pg_reload_conf()" >/dev/null
    fi
    if [ -n "${PGLOCK_TEST_PROXY_CTL:-}" ]; then
        proxy_cmd heal >/dev/null 2>&1 || true
    fi
}

# Commits now wait for a synchronous standby that never connects.
stall_commits() {
    sync_set=1
    q "alter system set synchronous_standby_names = 'pglock_no_such_standby'" >/dev/null
    q "select pg_reload_conf()" >/dev/null
    wait_until 5 eval '[ "$(q "show synchronous_standby_names")" = pglock_no_such_standby ]'
}

@test "a fencing token whose commit waits for a missing synchronous standby: 69 by the client deadline, the command not run, the lock free" {
    stall_commits
    local t0
    t0=$(now_ms)
    run -69 "$PGLOCK_BIN" run --fencing-token -d "$DB" --lease=3s "$K" -- touch "$out/ran"
    local took=$(($(now_ms) - t0))
    [[ "$output" == *"pglock: error: lock \"$K\" acquired, but could not take a fencing token"*"the command was not run"* ]]
    [[ "$output" == *"synchronous_standby_names"* ]] # the hint
    [ ! -e "$out/ran" ]
    not_held "$K"
    # no session of ours is left waiting on the commit
    [ "$(q "select count(*) from pg_stat_activity where wait_event = 'SyncRep' and application_name like 'pglock%'")" -eq 0 ]
    report "sync-rep stall: pglock run gave up after ${took} ms (client deadline 2000 ms)"
    # without --fencing-token nothing commits: the command runs
    run -0 "$PGLOCK_BIN" run -d "$DB" --lease=3s "$K" -- sh -c 'echo "token=${PGLOCK_FENCING_TOKEN-unset}"'
    [ "$output" = token=unset ]
}

@test "SIGTERM while the fencing token's commit stalls: 143 at once, the command not run, the lock free" {
    stall_commits
    bg h run --fencing-token -d "$DB" --lease=30s "$K" -- touch "$out/ran"
    wait_until 10 held "$K"
    wait_until 10 eval '[ "$(q "select count(*) from pg_stat_activity where wait_event = '"'SyncRep'"'")" -ge 1 ]'
    kill -TERM "$(pid_of h)"
    finish h 5
    [ "$(status_of h)" = 143 ]
    [ ! -e "$out/ran" ]
    wait_until 5 not_held "$K"
}

@test "lead: a token that cannot commit releases the lock, warns and contends again; once commits work it leads" {
    stall_commits
    bg l lead -d "$DB" --lease=3s "$K" -- sh -c "echo \$PGLOCK_FENCING_TOKEN > $out/token; exec sleep 60"
    wait_until 15 grep -q "pglock: warning: lock \"$K\" acquired, but could not take a fencing token" "$out/l.err"
    [ ! -e "$out/token" ]
    alive "$(pid_of l)"
    q "alter system reset synchronous_standby_names" >/dev/null
    q "select pg_reload_conf()" >/dev/null
    wait_until 20 file_exists "$out/token"
    [ "$(cat "$out/token")" -gt 0 ]
    held "$K"
    kill -TERM "$(pid_of l)"
    finish l 10
    [ "$(status_of l)" = 143 ]
    not_held "$K"
}

@test "through PgBouncer with no free server connection for the token: 69 by the client deadline, the command not run" {
    need PGLOCK_TEST_POOLER
    local P=$PGLOCK_TEST_POOLER n
    # The pool has 3 server connections: two holders keep one each in their
    # holding transactions, the third run's lock takes the last.
    for n in 1 2; do
        bg "h$n" run -d "$P" --lease=30s "$K-$n" -c "touch $out/h$n.started; while [ ! -e $out/release ]; do sleep 0.1; done"
        wait_until 10 file_exists "$out/h$n.started"
    done
    run -69 "$PGLOCK_BIN" run --fencing-token -d "$P" --lease=3s "$K" -- touch "$out/ran"
    [[ "$output" == *"acquired, but could not take a fencing token"*"the command was not run"* ]]
    [ ! -e "$out/ran" ]
    not_held "$K"
    touch "$out/release"
    for n in 1 2; do
        finish "h$n" 10
        [ "$(status_of "h$n")" = 0 ]
    done
    # with a free server connection the token comes
    run -0 "$PGLOCK_BIN" run --fencing-token -d "$P" --lease=3s "$K" -- sh -c 'echo "$PGLOCK_FENCING_TOKEN"'
    [ "$output" -gt 0 ]
}

@test "lead: a command that ends by itself after a silent loss: the final ownership check fails, exit 74" {
    need PGLOCK_TEST_PROXY
    run -74 "$PGLOCK_BIN" lead -d "$PGLOCK_TEST_PROXY" --lease=3s "$K" -- \
        "$PGLOCK_TEST_PROXY_BIN" --control "$PGLOCK_TEST_PROXY_CTL" --send cut
    [[ "$output" == *"pglock: error: leadership of \"$K\" lost while the command ran"* ]]
    proxy_cmd heal
    # and when nothing went wrong, the command's own status
    run -3 "$PGLOCK_BIN" lead -d "$PGLOCK_TEST_PROXY" --lease=3s "$K" -- sh -c 'exit 3'
}
