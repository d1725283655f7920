#!/usr/bin/env bats
# Limits are errors, not hangs.  A server out of connection slots (too
# many clients, or only superuser_reserved_connections left) or out of
# lock table (53200, out of shared memory): every pglock process says so
# in one line that names the setting to raise, and then, per mode,
# run --try exits 69 at once, run --wait tries again within its budget and
# then exits 69 (or runs, once the limit lifts), lead warns and keeps
# contending.  The limits are real: the server's connection slots are
# filled (max_connections lowered for the test, then restored with a
# restart), and its lock table is filled by one session's advisory locks.
# Every wait is bounded; nothing is left locked and no process is left.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_HARNESS PGLOCK_TEST_ORDINARY
    fillers=()
}

teardown() {
    local p
    # The fillers' backends wait for input: each ends with its psql.
    for p in "${fillers[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    teardown_run
    if [ -e "$out/pgbouncer.ini" ]; then
        cp "$out/pgbouncer.ini" "$PGLOCK_TEST_DIR/pgbouncer.ini"
        "$PGLOCK_TEST_HARNESS" restart-pooler >/dev/null
    fi
    if [ -e "$out/max_connections.changed" ]; then
        wait_until 20 q 'select 1' >/dev/null
        q 'alter system reset max_connections' >/dev/null
        "$PGLOCK_TEST_HARNESS" restart-primary >/dev/null
    fi
}

# A pipe this shell holds open at both ends: a psql that reads its script
# from it waits, idle and connected, until it is killed.
idle_input() { [ -n "${IDLE_FD:-}" ] || exec {IDLE_FD}<> <(:); }

# filler NAME CONNINFO [SQL]: one psql connected to CONNINFO (after running
# SQL, if given), then idle; its pid appended to fillers.  0 once it says
# it is connected (and SQL has run), 1 if the server refused it.
filler() {
    local name=$1 conn=$2 sql=${3:-select 1}
    idle_input
    psql -X -q -A -t -d "$conn" -c "$sql" -c '\echo filler-up' -f - \
        <&"$IDLE_FD" >"$out/$name.out" 2>"$out/$name.err" &
    local pid=$!
    fillers+=("$pid")
    up() { grep -q filler-up "$out/$name.out" || ! alive "$pid"; }
    wait_until 20 up
    grep -q filler-up "$out/$name.out"
}

# fill_slots NAME CONNINFO: fillers on CONNINFO until the server refuses
# one (at most 40); that refusal's message is in $out/NAME.refused.
fill_slots() {
    local i
    for ((i = 0; i < 40; i++)); do
        if ! filler "$1$i" "$2"; then
            cp "$out/$1$i.err" "$out/$1.refused"
            return 0
        fi
    done
    echo "the server never refused a connection" >&2
    return 1
}

# lower_max_connections N: max_connections N until teardown restores it.
lower_max_connections() {
    touch "$out/max_connections.changed"
    q "alter system set max_connections = $1" >/dev/null
    "$PGLOCK_TEST_HARNESS" restart-primary >/dev/null
    [ "$(q 'show max_connections')" = "$1" ]
}

# fill_lock_table: a session takes advisory locks until the server's lock
# table is full (53200), and stays connected, idle, holding them; it reads
# more SQL from the fifo $out/locks.in (give_back).
fill_lock_table() {
    mkfifo "$out/locks.in"
    exec {LOCKS_FD}<>"$out/locks.in"
    psql -X -q -A -t -d "$DB" -c "select count(pg_advisory_lock(1234567, i)) from generate_series(1, 10000000) i" \
        -c '\echo filler-up' -f - <&"$LOCKS_FD" >"$out/locks.out" 2>"$out/locks.err" &
    fillers+=($!)
    up() { grep -q filler-up "$out/locks.out"; }
    wait_until 60 up
    grep -q 'out of shared memory' "$out/locks.err"
}

# give_back N: the filling session unlocks N more of its locks.
give_back() {
    GIVEN=$((${GIVEN:-0} + 1))
    printf '%s\n' "select count(pg_advisory_unlock(1234567, objid::int)) from (select objid from pg_locks
        where locktype = 'advisory' and classid = 1234567 and pid = pg_backend_pid()
        order by objid desc limit $1) s;" "\\echo given-$GIVEN" >&"$LOCKS_FD"
    given() { grep -q "given-$GIVEN" "$out/locks.out"; }
    wait_until 20 given
}

# keys N: N keys of this test's own.
keys() { local i; for ((i = 1; i <= $1; i++)); do printf '%s ' "$K-$i"; done; }
# none_held N: no key of keys N is held or waited for.
none_held() {
    local k
    for k in $(keys "$1"); do
        [ "$(advisory_count "$(name_sql "$k")" t)" = 0 ] || return 1
        [ "$(advisory_count "$(name_sql "$k")" f)" = 0 ] || return 1
    done
}

SLOTS='max_connections'
TABLE='out of shared memory.*raise max_locks_per_transaction'

# lead_warns_then_leads CONNINFO PATTERN: lead, refused by a limit, warns
# once (PATTERN names the setting), keeps contending, and leads once one
# of the fillers is gone.
lead_warns_then_leads() {
    bg l lead -d "$1" --lease=3s "$K" -- touch "$out/led"
    said() { grep -q "warning: $2.*; retrying$" "$out/l.err"; }
    wait_until 10 said
    nap 1
    alive "$(pid_of l)"
    [ ! -e "$out/led" ]
    kill -KILL "${fillers[0]}"
    wait_until 20 file_exists "$out/led"
    finish l 10
    cat "$out/l.err"
    [ "$(status_of l)" = 0 ]
    [ "$(grep -c warning "$out/l.err")" = 1 ]
}

@test "connection slots full: run --try 69 at once, run --wait 69 within its budget, lead warns and contends; each says max_connections" {
    lower_max_connections 12
    # An ordinary role gets every slot but superuser_reserved_connections.
    fill_slots user "$PGLOCK_TEST_ORDINARY"
    grep -q 'remaining connection slots are reserved' "$out/user.refused"

    run -69 timeout 20 "$PGLOCK_BIN" run --try -d "$PGLOCK_TEST_ORDINARY" "$K" -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 1 ]
    [[ "${lines[0]}" =~ ^pglock:\ error:\ .*remaining\ connection\ slots\ are\ reserved.*superuser_reserved_connections.*raise\ $SLOTS ]]

    # --wait: said once, tried again to the budget's end, then 69.
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=6s -d "$PGLOCK_TEST_ORDINARY" "$K" -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 2 ]
    [[ "${lines[0]}" =~ ^pglock:\ warning:\ could\ not\ connect:\ .*raise\ $SLOTS.*\;\ retrying\ within\ --wait$ ]]
    [[ "${lines[1]}" =~ ^pglock:\ error:\ .*raise\ $SLOTS ]]
    [ ! -e "$out/ran" ]

    # lead: a warning naming the setting, it keeps contending, and leads
    # once a slot is free.
    lead_warns_then_leads "$PGLOCK_TEST_ORDINARY" "could not connect: .*raise $SLOTS"

    # Every slot taken, the reserved ones too: "too many clients".
    fill_slots su "$DB"
    grep -q 'too many clients already' "$out/su.refused"
    run -69 timeout 20 "$PGLOCK_BIN" run --try -d "$DB" "$K" -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 1 ]
    [[ "${lines[0]}" =~ ^pglock:\ error:\ .*too\ many\ clients\ already.*raise\ $SLOTS ]]
    [ ! -e "$out/ran" ]

    # Slots free again: nothing held, no pglock session left.
    for p in "${fillers[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait_until 20 q 'select 1' >/dev/null
    none_held 1
    [ "$(q "select count(*) from pg_stat_activity where application_name like 'pglock %'")" = 0 ]
}

@test "lock table full: run --try 69 at once, run --wait 69 within its budget or runs once it lifts; each says max_locks_per_transaction" {
    fill_lock_table
    # Room for a connection, not for 32 more locks: given back a few at a
    # time until pglock connects and fails on the locks (a connection
    # takes some lock table entries of its own, the number the server's).
    local i
    for ((i = 0; i < 30; i++)); do
        give_back 4
        # shellcheck disable=SC2046 # one word per key
        run -69 timeout 20 "$PGLOCK_BIN" run --try -d "$DB" $(keys 32) -- touch "$out/ran"
        [[ "$output" == *"failed: FATAL:"* ]] || break
    done
    echo "$output"
    [ "${#lines[@]}" = 1 ]
    [[ "${lines[0]}" =~ ^pglock:\ error:\ could\ not\ take\ the\ lock:\ $TABLE ]]
    [ ! -e "$out/ran" ]
    none_held 32

    # shellcheck disable=SC2046
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=3s -d "$DB" $(keys 32) -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 2 ]
    [[ "${lines[0]}" =~ ^pglock:\ warning:\ could\ not\ take\ lock\ .*$TABLE.*\;\ retrying\ within\ --wait$ ]]
    [[ "${lines[1]}" =~ ^pglock:\ error:\ .*$TABLE ]]
    [ ! -e "$out/ran" ]
    none_held 32

    # A wait that outlasts the full table runs the command with every key.
    # shellcheck disable=SC2046
    bg w run --wait=30s -d "$DB" $(keys 32) -- touch "$out/ran"
    said() { grep -q "warning: could not take lock .*$TABLE" "$out/w.err"; }
    wait_until 10 said
    alive "$(pid_of w)"
    kill -KILL "${fillers[0]}"
    finish w 20
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    [ -e "$out/ran" ]
    none_held 32
}

@test "lock table full to the last entry: even a connection is refused; lead warns naming max_locks_per_transaction, keeps contending, and leads once it lifts" {
    fill_lock_table
    run -69 timeout 20 "$PGLOCK_BIN" run --try -d "$DB" "$K" -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 1 ]
    [[ "${lines[0]}" =~ ^pglock:\ error:\ .*$TABLE ]]

    lead_warns_then_leads "$DB" ".*$TABLE"
    [ ! -e "$out/ran" ]
    none_held 1
}

@test "through PgBouncer at max_client_conn: run --try 69 at once, run --wait 69 within its budget; each says max_client_conn" {
    need PGLOCK_TEST_POOLER PGLOCK_TEST_DIR
    # The harness's pooler, with room for 4 clients until teardown.
    cp "$PGLOCK_TEST_DIR/pgbouncer.ini" "$out/pgbouncer.ini"
    sed -i 's/^max_client_conn = .*/max_client_conn = 4/' "$PGLOCK_TEST_DIR/pgbouncer.ini"
    "$PGLOCK_TEST_HARNESS" restart-pooler >/dev/null
    fill_slots bouncer "$PGLOCK_TEST_POOLER"
    grep -q 'no more connections allowed (max_client_conn)' "$out/bouncer.refused"

    run -69 timeout 20 "$PGLOCK_BIN" run --try -d "$PGLOCK_TEST_POOLER" "$K" -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 1 ]
    [[ "${lines[0]}" =~ ^pglock:\ error:\ .*no\ more\ connections\ allowed.*raise\ max_client_conn ]]
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=4s -d "$PGLOCK_TEST_POOLER" "$K" -- touch "$out/ran"
    echo "$output"
    [ "${#lines[@]}" = 2 ]
    [[ "${lines[0]}" =~ ^pglock:\ warning:\ could\ not\ connect:\ .*raise\ max_client_conn.*\;\ retrying\ within\ --wait$ ]]
    [[ "${lines[1]}" =~ ^pglock:\ error:\ .*raise\ max_client_conn ]]
    [ ! -e "$out/ran" ]
    none_held 1
}
