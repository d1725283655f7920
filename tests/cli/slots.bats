#!/usr/bin/env bats
# pglock run --slots=N NAME: a semaphore.  At most N jobs hold NAME at
# once, each in a slot of its own (PGLOCK_SLOT); slot i is the text key
# "<KEY_ID>#<i>", the gate "<KEY_ID>#gate" (pglock-run(1)).  --try takes any
# free slot in one statement or exits 75; a wait is woken by the server.

load helpers
load sessions
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    sessions_setup
    KID=$(q "select $(name_sql "$K")")
    export KID
}
# a job left waiting for $out/release must not outlive a failed test
teardown() {
    touch "$out/release"
    sessions_teardown
    teardown_run
    q "drop role if exists \"pglock_slots_$$\"" >/dev/null 2>&1 || true
}

# slot_sql I: the bigint of slot I of $K, by the documented rule.
slot_sql() { name_sql "$KID#$1"; }
# slot_locks GRANTED(t|f): requests for any slot or the gate of $K.
slot_locks() {
    local ids i
    ids=$(name_sql "$KID#gate")
    for i in 0 1 2 3; do ids="$ids, $(slot_sql "$i")"; done
    qpoll "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1
         and granted = '$1' and ((classid::bigint << 32) | objid::bigint) in ($ids)"
}
# decl_locks: granted declarations "<KEY_ID>#n=<M>" of $K, M in 1..4.
decl_locks() {
    local ids m
    ids=$(name_sql "$KID#n=1")
    for m in 2 3 4; do ids="$ids, $(name_sql "$KID#n=$m")"; done
    qpoll "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1
         and granted and ((classid::bigint << 32) | objid::bigint) in ($ids)"
}
nothing_left() {
    [ "$(slot_locks t)" = 0 ] && [ "$(slot_locks f)" = 0 ] && [ "$(decl_locks)" = 0 ]
}
count_files() { find "$out" -maxdepth 1 -name "$1" | wc -l; }
files_at_least() { [ "$(count_files "$1")" -ge "$2" ]; }

# A job for slot tests: records its slot, checks (atomically, with mkdir)
# that no concurrent holder has its slot and that at most $2 jobs are in,
# then holds until $out/release (or for $3 s).
slot_job() {
    printf '%s' "echo \$PGLOCK_SLOT > $out/$1.slot
      mkdir $out/slot-\$PGLOCK_SLOT || echo same-slot >> $out/overlap
      touch $out/in.$1
      [ \$(ls $out | grep -c '^in\\.') -le $2 ] || echo too-many >> $out/overlap
      touch $out/$1.started
      if [ -n '${3:-}' ]; then sleep ${3:-0}; else
        while [ ! -e $out/release ]; do sleep 0.1; done; fi
      rm $out/in.$1; rmdir $out/slot-\$PGLOCK_SLOT"
}

# ended NAMES...: how many of these bg pglocks no longer run.
ended() {
    local n=0 name
    for name in "$@"; do gone "$(pid_of "$name")" && n=$((n + 1)); done
    echo "$n"
}
ended_at_least() { local want=$1; shift; [ "$(ended "$@")" -ge "$want" ]; }

@test "--try: of N+1 jobs at once, exactly N run, each in its own slot, one exits 75" {
    local i
    for i in 1 2 3 4; do
        bg "j$i" run -d "$DB" --slots=3 --try "$K" -c "$(slot_job "j$i" 3)"
    done
    wait_until 15 files_at_least '*.started' 3
    wait_until 15 ended_at_least 1 j1 j2 j3 j4
    [ "$(count_files '*.started')" = 3 ]
    [ "$(ended j1 j2 j3 j4)" = 1 ]
    local busy
    for i in 1 2 3 4; do gone "$(pid_of "j$i")" && busy=j$i; done
    finish "$busy" 5
    [ "$(status_of "$busy")" = 75 ]
    [ ! -e "$out/$busy.started" ]
    grep -q 'all 3 slots of lock' "$out/$busy.err"
    # the three holders hold slots 0, 1 and 2, one each, on three backends
    [ "$(cat "$out"/*.slot | sort | tr '\n' ' ')" = "0 1 2 " ]
    for i in 0 1 2; do
        [ "$(advisory_count "$(slot_sql "$i")" t)" = 1 ]
    done
    # and no backend of theirs holds more than one slot (a try takes one),
    # besides its declaration of N
    [ "$(q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
            where l.locktype = 'advisory' and a.application_name = '$(run_app "$K")'
              and ((l.classid::bigint << 32) | l.objid::bigint)
                  <> $(name_sql "$KID#n=3")
            group by l.pid order by 1 desc limit 1")" = 1 ]
    [ "$(decl_locks)" = 3 ]
    touch "$out/release"
    for i in 1 2 3 4; do
        [ "j$i" = "$busy" ] && continue
        finish "j$i" 15
        [ "$(status_of "j$i")" = 0 ]
    done
    [ ! -e "$out/overlap" ]
    nothing_left
}

@test "--wait: N+2 jobs never exceed N holders, and every one runs" {
    local i
    for i in 1 2 3 4; do
        bg "j$i" run -d "$DB" --slots=2 --wait=30s "$K" -c "$(slot_job "j$i" 2 0.3)"
    done
    for i in 1 2 3 4; do
        finish "j$i" 30
        cat "$out/j$i.err"
        [ "$(status_of "j$i")" = 0 ]
        [ -e "$out/j$i.started" ]
    done
    [ ! -e "$out/overlap" ]
    nothing_left
}

@test "a holder killed -9 frees its slot for a waiter" {
    bg h1 run -d "$DB" --slots=2 "$K" -c "$(slot_job h1 2)"
    bg h2 run -d "$DB" --slots=2 "$K" -c "$(slot_job h2 2)"
    wait_until 15 files_at_least '*.started' 2
    bg w run -d "$DB" --slots=2 --wait=30s "$K" -c "echo \$PGLOCK_SLOT > $out/w.slot"
    # the head waiter watches both slots
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 2 ]"
    [ ! -e "$out/w.slot" ]
    kill -KILL "$(pid_of h1)"
    finish w 15
    [ "$(status_of w)" = 0 ]
    [ "$(cat "$out/w.slot")" = "$(cat "$out/h1.slot")" ]
    touch "$out/release"
    finish h2 15
    wait_until 10 nothing_left
}

@test "a stop signal while waiting exits 128+N, the command not run, nothing left" {
    bg h run -d "$DB" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    bg head run -d "$DB" --slots=1 "$K" -c "touch $out/head.ran"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ]"
    bg queued run -d "$DB" --slots=1 --wait=30s "$K" -c "touch $out/queued.ran"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 2 ]"
    kill -TERM "$(pid_of head)" "$(pid_of queued)"
    finish head 10
    finish queued 10
    [ "$(status_of head)" = 143 ]
    [ "$(status_of queued)" = 143 ]
    [ ! -e "$out/head.ran" ]
    [ ! -e "$out/queued.ran" ]
    # only the holder's slot is left, nobody waits, the gate is free
    wait_until 10 eval "[ \"\$(slot_locks f)\" = 0 ]"
    [ "$(slot_locks t)" = 1 ]
    touch "$out/release"
    finish h 10
    nothing_left
}

@test "a server restart while the head waits on the slots: reconnects, says so once, runs in a slot" {
    need PGLOCK_TEST_HARNESS
    bg h run -d "$DB" --lease=3s --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    bg w run -d "$DB" --lease=3s --slots=1 --wait=60s "$K" -c "echo \$PGLOCK_SLOT > $out/w.slot"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ]"
    "$PGLOCK_TEST_HARNESS" restart-primary >/dev/null
    finish h 15
    [ "$(status_of h)" = 74 ]
    finish w 30
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    [ "$(cat "$out/w.slot")" = 0 ]
    [ "$(grep -c "^pglock: warning: connection lost while waiting for a slot of lock \"$K\": .*; reconnecting within --wait$" "$out/w.err")" = 1 ]
    [ "$(wc -l <"$out/w.err")" = 1 ]
    wait_until 10 nothing_left
}

# gate_holder: the backend pid that holds the gate of $K (empty: none).
gate_holder() {
    qpoll "select pid from pg_locks where locktype = 'advisory' and objsubid = 1 and granted
         and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$KID#gate")"
}

@test "the head keeps the gate past its lease while it waits on the slots: one head, then a slot" {
    bg h run -d "$DB" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    bg w run -d "$DB" --lease=1s --slots=1 --wait=30s "$K" -c "echo \$PGLOCK_SLOT > $out/w.slot"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ]"
    local head
    head=$(gate_holder)
    [ -n "$head" ]
    # three leases: only the gate's heartbeats keep idle_session_timeout
    # from ending the head's session (and letting a second head in)
    sleep 3
    [ "$(gate_holder)" = "$head" ]
    touch "$out/release"
    finish h 15
    [ "$(status_of h)" = 0 ]
    finish w 30
    [ "$(status_of w)" = 0 ] || { cat "$out/w.err"; false; }
    [ "$(cat "$out/w.slot")" = 0 ]
    wait_until 10 nothing_left
}

@test "a watcher that cannot connect ends the head's wait with its reason, gate given back" {
    # A role allowed 4 connections: 2 holders, the head's own, and one of
    # its 2 watchers; the other watcher is refused.  Waiting on would hold
    # the gate (and the queue) for the one slot still watched.
    local role="pglock_slots_$$"
    q "create role \"$role\" login connection limit 4" >/dev/null
    local as="$DB user=$role"
    bg h1 run -d "$as" --slots=2 "$K" -c "$(slot_job h1 2)"
    bg h2 run -d "$as" --slots=2 "$K" -c "$(slot_job h2 2)"
    wait_until 15 files_at_least '*.started' 2
    bg w run -d "$as" --slots=2 "$K" -c "touch $out/w.ran"
    finish w 20
    cat "$out/w.err"
    [ "$(status_of w)" = 69 ]
    grep -E "could not wait for slot [01]: .*too many connections for role" "$out/w.err"
    [ "$(grep -c '^pglock: error: ' "$out/w.err")" = 1 ]
    [ ! -e "$out/w.ran" ]
    # the holders keep their slots; nobody waits, the gate is free
    wait_until 10 eval "[ \"\$(slot_locks f)\" = 0 ]"
    [ "$(slot_locks t)" = 2 ]
    touch "$out/release"
    finish h1 10
    finish h2 10
    wait_until 10 nothing_left
    q "drop role \"$role\"" >/dev/null
}

@test "--wait=DURATION that runs out: 75, the command not run, nothing left" {
    bg h run -d "$DB" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    run "$PGLOCK_BIN" run -d "$DB" --slots=1 --wait=1s "$K" -c "touch $out/w.ran"
    [ "$status" -eq 75 ]
    [[ "$output" == *"still held after the wait"* ]]
    [ ! -e "$out/w.ran" ]
    [ "$(slot_locks f)" = 0 ]
    [ "$(slot_locks t)" = 1 ]
    touch "$out/release"
    finish h 10
    nothing_left
}

@test "bad --slots input: one line and 64, nothing locked" {
    local v
    for v in 0 65 -1 abc 3x 03 ''; do
        run --separate-stderr "$PGLOCK_BIN" run -d "$DB" --slots="$v" "$K" -c "touch $out/ran"
        [ "$status" -eq 64 ]
        [ "${stderr%%$'\n'*}" = "pglock: error: invalid value for --slots: \"$v\" (expected 1 to 64)" ]
    done
    run --separate-stderr "$PGLOCK_BIN" run -d "$DB" --slots=2 --shared "$K" -c "touch $out/ran"
    [ "$status" -eq 64 ]
    [[ "$stderr" == "pglock: error: --slots cannot be used with --shared"* ]]
    run --separate-stderr "$PGLOCK_BIN" run -d "$DB" --slots=2 "$K" "$K-2" -c "touch $out/ran"
    [ "$status" -eq 64 ]
    [[ "$stderr" == "pglock: error: --slots takes one key"* ]]
    run --separate-stderr "$PGLOCK_BIN" lead -d "$DB" --slots=2 "$K" -c "touch $out/ran"
    [ "$status" -eq 64 ]
    [ ! -e "$out/ran" ]
    nothing_left
}

@test "status --slots=N shows the semaphore as one entry: holders, free slots, waiters" {
    run "$PGLOCK_BIN" status -d "$DB" --slots=2 --json "$K"
    [ "$status" -eq 1 ]
    [ "$(py 'd["semaphore"]["held"], d["semaphore"]["free"], d["semaphore"]["waiting"]')" = "0 2 0" ]
    bg h1 run -d "$DB" --slots=2 "$K" -c "$(slot_job h1 2)"
    bg h2 run -d "$DB" --slots=2 "$K" -c "$(slot_job h2 2)"
    wait_until 15 files_at_least '*.started' 2
    bg w run -d "$DB" --slots=2 --wait=30s "$K" -c "true"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 2 ]"
    run "$PGLOCK_BIN" status -d "$DB" --slots=2 --json "$K"
    [ "$status" -eq 0 ]
    [ "$(py 'd["semaphore"]["held"], d["semaphore"]["free"], d["semaphore"]["waiting"]')" = "2 0 1" ]
    [ "$(py 'sorted(h["slot"] for h in d["semaphore"]["holders"])')" = "[0, 1]" ]
    [ "$(py 'd["semaphore"]["key"]')" = "$KID" ]
    run "$PGLOCK_BIN" status -d "$DB" --slots=2 "$K"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "$K ($KID): semaphore of 2 slots, 2 held, 0 free, 1 waiting" ]]
    run "$PGLOCK_BIN" status -d "$DB" --slots=2 "$K" "$K-2"
    [ "$status" -eq 64 ]
    touch "$out/release"
    finish h1 15
    finish h2 15
    finish w 15
    [ "$(status_of w)" = 0 ]
    nothing_left
}

@test "a slot taken from SQL by the documented rule counts" {
    # psql holds slot 0 of a one-slot semaphore, by pglock-run(1)'s SQL
    session slot_holder "$DB" "select pg_advisory_lock(('x' || substr(encode(sha256(convert_to('$KID' || '#' || 0, 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint);"
    wait_until 10 granted_count slot_holder 1
    run "$PGLOCK_BIN" run -d "$DB" --slots=1 --try "$K" -c "touch $out/ran"
    [ "$status" -eq 75 ]
    [ ! -e "$out/ran" ]
    session_end slot_holder
    wait_until 10 nothing_left
    # --mode=xact takes a slot in a transaction, on a direct connection too
    run "$PGLOCK_BIN" run -d "$DB" --slots=1 --mode=xact --try "$K" -c 'echo "slot $PGLOCK_SLOT"'
    [ "$status" -eq 0 ]
    [ "$output" = "slot 0" ]
    nothing_left
}

# Through PgBouncer in transaction mode (pool size 3): auto mode holds each
# slot, and waits on the gate and the slots, inside a transaction.  Each
# test keeps within the pool's three server connections.

# idle_in_xact: sessions of the server idle in an open transaction.
idle_in_xact() {
    q "select count(*) from pg_stat_activity where state like 'idle in transaction%'"
}

@test "through PgBouncer: --try, of N+1 jobs exactly N run in a transaction each, one exits 75" {
    need PGLOCK_TEST_POOLER
    local i busy
    for i in 1 2 3; do
        bg "j$i" run -d "$PGLOCK_TEST_POOLER" --slots=2 --try "$K" -c "$(slot_job "j$i" 2)"
    done
    wait_until 15 files_at_least '*.started' 2
    wait_until 15 ended_at_least 1 j1 j2 j3
    [ "$(count_files '*.started')" = 2 ]
    [ "$(ended j1 j2 j3)" = 1 ]
    for i in 1 2 3; do gone "$(pid_of "j$i")" && busy=j$i; done
    finish "$busy" 5
    [ "$(status_of "$busy")" = 75 ]
    [ ! -e "$out/$busy.started" ]
    [ "$(cat "$out"/*.slot | sort | tr '\n' ' ')" = "0 1 " ]
    for i in 0 1; do
        [ "$(advisory_count "$(slot_sql "$i")" t)" = 1 ]
    done
    # each slot is a transaction lock of an open, idle transaction (with
    # its declaration of N)
    [ "$(q "select count(distinct pid) from pg_locks l join pg_stat_activity a using (pid)
            where l.locktype = 'advisory' and l.granted
              and a.state like 'idle in transaction%'")" = 2 ]
    touch "$out/release"
    for i in 1 2 3; do
        [ "j$i" = "$busy" ] && continue
        finish "j$i" 15
        [ "$(status_of "j$i")" = 0 ]
    done
    [ ! -e "$out/overlap" ]
    nothing_left
    wait_until 10 eval "[ \"\$(idle_in_xact)\" = 0 ]"
}

@test "through PgBouncer: --wait is woken when the holder ends, never two holders, the lease kept in xact hold" {
    need PGLOCK_TEST_POOLER
    # a holder and a waiter: 1 + (gate + 1 watcher) = the pool's 3
    bg h run -d "$PGLOCK_TEST_POOLER" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    # its job outlives its lease: only heartbeats in the holding
    # transaction keep idle_in_transaction_session_timeout from ending it
    bg w run -d "$PGLOCK_TEST_POOLER" --lease=1s --slots=1 --wait=30s "$K" \
        -c "$(slot_job w 1 2.5)"
    # the head holds the gate and its watcher waits on slot 0
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ]"
    [ "$(advisory_count "$(name_sql "$KID#gate")" t)" = 1 ]
    [ ! -e "$out/w.started" ]
    touch "$out/release"
    finish h 15
    [ "$(status_of h)" = 0 ]
    finish w 30
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    [ -e "$out/w.started" ]
    [ "$(cat "$out/w.slot")" = 0 ]
    [ ! -e "$out/overlap" ]
    nothing_left
    wait_until 10 eval "[ \"\$(idle_in_xact)\" = 0 ]"
}

@test "through PgBouncer: a --wait that runs out is 75 and gives the gate's transaction back" {
    need PGLOCK_TEST_POOLER
    bg h run -d "$PGLOCK_TEST_POOLER" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    run "$PGLOCK_BIN" run -d "$PGLOCK_TEST_POOLER" --slots=1 --wait=1s "$K" -c "touch $out/w.ran"
    [ "$status" -eq 75 ]
    [ ! -e "$out/w.ran" ]
    # nobody waits, the gate is free, and only the holder's transaction is open
    wait_until 10 eval "[ \"\$(slot_locks f)\" = 0 ]"
    [ "$(slot_locks t)" = 1 ]
    [ "$(advisory_count "$(name_sql "$KID#gate")" t)" = 0 ]
    [ "$(idle_in_xact)" = 1 ]
    touch "$out/release"
    finish h 15
    [ "$(status_of h)" = 0 ]
    nothing_left
    wait_until 10 eval "[ \"\$(idle_in_xact)\" = 0 ]"
}

@test "through PgBouncer: a holder whose backend is terminated loses its slot (74), which is free again" {
    need PGLOCK_TEST_POOLER
    bg h run -d "$PGLOCK_TEST_POOLER" --lease=3s --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    local pid
    pid=$(q "select pid from pg_locks where locktype = 'advisory' and granted
               and ((classid::bigint << 32) | objid::bigint) = $(slot_sql 0)")
    [ -n "$pid" ]
    q "select pg_terminate_backend($pid)" >/dev/null
    finish h 15
    [ "$(status_of h)" = 74 ]
    nothing_left
    run "$PGLOCK_BIN" run -d "$PGLOCK_TEST_POOLER" --slots=1 --try "$K" -c 'echo "slot $PGLOCK_SLOT"'
    [ "$status" -eq 0 ]
    [ "$output" = "slot 0" ]
    nothing_left
    wait_until 10 eval "[ \"\$(idle_in_xact)\" = 0 ]"
    # session locks are still refused through the pooler, with the usual hint
    run --separate-stderr "$PGLOCK_BIN" run -d "$PGLOCK_TEST_POOLER" --mode=session --slots=2 --try "$K" -c "touch $out/ran"
    [ "$status" -eq 69 ]
    [[ "$stderr" == *"pglock: hint: Use --mode=auto or --mode=xact"* ]]
    [ ! -e "$out/ran" ]
}

@test "another N for a name in use is refused: 64, one line naming the N in use, nothing of it left" {
    bg h1 run -d "$DB" --slots=2 "$K" -c "$(slot_job h1 3)"
    bg h2 run -d "$DB" --slots=2 "$K" -c "$(slot_job h2 3)"
    wait_until 15 files_at_least '*.started' 2
    # a slot is free for a --slots=3 user (slot 2): it must not get it
    local mode
    for mode in --try --wait=30s; do
        run --separate-stderr "$PGLOCK_BIN" run -d "$DB" --slots=3 "$mode" "$K" -c "$(slot_job x 3 0.1)"
        [ "$status" -eq 64 ]
        [ "$stderr" = "pglock: error: --slots=3 given, but lock \"$K\" is in use with --slots=2; the command was not run" ]
        [ ! -e "$out/x.started" ]
    done
    # a waiter of --slots=1 behind them is refused too, and queues nowhere
    run --separate-stderr "$PGLOCK_BIN" run -d "$DB" --slots=1 "$K" -c "touch $out/ran"
    [ "$status" -eq 64 ]
    [[ "$stderr" == *"is in use with --slots=2;"* ]]
    [ "$(slot_locks f)" = 0 ]
    [ "$(slot_locks t)" = 2 ]
    # the two holders' declarations only
    [ "$(decl_locks)" = 2 ]
    # the same N still gets the free... none: both slots are held
    run "$PGLOCK_BIN" run -d "$DB" --slots=2 --try "$K" -c "touch $out/ran"
    [ "$status" -eq 75 ]
    [ ! -e "$out/ran" ]
    touch "$out/release"
    finish h1 15
    finish h2 15
    [ "$(status_of h1)" = 0 ]
    [ "$(status_of h2)" = 0 ]
    [ ! -e "$out/overlap" ]
    nothing_left
    # once nobody uses the name, another N is free to
    run "$PGLOCK_BIN" run -d "$DB" --slots=3 --try "$K" -c 'echo "slot $PGLOCK_SLOT"'
    [ "$status" -eq 0 ]
    [ "$output" = "slot 0" ]
    nothing_left
}

@test "a waiter's N counts while it waits, and a head's winning watcher keeps it: another N is refused" {
    bg h run -d "$DB" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    bg w run -d "$DB" --slots=1 --wait=30s "$K" -c "$(slot_job w 1)"
    # the head waits on slot 0
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ]"
    kill -KILL "$(pid_of h)"
    wait_until 15 file_exists "$out/w.started"
    # the waiter won on its watcher's connection, which declares N
    run --separate-stderr "$PGLOCK_BIN" run -d "$DB" --slots=2 --try "$K" -c "touch $out/ran"
    [ "$status" -eq 64 ]
    [[ "$stderr" == *"is in use with --slots=1;"* ]]
    [ ! -e "$out/ran" ]
    [ "$(decl_locks)" = 1 ]
    touch "$out/release"
    finish w 15
    [ "$(status_of w)" = 0 ]
    nothing_left
}

@test "two first users with different N at once: never both run; a refused one says the other's N" {
    local _
    for _ in 1 2 3 4 5 6; do
        rm -f "$out"/a.* "$out"/b.* "$out/release"
        bg a run -d "$DB" --slots=2 --try "$K" -c "$(slot_job a 3)"
        bg b run -d "$DB" --slots=3 --try "$K" -c "$(slot_job b 3)"
        # each either runs or is refused; never both run
        wait_until 15 eval "{ [ -e $out/a.started ] || gone \$(pid_of a); } &&
                            { [ -e $out/b.started ] || gone \$(pid_of b); }"
        [ "$(count_files '*.started')" -le 1 ]
        touch "$out/release"
        finish a 15
        finish b 15
        if [ ! -e "$out/a.started" ]; then
            [ "$(status_of a)" = 64 ]
            grep -qx "pglock: error: --slots=2 given, but lock \"$K\" is in use with --slots=3; the command was not run" "$out/a.err"
        fi
        if [ ! -e "$out/b.started" ]; then
            [ "$(status_of b)" = 64 ]
            grep -qx "pglock: error: --slots=3 given, but lock \"$K\" is in use with --slots=2; the command was not run" "$out/b.err"
        fi
        wait_until 10 nothing_left
    done
}

# pool_waiting: a client of PgBouncer waits for a server connection.
pool_waiting() {
    [ "$(q 'SHOW POOLS' "$PGLOCK_TEST_POOLER_ADMIN" | awk -F'|' '{s += $4} END {print s + 0}')" -ge 1 ]
}

@test "through a full PgBouncer: the head's watcher waits for a server connection within --wait, past connect_timeout, then runs in a slot" {
    need PGLOCK_TEST_POOLER PGLOCK_TEST_POOLER_ADMIN
    local P=$PGLOCK_TEST_POOLER
    # connect_timeout 2 s: the watcher's setup must not be bounded by it
    export PGCONNECT_TIMEOUT=2
    # The pool's three server connections: the holder of slot 0, another
    # lock's holder, and the waiter's gate.
    bg h run -d "$P" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    bg b run -d "$P" "$K-other" -c "touch $out/b.started
        while [ ! -e $out/pool_full ]; do sleep 0.1; done; sleep 4"
    wait_until 15 file_exists "$out/b.started"
    bg w run -d "$P" --slots=1 --wait=60s "$K" -c "$(slot_job w 1 0.1)"
    # the head's watcher waits inside PgBouncer
    wait_until 15 pool_waiting
    # the other holder gives its server connection back 4 s from now,
    # past connect_timeout: the watcher gets it and waits on slot 0
    touch "$out/pool_full"
    finish b 20
    [ "$(status_of b)" = 0 ]
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ] || gone \$(pid_of w)"
    alive "$(pid_of w)"
    [ ! -e "$out/w.started" ]
    touch "$out/release"
    finish h 15
    [ "$(status_of h)" = 0 ]
    finish w 30
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    [ -e "$out/w.started" ]
    [ ! -s "$out/w.err" ]
    [ ! -e "$out/overlap" ]
    nothing_left
    wait_until 10 eval "[ \"\$(idle_in_xact)\" = 0 ]"
}

@test "status NAME shows a semaphore by its name without --slots (N from its users), the head and the queue listed" {
    bg h1 run -d "$DB" --slots=2 "$K" -c "$(slot_job h1 2)"
    bg h2 run -d "$DB" --slots=2 "$K" -c "$(slot_job h2 2)"
    wait_until 15 files_at_least '*.started' 2
    bg w1 run -d "$DB" --slots=2 --wait=30s "$K" -c "true"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 2 ]"
    bg w2 run -d "$DB" --slots=2 --wait=30s "$K" -c "true"
    wait_until 15 waiting_on "$KID#gate"
    run --separate-stderr "$PGLOCK_BIN" status -d "$DB" "$K"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "$K ($KID): semaphore of 2 slots, 2 held, 0 free, 2 waiting" ]
    # each with its backend pid and host
    local H
    H=$(uname -n)
    [[ "${lines[1]}" =~ ^\ \ slot\ [01]\ \ backend\ pid\ [0-9]+\ \ host\ $H\ \ pglock\ run\ $K\ on\ $H$ ]]
    [[ "${lines[3]}" =~ ^\ \ head\ \ \ \ backend\ pid\ [0-9]+\ \ host\ $H\ \ pglock\ run\ $K\ on\ $H$ ]]
    [[ "${lines[4]}" =~ ^\ \ queued\ \ backend\ pid\ [0-9]+\ \ host\ $H\ \ pglock\ run\ $K\ on\ $H$ ]]
    [ "${#lines[@]}" -eq 5 ]
    # the queued one is the backend that waits on the gate
    local queued
    queued=$(q "select pid from pg_locks where locktype = 'advisory' and not granted
                and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$KID#gate")")
    [[ "${lines[4]}" == *"pid $queued "* ]]
    for opt in "" --slots=2; do
        run "$PGLOCK_BIN" status -d "$DB" $opt --json "$K"
        [ "$status" -eq 0 ]
        [ "$(py 'd["semaphore"]["slots"], d["semaphore"]["waiting"]')" = "2 2" ]
        [ "$(py 'd["semaphore"]["holders"][0]["host"], d["semaphore"]["waiters"][0]["host"]')" = "$(uname -n) $(uname -n)" ]
        [ "$(py '[w["head"] for w in d["semaphore"]["waiters"]]')" = "[True, False]" ]
        [ "$(py 'd["semaphore"]["waiters"][1]["pid"]')" = "$queued" ]
    done
    # --slots with another N than the one in use: 64, naming it
    run --separate-stderr "$PGLOCK_BIN" status -d "$DB" --slots=3 "$K"
    [ "$status" -eq 64 ]
    [ "$stderr" = "pglock: error: --slots=3 given, but lock \"$K\" is in use with --slots=2" ]
    touch "$out/release"
    local j
    for j in h1 h2 w1 w2; do
        finish "$j" 15
        [ "$(status_of "$j")" = 0 ]
    done
    nothing_left
    # nobody uses it: a plain lock's answer again
    run "$PGLOCK_BIN" status -d "$DB" "$K"
    [ "$status" -eq 1 ]
    [[ "$output" != *semaphore* ]]
}

@test "terminate NAME --slots=N ends the holders of its slots (74 each), never a waiter; another N is 64" {
    bg h1 run -d "$DB" --slots=2 "$K" -c "$(slot_job h1 2)"
    bg h2 run -d "$DB" --slots=2 "$K" -c "$(slot_job h2 2)"
    wait_until 15 files_at_least '*.started' 2
    bg w run -d "$DB" --slots=2 --wait=30s "$K" -c "$(slot_job w 2)"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 2 ]"
    run --separate-stderr "$PGLOCK_BIN" terminate -d "$DB" --slots=3 --yes "$K"
    [ "$status" -eq 64 ]
    [ "$stderr" = "pglock: error: --slots=3 given, but lock \"$K\" is in use with --slots=2; nothing was terminated" ]
    alive "$(pid_of h1)"
    alive "$(pid_of h2)"
    run --separate-stderr "$PGLOCK_BIN" terminate -d "$DB" --slots=2 --yes "$K"
    [ "$status" -eq 0 ]
    [ "${lines[0]}" = "the slots of lock \"$K\" in database \"$(q 'select current_database()')\" are held by:" ]
    # one line per holder, naming its slot (in key order)
    [ "$(printf '%s\n' "${lines[1]}" "${lines[2]}" | cut -c1-22 | sort | tr '\n' ,)" = "  slot 0  backend pid ,  slot 1  backend pid ," ]
    [ "$(grep -c '^terminated backend pid ' <<<"$output")" = 2 ]
    finish h1 15
    finish h2 15
    [ "$(status_of h1)" = 74 ]
    [ "$(status_of h2)" = 74 ]
    # the waiter was not ended: it runs in a freed slot
    wait_until 15 file_exists "$out/w.started"
    touch "$out/release"
    finish w 15
    [ "$(status_of w)" = 0 ]
    nothing_left
    run "$PGLOCK_BIN" terminate -d "$DB" --slots=2 --yes "$K"
    [ "$status" -eq 1 ]
    [[ "$output" == *"no slot of lock \"$K\" is held; nothing to terminate"* ]]
}

@test "plain status names a semaphore's slots, gate and declaration after NAME, not as bare keys" {
    bg h run -d "$DB" --slots=1 "$K" -c "$(slot_job h 1)"
    wait_until 15 file_exists "$out/h.started"
    bg w run -d "$DB" --slots=1 --wait=30s "$K" -c "true"
    wait_until 15 eval "[ \"\$(slot_locks f)\" -ge 1 ]"
    run "$PGLOCK_BIN" status -d "$DB" --json
    [ "$status" -eq 0 ]
    [ "$(py "sorted((l['semaphore_part'], l['name_source']) for l in d['locks'] if l['name'] == '$K')")" = \
      "[('--slots=1', 'application_name'), ('gate', 'application_name'), ('slot 0', 'application_name')]" ]
    run "$PGLOCK_BIN" status -d "$DB"
    [ "$status" -eq 0 ]
    [[ "$output" == *"$K slot 0 (application_name) = key "* ]]
    [[ "$output" == *"$K gate (application_name) = key "* ]]
    touch "$out/release"
    finish h 15
    finish w 15
    [ "$(status_of w)" = 0 ]
    nothing_left
}

roundtrips() { proxy_cmd count | sed -n 's/.*roundtrips=\([0-9]*\).*/\1/p'; }

@test "the --try path's cost: two round trips more than one key's (the declaration, then the read for another N)" {
    need PGLOCK_TEST_PROXY PGLOCK_TEST_PROXY_CTL
    proxy_cmd reset >/dev/null
    run "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PROXY" --try "$K-plain" -- true
    [ "$status" -eq 0 ]
    local plain slots
    plain=$(roundtrips)
    proxy_cmd reset >/dev/null
    run "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PROXY" --slots=3 --try "$K" -- true
    [ "$status" -eq 0 ]
    slots=$(roundtrips)
    report "run --try: $plain round trips; run --slots=3 --try: $slots"
    [ "$slots" -eq $((plain + 2)) ]
    nothing_left
}
