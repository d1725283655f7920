#!/usr/bin/env bats
# pglock run KEY1 KEY2 ... -- COMMAND holds every key for the job: taken in
# one canonical order (so two runs given the keys in opposite orders never
# deadlock), all or none with --try, released together; a key given twice
# is a usage error.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; A="$K-a" B="$K-b"; export A B; }
teardown() { teardown_run; }

# How many times the server's log says "deadlock detected" (0 without it).
deadlocks_logged() {
    local log=${PGLOCK_TEST_DIR:-/nonexistent}/primary.log
    if [ -e "$log" ]; then grep -c "deadlock detected" "$log" || true; else echo 0; fi
}

# free NAME: nobody holds or waits for the text key NAME.
free() { [ "$(q "select count(*) from pg_locks where locktype = 'advisory'
                and objsubid = 1 and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$1")")" = 0 ]; }

@test "every key is held while the job runs, and all are free after" {
    bg h run -d "$DB" "$A" "$B" 42:7 -c "touch $out/started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/started"
    [ "$(q "select pg_try_advisory_lock($(name_sql "$A"))")" = f ]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$B"))")" = f ]
    [ "$(q "select pg_try_advisory_lock(42, 7)")" = f ]
    # one holder: the three locks are on the one lock connection
    [ "$(q "select count(distinct pid) from pg_locks where locktype = 'advisory' and
              (objid = 7 and classid = 42 or ((classid::bigint << 32) | objid::bigint)
               in ($(name_sql "$A"), $(name_sql "$B"))) and granted")" = 1 ]
    touch "$out/release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    free "$A"
    free "$B"
    [ "$(q "select pg_try_advisory_lock(42, 7)")" = t ]
}

@test "the keys are taken in one order whatever order they are given in" {
    run "$PGLOCK_BIN" run -d "$DB" 5 1:2 "$A" int:-3 -c 'printf "%s|%s" "$PGLOCK_KEY_ID" "$PGLOCK_KEY"'
    [ "$status" -eq 0 ]
    local a
    a=$(q "select $(name_sql "$A")")
    # bigints by value (the name by its bigint), then pairs
    local ids
    ids=$(printf '%s\n' -3 5 "$a" | sort -n | tr '\n' ' ')
    [ "${output%%|*}" = "${ids}1:2" ]
    run "$PGLOCK_BIN" run -d "$DB" int:-3 "$A" 1:2 5 -c 'printf "%s" "$PGLOCK_KEY_ID"'
    [ "$output" = "${ids}1:2" ]
}

@test "two runs given the keys in opposite orders, in a loop, never deadlock" {
    local before logged
    before=$(q "select deadlocks from pg_stat_database where datname = current_database()")
    logged=$(deadlocks_logged)
    # Each job checks that no other job runs (mkdir is atomic), holds the
    # keys a moment, and leaves.
    local job="mkdir $out/in || echo overlap >> $out/overlap; sleep 0.05; rmdir $out/in"
    loop() {
        local st
        for _ in $(seq 10); do
            st=0
            "$PGLOCK_BIN" run -d "$DB" --wait=20s "$@" -c "$job" 2>>"$out/loop.err" || st=$?
            [ "$st" = 0 ] || echo "exit $st" >>"$out/failures"
        done
    }
    loop "$A" "$B" & local p1=$!
    loop "$B" "$A" & local p2=$!
    wait "$p1"
    wait "$p2"
    cat "$out/loop.err" 2>/dev/null || true
    [ ! -e "$out/failures" ]
    [ ! -e "$out/overlap" ]
    # the server's deadlock detector never fired
    [ "$(q "select deadlocks from pg_stat_database where datname = current_database()")" = "$before" ]
    [ "$(deadlocks_logged)" = "$logged" ]
}

@test "the deadlock of opposite orders, forced, does not happen" {
    # Without one order: H1 holds A, H2 holds B; R1 (A B) waits for A, R2
    # (B A) for B.  H1 lets go: R1 takes A and queues for B behind R2.  H2
    # lets go: R2 takes B and waits for A, which R1 holds: a cycle.
    local before logged
    before=$(q "select deadlocks from pg_stat_database where datname = current_database()")
    logged=$(deadlocks_logged)
    local hold="while [ ! -e $out/release.\$PGLOCK_KEY ]; do sleep 0.1; done"
    bg h1 run -d "$DB" "$A" -c "touch $out/h1; $hold"
    bg h2 run -d "$DB" "$B" -c "touch $out/h2; $hold"
    wait_until 10 file_exists "$out/h1"
    wait_until 10 file_exists "$out/h2"
    bg r1 run -d "$DB" --wait=20s "$A" "$B" -- true
    bg r2 run -d "$DB" --wait=20s "$B" "$A" -- true
    waiters() { [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and not granted")" -ge 2 ]; }
    wait_until 10 waiters
    touch "$out/release.$A"
    finish h1 10
    # R1 takes the first key and queues for the second
    wait_until 10 waiters
    touch "$out/release.$B"
    finish h2 10
    finish r1 20
    finish r2 20
    cat "$out/r1.err" "$out/r2.err"
    [ "$(deadlocks_logged)" = "$logged" ]
    [ "$(status_of r1)" = 0 ]
    [ "$(status_of r2)" = 0 ]
    [ "$(q "select deadlocks from pg_stat_database where datname = current_database()")" = "$before" ]
}

@test "--try takes every key or none" {
    bg h run -d "$DB" "$B" -c "touch $out/started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/started"
    run -75 "$PGLOCK_BIN" run -d "$DB" --try "$A" "$B" -- touch "$out/ran"
    [[ "$output" == *"lock \"$B\""*"is held by $(uname -n) (backend pid "*"\"$(run_app "$B")\", held "*"; the command was not run"* ]]
    [ ! -e "$out/ran" ]
    # the key that was free was given back: nobody holds it
    free "$A"
    # a wait that runs out is the same: none held, command not run
    run -75 "$PGLOCK_BIN" run -d "$DB" --wait=300ms "$A" "$B" -- touch "$out/ran"
    [ ! -e "$out/ran" ]
    free "$A"
    touch "$out/release"
    finish h 10
}

@test "losing the connection loses every key: the job is stopped, 74" {
    bg h run -d "$DB" --lease=3s "$A" "$B" -c "echo \$PGLOCK_BACKEND_PID > $out/pid; exec sleep 60"
    wait_until 10 file_exists "$out/pid"
    wait_until 5 held "$B"
    q "select pg_terminate_backend($(cat "$out/pid"))" >/dev/null
    finish h 10
    [ "$(status_of h)" = 74 ]
    free "$A"
    free "$B"
}

@test "bad input: a key twice, too many keys, several keys for lead: 64, nothing locked" {
    run -64 "$PGLOCK_BIN" run -d "$DB" "$A" "$B" "$A" -- touch "$out/ran"
    [ "${lines[0]}" = "pglock: error: key \"$A\" given twice" ]
    run -64 "$PGLOCK_BIN" run -d "$DB" 5 int:5 -- touch "$out/ran"
    [ "${lines[0]}" = 'pglock: error: keys "5" and "int:5" are the same lock' ]
    # the same lock spelt as a name and as its bigint
    run -64 "$PGLOCK_BIN" run -d "$DB" "$A" "int:$(q "select $(name_sql "$A")")" -- touch "$out/ran"
    [[ "${lines[0]}" == "pglock: error: keys "*" are the same lock" ]]
    # a legacy key's value is known only to the server: refused after asking
    run -64 "$PGLOCK_BIN" run -d "$DB" "hashtext:$A" "int:$(q "select hashtext('$A')")" -- touch "$out/ran"
    [[ "${lines[0]}" == "pglock: error: keys "*" are the same lock" ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" $(seq 1 33) -- touch "$out/ran"
    [ "${lines[0]}" = "pglock: error: too many keys (at most 32)" ]
    run -64 "$PGLOCK_BIN" lead -d "$DB" "$A" "$B" -- touch "$out/ran"
    [[ "${lines[0]}" == "pglock: error: lead takes one key"* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" "$A" -s "$B" -- touch "$out/ran"
    [[ "${lines[0]}" == "pglock: error: option \"-s\" after the key"* ]]
    [ ! -e "$out/ran" ]
    free "$A"
    free "$B"
    # (named by key: a pooler keeps older suites' server connections)
    [ "$(q "select count(*) from pg_stat_activity where application_name like 'pglock run %$K%'")" = 0 ]
}

@test "keys longer together than PGLOCK_KEY holds (4095 bytes) are refused, 64, before the lock; never cut" {
    local a b
    a="$K-$(printf '%*s' 2100 '' | tr ' ' a)"
    b="$K-$(printf '%*s' 2100 '' | tr ' ' b)"
    run -64 --separate-stderr "$PGLOCK_BIN" run -d "$DB" "$a" "$b" -- touch "$out/ran"
    [[ "${stderr_lines[0]}" == "pglock: error: the keys are too long: PGLOCK_KEY would be "*" bytes (at most 4095)" ]]
    [ ! -e "$out/ran" ]
    [ "$(advisory_count "$(name_sql "$a")" t)" -eq 0 ]
    # under the limit, the job reads them whole
    a="$K-$(printf '%*s' 1900 '' | tr ' ' a)"
    run -0 "$PGLOCK_BIN" run -d "$DB" "$a" "$b" -c 'printf %s "$PGLOCK_KEY" | wc -c'
    [ "$output" -eq $((${#a} + 1 + ${#b})) ]
}
