#!/usr/bin/env bats
# pglock run --mode through PgBouncer in transaction mode (pool of 3): the
# lock is held in a transaction, exactly one of concurrent --try runs runs,
# nothing is left locked on any server backend, and --mode=session is
# refused with 69.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_POOLER
    P=$PGLOCK_TEST_POOLER
}
teardown() { teardown_run; }

# Advisory locks on any server backend, of K: none left.
none_on_server() { [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ] &&
                   [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]; }

@test "through the pooler: exactly one of four concurrent --try runs runs; nothing stays locked" {
    local n
    bg w run --try -d "$P" "$K" -c "$(stamp_job w)"
    wait_until 10 file_exists "$out/w.start"
    for n in 1 2 3; do
        bg "l$n" run --try -d "$P" "$K" -c "touch $out/l$n.ran"
    done
    for n in 1 2 3; do
        finish "l$n" 20
        [ "$(status_of "l$n")" = 75 ]
        [ ! -e "$out/l$n.ran" ]
    done
    # the winner held it all along, in a transaction that keeps no xid
    held "$K"
    [ "$(q "select count(*) from pg_stat_activity a join pg_locks l using (pid)
            where l.locktype = 'advisory' and a.state = 'idle in transaction'
              and a.backend_xid is null and a.backend_xmin is null
              and ((l.classid::bigint << 32) | l.objid::bigint) = $(name_sql "$K")")" -eq 1 ]
    # a direct connection cannot take it either
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = f ]
    touch "$out/w.release"
    finish w 10
    [ "$(status_of w)" = 0 ]
    wait_until 5 none_on_server
}

@test "--mode=xact runs the command with a fencing token through the pooler; --mode=auto too" {
    run -0 "$PGLOCK_BIN" run --fencing-token --mode=xact -d "$P" "$K" -- sh -c 'echo "token=$PGLOCK_FENCING_TOKEN"'
    [[ "$output" =~ token=[0-9]+ ]]
    local t1=${output#token=}
    run -0 "$PGLOCK_BIN" run --fencing-token -d "$P" "$K" -- sh -c 'echo "token=$PGLOCK_FENCING_TOKEN"'
    [ "${output#token=}" -gt "$t1" ]
    none_on_server
}

@test "--mode=session behind the pooler exits 69 naming the pooler; nothing runs" {
    run -69 "$PGLOCK_BIN" run --mode=session -d "$P" "$K" -- touch "$out/ran"
    [[ "$output" == *"pooler"* ]]
    [[ "$output" == *"--mode"* ]]
    [ ! -e "$out/ran" ]
    none_on_server
}

# pool_waiting: a client of PgBouncer waits for a server connection.
pool_waiting() {
    [ "$(q 'SHOW POOLS' "$PGLOCK_TEST_POOLER_ADMIN" | awk -F'|' '{s += $4} END {print s + 0}')" -ge 1 ]
}

@test "through a full pooler: setup waits within --wait, names the full pool, and a SIGTERM ends it at once" {
    need PGLOCK_TEST_POOLER PGLOCK_TEST_POOLER_ADMIN
    local P=$PGLOCK_TEST_POOLER n
    # The pool has 3 server connections: three holders keep one each.
    for n in 1 2 3; do
        bg "h$n" run -d "$P" --lease=30s "$K-$n" -c "touch $out/h$n.started; while [ ! -e $out/release ]; do sleep 0.02; done"
        wait_until 10 file_exists "$out/h$n.started"
    done
    run -69 "$PGLOCK_BIN" run -d "$P" --wait=3s "$K" -- touch "$out/ran"
    [[ "$output" == *"did not answer within 3 s"*"pool may have no free server connection"* ]]
    # a stop signal while setup waits in the pool: at once, not at
    # connect_timeout (60 s here)
    bg w run -d "$P" --wait=60s "$K" -- touch "$out/ran"
    wait_until 10 pool_waiting
    kill -TERM "$(pid_of w)"
    finish w 5
    [ "$(status_of w)" = 143 ]
    [ ! -e "$out/ran" ]
    touch "$out/release"
    for n in 1 2 3; do
        finish "h$n" 10
        [ "$(status_of "h$n")" = 0 ]
    done
}

@test "--mode with a bad value is a usage error" {
    run -64 "$PGLOCK_BIN" run --mode=transaction "$K" -- true
    [[ "$output" == *"session, xact or auto"* ]]
}

@test "a pooled holder whose server backend is terminated loses the lock (74)" {
    bg h run --mode=xact -d "$P" --lease=3s "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    local pid
    pid=$(q "select pid from pg_locks where locktype = 'advisory' and granted
             and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")")
    q "select pg_terminate_backend($pid)" >/dev/null
    finish h 10
    [ "$(status_of h)" = 74 ]
    gone "$(cat "$out/h.jobpid")"
    none_on_server
}
