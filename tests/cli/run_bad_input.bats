#!/usr/bin/env bats
# pglock run: bad input leaves nothing on the server, usage errors come
# before any connection, exit-code options take their whole 0-255 range,
# a password is never echoed, and an interrupted wait leaves no waiter and
# no session.  Every check of the server is bounded polling.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    # Sessions that began before the test are not its own: PgBouncer keeps
    # its server connections, named after their last client (e.g. "pglock
    # doctor" from an earlier suite).
    test_started=$(q "select now()")
}
teardown() { teardown_run; }

# no_pglock_session [CONNINFO]: no backend of any `pglock` process (they
# all set application_name "pglock ...") that began during the test, and
# no advisory lock of the test key, is on the server.  A backend ends a
# moment after its client, hence the bounded wait.
no_pglock_session() {
    local db=${1:-$DB}
    local ours="application_name like 'pglock %' and backend_start >= '$test_started'"
    sessions() { [ "$(q "select count(*) from pg_stat_activity where $ours" "$db")" -eq 0 ]; }
    wait_until 5 sessions || {
        q "select pid, application_name, state from pg_stat_activity where $ours" "$db"
        return 1
    }
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory'
            and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")" "$db")" -eq 0 ]
}

# usage_64: the last run failed with 64, one error line, and ran nothing.
usage_64() {
    [ "$status" -eq 64 ]
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: ')" -eq 1 ]
    [ ! -e "$out/ran" ]
}

@test "every usage error is 64 before any connection, and nothing is left on the server" {
    printf 'billing = 72001\nbilling = 72002\n' >"$out/dup"
    printf 'x = 42:x\n' >"$out/badkey"
    printf 'billing = 72001\n' >"$out/keys"
    local -a cases=(
        "-- 9223372036854775808" "-- 42:x" "-- ''" "-- int:" "-- 1e3"
        "-w 5x $K" "--lease=abc $K" "--kill-after=-1 $K" "--min-hold=1y $K"
        "--lease=30s --kill-after=6s $K" "-w 9999999h $K" "--bogus $K" "-n -w 1s $K" "-w 1s --try $K"
        "--conflict-exit-code=256 $K" "--conflict-exit-code=-1 $K"
        "--lost-exit-code=1e2 $K" "--lost-exit-code= $K"
        "--keys $out/keys @missing" "--keys $out/dup @billing"
        "--keys $out/badkey @x" "--keys $out/nonexistent @billing" "@billing"
        "--mode=bogus $K"
        # sums of durations must not wrap around (a huge --kill-after once
        # passed the lease check; a huge --min-hold was ignored)
        "--lease=2147483647ms --kill-after=9223372035854775807ms $K"
        "--min-hold=9223372036854775807ms $K" "--lease=2147483648ms $K"
    )
    local c
    for c in "${cases[@]}"; do
        # The server is reachable: a usage error must still win, and the
        # same input against a server that is down is 64 too, not 69.
        eval "run \"\$PGLOCK_BIN\" run -d \"\$DB\" $c -- touch \"\$out/ran\""
        echo "case: $c -> $status: $output"
        usage_64
        if [ -n "${PGLOCK_TEST_DOWN:-}" ]; then
            eval "run \"\$PGLOCK_BIN\" run -d \"\$PGLOCK_TEST_DOWN\" $c -- touch \"\$out/ran\""
            usage_64
        fi
    done
    PGLOCK_KEYS=$out/keys run "$PGLOCK_BIN" run -d "$DB" @missing -- touch "$out/ran"
    usage_64
    PGLOCK_KEYS=$out/nonexistent run "$PGLOCK_BIN" run -d "$DB" @billing -- touch "$out/ran"
    usage_64
    [[ "$output" == *nonexistent* ]]
    no_pglock_session
}

@test "connection failures leave no session behind: down, bad conninfo, wrong password" {
    local -a dbs=("host=/nonexistent-dir port=1")
    [ -n "${PGLOCK_TEST_DOWN:-}" ] && dbs+=("$PGLOCK_TEST_DOWN")
    local d
    for d in "${dbs[@]}"; do
        run "$PGLOCK_BIN" run -d "$d" "$K" -- touch "$out/ran"
        [ "$status" -eq 69 ]
        [ ! -e "$out/ran" ]
    done
    # A conninfo libpq refuses is the caller's mistake: 64, like any
    # other bad option.
    for d in "bogus_option=1" "postgresql://%zz" "host=/tmp sslmode=bogus"; do
        run -64 "$PGLOCK_BIN" run -d "$d" "$K" -- touch "$out/ran"
        [ ! -e "$out/ran" ]
    done
    if [ -n "${PGLOCK_TEST_PW_CONNINFO:-}" ]; then
        PGPASSWORD=wrong run -69 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
        [ ! -e "$out/ran" ]
    fi
    no_pglock_session
}

@test "a standby: 69, and no session is left on the standby or the primary" {
    need PGLOCK_TEST_STANDBY
    run -69 "$PGLOCK_BIN" run -v -d "$PGLOCK_TEST_STANDBY" "$K" -- touch "$out/ran"
    [ ! -e "$out/ran" ]
    no_pglock_session "$PGLOCK_TEST_STANDBY"
    no_pglock_session
}

# lead_retried CONNINFO: pglock lead -v -d CONNINFO, which retries a server
# it cannot reach forever, stopped once it has said so three times (the
# warning, then -v's line for each retry), or ended by itself (a usage
# error); its output and status in $output and $status, as from `run`.
lead_retried() {
    bg lead lead -v -d "$1" "$K" -- true
    said_it_thrice() { [ "$(grep -c 'could not connect' "$out/lead.err")" -ge 3 ]; }
    wait_until 10 eval 'said_it_thrice || gone "$(pid_of lead)"' || true
    kill -TERM "$(pid_of lead)" 2>/dev/null || true
    finish lead 10
    status=$(status_of lead)
    output=$(cat "$out/lead.out" "$out/lead.err")
}

@test "a password in conninfo, URI or PGPASSWORD is never printed, whatever fails" {
    local s=s3cr3t-$RANDOM
    local -a dbs=("password=$s bogus_option=1" "postgresql://u:$s@/%zz"
        "host=/nonexistent-dir password=$s" "postgresql://u:$s@127.0.0.1:1/db"
        "service=no-such-service password=$s")
    [ -n "${PGLOCK_TEST_PW_CONNINFO:-}" ] && dbs+=("$PGLOCK_TEST_PW_CONNINFO password=$s")
    [ -n "${PGLOCK_TEST_STANDBY:-}" ] && dbs+=("$PGLOCK_TEST_STANDBY password=$s")
    local d sub
    for d in "${dbs[@]}"; do
        for sub in "run -v -d" "lead -v -d" "status -d" "doctor -d"; do
            case $sub in
            run*) PGPASSWORD=$s run "$PGLOCK_BIN" $sub "$d" "$K" -- true ;;
            lead*) PGPASSWORD=$s lead_retried "$d" ;;
            *) PGPASSWORD=$s run "$PGLOCK_BIN" $sub "$d" ;;
            esac
            echo "pglock $sub [$d] -> $status: $output"
            [[ "$output" != *"$s"* ]]
        done
    done
    # The password's own failure, with it given every way at once.
    if [ -n "${PGLOCK_TEST_PW_CONNINFO:-}" ]; then
        PGPASSWORD=$s run -69 "$PGLOCK_BIN" run -v -d "$PGLOCK_TEST_PW_CONNINFO password=$s" "$K" -- true
        [[ "$output" == *"password authentication failed"* ]]
        [[ "$output" != *"$s"* ]]
    fi
}

@test "exit-code options take 0 and 255 and use them" {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    run "$PGLOCK_BIN" run --try --conflict-exit-code=0 -d "$DB" "$K" -- touch "$out/ran"
    [ "$status" -eq 0 ]
    [ ! -e "$out/ran" ]
    run "$PGLOCK_BIN" run --try --conflict-exit-code=255 -d "$DB" "$K" -- touch "$out/ran"
    [ "$status" -eq 255 ]
    run "$PGLOCK_BIN" run -w 200ms --conflict-exit-code=1 -d "$DB" "$K" -- touch "$out/ran"
    [ "$status" -eq 1 ]
    [ ! -e "$out/ran" ]
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    bg l run -d "$DB" --lease=3s --lost-exit-code=0 "$K" -c "echo \$PGLOCK_BACKEND_PID > $out/backend; $(stamp_job l)"
    wait_until 10 file_exists "$out/l.start"
    q "select pg_terminate_backend($(cat "$out/backend"))" >/dev/null
    finish l 10
    [ "$(status_of l)" = 0 ]
    grep -q lost "$out/l.err"
    gone "$(cat "$out/l.jobpid")"
}

# interrupted SIG CODE: a waiter given SIG while queued behind a holder
# exits CODE; its wait and its session are gone while the holder still
# holds (the holder writes the key as text:K, so its application_name
# differs from the waiter's), and the waiter's command never ran.
interrupted() {
    bg h run -d "$DB" "text:$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" "$K" -- touch "$out/w.ran"
    wait_until 10 waiting_on "$K"
    [ "$(q "select count(*) from pg_stat_activity where application_name = '$(run_app "$K")'")" -eq 1 ]
    kill "-$1" "$(pid_of w)"
    finish w 10
    [ "$(status_of w)" = "$2" ]
    [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]
    no_waiter_session() { [ "$(q "select count(*) from pg_stat_activity where application_name = '$(run_app "$K")'")" -eq 0 ]; }
    wait_until 5 no_waiter_session
    # The holder is untouched.
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 1 ]
    alive "$(pid_of h)"
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    [ ! -e "$out/w.ran" ]
    no_pglock_session
}

@test "SIGTERM while waiting: exit 143, no waiter and no session left" {
    interrupted TERM 143
}

@test "SIGINT while waiting: exit 130, no waiter and no session left" {
    interrupted INT 130
}

@test "SIGHUP and SIGQUIT while waiting: 128+N, nothing left" {
    interrupted HUP 129
    rm -f "$out"/h.* "$out"/w.*
    interrupted QUIT 131
}
