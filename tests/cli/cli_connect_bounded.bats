#!/usr/bin/env bats
# No subcommand hangs on a server that accepts and never answers (the
# harness proxy, cut), nor on a pool with no free server connection: the
# connect gets connect_timeout per host address (PGCONNECT_TIMEOUT, else
# 10 s), every query of status/doctor/key the same, and a signal during
# the connect ends pglock at once.  Bounded waits only: the limits below
# are what the test waits, never what it asserts about speed.

load helpers
bats_require_minimum_version 1.5.0

proxy_port() { sed -E 's/.*port=([0-9]+).*/\1/' <<<"$PGLOCK_TEST_PROXY"; }

setup() {
    setup_run
    need PGLOCK_TEST_PROXY PGLOCK_TEST_PROXY_CTL
}
teardown() {
    teardown_run
    proxy_cmd heal >/dev/null 2>&1 || true
    if [ -n "${PGLOCK_TEST_POOLER:-}" ]; then
        # the pool's server connections, named after their last client
        q "select count(pg_terminate_backend(pid)) from pg_stat_activity
           where application_name like 'pglock % $K%' and pid <> pg_backend_pid()" >/dev/null
    fi
}

@test "a server that never answers: every subcommand gives up after connect_timeout with 69 and says so" {
    proxy_cmd cut
    export PGCONNECT_TIMEOUT=2
    bg run run --try -d "$PGLOCK_TEST_PROXY" "$K" -- touch "$out/ran"
    bg status status -d "$PGLOCK_TEST_PROXY"
    bg doctor doctor -d "$PGLOCK_TEST_PROXY"
    bg key key -d "$PGLOCK_TEST_PROXY" hashtext:x
    local c
    for c in run status doctor key; do
        finish "$c" 20
        [ "$(status_of "$c")" = 69 ]
        grep -F 'pglock: error: ' "$out/$c.err"
        grep -F 'failed: no answer within 2 s (connect_timeout)' "$out/$c.err"
        [ "$(grep -c '^pglock: error: ' "$out/$c.err")" -eq 1 ]
    done
    [ ! -e "$out/ran" ]
}

@test "without connect_timeout or PGCONNECT_TIMEOUT the default is 10 s, not libpq's forever" {
    proxy_cmd cut
    unset PGCONNECT_TIMEOUT
    bg run run --try -d "$PGLOCK_TEST_PROXY" "$K" -- touch "$out/ran"
    finish run 30
    [ "$(status_of run)" = 69 ]
    grep -F 'no answer within 10 s (connect_timeout)' "$out/run.err"
    [ ! -e "$out/ran" ]
}

@test "a signal while connecting ends pglock at once: run 143 and 130, the others die of it" {
    proxy_cmd cut
    export PGCONNECT_TIMEOUT=60
    bg t run -v --try -d "$PGLOCK_TEST_PROXY" "$K" -- touch "$out/ran"
    bg i run -v --wait=1m -d "$PGLOCK_TEST_PROXY" "$K" -- touch "$out/ran"
    bg l lead -v -d "$PGLOCK_TEST_PROXY connect_timeout=60" "$K" -- touch "$out/ran"
    bg s status -d "$PGLOCK_TEST_PROXY"
    bg k key -d "$PGLOCK_TEST_PROXY" hashtext:x
    local c
    for c in t i l; do
        wait_until 10 grep -q connecting "$out/$c.err"
    done
    # status and key print nothing before: give them the time to connect
    wait_until 10 eval '[ "$(ss -Htn state established "( dport = :$(proxy_port) )" | wc -l)" -ge 5 ]'
    kill -TERM "$(pid_of t)" "$(pid_of l)" "$(pid_of s)" "$(pid_of k)"
    kill -INT "$(pid_of i)"
    for c in t l s k; do
        finish "$c" 5
        [ "$(status_of "$c")" = 143 ]
    done
    finish i 5
    [ "$(status_of i)" = 130 ]
    [ ! -e "$out/ran" ]
}

@test "a multi-host conninfo: a host that never answers is skipped for the next after connect_timeout" {
    proxy_cmd cut
    local primary_port
    primary_port=$(sed -E 's/.*port=([0-9]+).*/\1/' <<<"$PGLOCK_TEST_PRIMARY_TCP")
    local multi
    multi="host=127.0.0.1,127.0.0.1 port=$(proxy_port),$primary_port user=postgres dbname=postgres connect_timeout=2"
    run -0 --separate-stderr "$PGLOCK_BIN" run -v --try -d "$multi" "$K" -- sh -c 'echo ran'
    [[ "$stderr" == *"connected: database \"postgres\" on 127.0.0.1 port $primary_port"* ]]
    [ "$output" = ran ]
    run -0 "$PGLOCK_BIN" status -d "$multi"
}

@test "a pool with no free server connection: status, doctor and key give up after the query deadline with 69" {
    need PGLOCK_TEST_POOLER
    local P=$PGLOCK_TEST_POOLER n
    # The pool has 3 server connections: three holders keep one each in
    # their holding transactions.
    for n in 1 2 3; do
        bg "h$n" run -d "$P" --lease=60s "$K-$n" -c "touch $out/h$n.started; while [ ! -e $out/release ]; do sleep 0.1; done"
        wait_until 10 file_exists "$out/h$n.started"
    done
    bg status status -d "$P connect_timeout=2"
    bg doctor doctor -d "$P connect_timeout=2"
    bg key key -d "$P connect_timeout=2" hashtext:x
    local c
    for c in status doctor key; do
        finish "$c" 20
        [ "$(status_of "$c")" = 69 ]
        [ "$(grep -c '^pglock: error: ' "$out/$c.err")" -eq 1 ]
    done
    grep -F 'no answer from the server within 2000 ms' "$out/status.err"
    grep -F 'no answer from the server within 2000 ms' "$out/doctor.err"
    touch "$out/release"
    for n in 1 2 3; do
        finish "h$n" 10
        [ "$(status_of "h$n")" = 0 ]
    done
    # with a free server connection they answer
    run -0 "$PGLOCK_BIN" status -d "$P connect_timeout=2"
    run -0 "$PGLOCK_BIN" key -d "$P connect_timeout=2" hashtext:x
}

@test "a conninfo libpq refuses is a usage error in every subcommand: 64, one line, nothing connects" {
    local d sub
    for d in "host=/tmp dbnme=x" "host=/tmp sslmode=bogus"; do
        for sub in "run|--try $K -- true" "lead|$K -- true" "status|" "doctor|" "key|hashtext:x"; do
            # shellcheck disable=SC2086
            run -64 --separate-stderr timeout 10 "$PGLOCK_BIN" "${sub%%|*}" -d "$d" ${sub#*|}
            [ "$(grep -c '^pglock: error: invalid ' <<<"$stderr")" -eq 1 ]
        done
    done
    not_held "$K"
}
