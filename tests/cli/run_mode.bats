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

# pool_client_waiting APPNAME: a client of that application_name waits in
# PgBouncer for a server connection.
pool_client_waiting() {
    q 'SHOW CLIENTS' "$PGLOCK_TEST_POOLER_ADMIN" | awk -F'|' -v a="$1" '$4 == "waiting" && $NF == a { f = 1 } END { exit !f }'
}

@test "through a full pooler: setup waits within --wait, names the full pool, and a SIGTERM ends it at once" {
    need PGLOCK_TEST_POOLER PGLOCK_TEST_POOLER_ADMIN
    local P=$PGLOCK_TEST_POOLER n
    # The pool has 3 server connections: three holders keep one each.
    for n in 1 2 3; do
        bg "h$n" run -d "$P" --lease=30s "$K-$n" -c "touch $out/h$n.started; while [ ! -e $out/release ]; do sleep 0.1; done"
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
    # --try: no budget but connect_timeout's, and the same cause named
    run -69 env PGCONNECT_TIMEOUT=2 "$PGLOCK_BIN" run --try -d "$P" "$K" -- touch "$out/ran"
    [[ "$output" == *"did not answer within 2 s (connect_timeout)"*"pool may have no free server connection"* ]]
    [[ "$output" != *"connection to the server was lost"* ]]
    # --wait=30s is the bound, not connect_timeout nor a fixed 5 s: the
    # pool stays full 7 s (2 s past the old fixed bound, and past
    # connect_timeout=2), then a holder ends and the waiter runs.
    # (PgBouncer keeps the clients that gave up waiting until a server
    # connection frees: w2 is told from them by a key of its own)
    PGCONNECT_TIMEOUT=2 bg w2 run -d "$P" --wait=30s "$K-w2" -- touch "$out/ran"
    wait_until 10 pool_client_waiting "$(run_app "$K-w2")"
    local queued=$SECONDS
    wait_until 15 eval "[ \$((SECONDS - $queued)) -ge 7 ]"
    alive "$(pid_of w2)"
    touch "$out/release"
    finish w2 20
    [ "$(status_of w2)" = 0 ]
    [ -e "$out/ran" ]
    # one setup that waited, not setups given up on and retried
    [ ! -s "$out/w2.err" ]
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
