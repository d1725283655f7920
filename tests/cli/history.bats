#!/usr/bin/env bats
# Run history: pglock init, run/lead --record, history, check,
# metrics, against the real server, PgBouncer included.

load helpers
bats_require_minimum_version 1.5.0

# The history table, once for the file (a pglock and a backend fewer per
# test): no test drops it from $DB, only from $PGLOCK_TEST_OTHER_DB.
setup_file() {
    [ -z "${PGLOCK_TEST_PRIMARY:-}" ] || [ -z "${PGLOCK_BIN:-}" ] ||
        "$PGLOCK_BIN" init -q -d "$PGLOCK_TEST_PRIMARY"
}
setup() {
    setup_run
}
teardown() {
    teardown_run
    [ -z "${locker:-}" ] || unlock_table
}

# exited_of NAME...: how many of the bg pglocks have exited.
exited_of() {
    local n c=0
    for n in "$@"; do gone "$(pid_of "$n")" && c=$((c + 1)); done
    echo "$c"
}

# unlock_table: ends lock_table's session (killing psql alone would leave
# the server's backend asleep with the lock), and first the sessions that
# wait for it: a record given up by pglock would otherwise still be
# written once the table is free.
unlock_table() {
    q "select pg_terminate_backend(pid) from pg_locks where relation = 'pglock.runs'::regclass and not granted" >/dev/null
    q "select pg_terminate_backend(pid) from pg_locks where relation = 'pglock.runs'::regclass and mode = 'AccessExclusiveLock'" >/dev/null
    wait "$locker" || true
    locker=
}

# runs_json KEY...: the history of the keys as JSON, in $output.
runs_json() {
    run --separate-stderr "$PGLOCK_BIN" history --json -d "$DB" "$@"
    [ "$status" -eq 0 ] || { echo "history: $status $stderr"; return 1; }
}
# outcome_is KEY OUTCOME: the newest run of KEY has OUTCOME now.
outcome_is() {
    runs_json "$1" && [ "$(py 'd[0]["outcome"] if d else None')" = "$2" ]
}

# lock_table: holds pglock.runs in ACCESS EXCLUSIVE mode (bounded: 20 s),
# so that no row can be written; $locker is its psql.
lock_table() {
    psql -X -q "$DB" -c "BEGIN; LOCK TABLE pglock.runs; SELECT pg_sleep(20); COMMIT" \
        >/dev/null 2>&1 &
    locker=$!
    wait_until 5 eval "[ \"\$(q \"select count(*) from pg_locks where relation = 'pglock.runs'::regclass and mode = 'AccessExclusiveLock' and granted\")\" = 1 ]"
}

@test "init: idempotent, carries the schema version, prints the GRANTs" {
    run --separate-stderr "$PGLOCK_BIN" init -d "$DB"
    [ "$status" -eq 0 ]
    [[ "$stderr" == *"already present"* ]]
    [[ "$output" == *"GRANT SELECT, INSERT, UPDATE ON pglock.runs TO recorder_role;"* ]]
    [ "$(q "select obj_description('pglock.runs'::regclass, 'pg_class')")" = \
        "pglock run history, schema version 1, revision 2" ]
}

@test "no history table: --record fails before taking the lock, one line naming pglock init" {
    local other=$PGLOCK_TEST_OTHER_DB
    q "drop schema if exists pglock cascade" "$other"
    run --separate-stderr "$PGLOCK_BIN" run --record -d "$other" "$K" -- touch "$out/ran"
    [ "$status" -eq 69 ]
    [[ "$stderr" == *'pglock: error: no run history in this database'* ]]
    [[ "$stderr" == *'"pglock init"'* ]]
    [ ! -e "$out/ran" ]
    # PGLOCK_RECORD=1 does the same; no lock was ever taken on the key
    PGLOCK_RECORD=1 run --separate-stderr "$PGLOCK_BIN" lead -d "$other" "$K" -- touch "$out/ran"
    [ "$status" -eq 69 ]
    [ ! -e "$out/ran" ]
    run "$PGLOCK_BIN" history -d "$other"
    [ "$status" -eq 69 ]
}

@test "PGLOCK_RECORD: 1, yes, true, on record; 0, no, off do not; any other value is 64 before the lock" {
    local v
    for v in yes TRUE on; do
        PGLOCK_RECORD=$v run -0 "$PGLOCK_BIN" run -d "$DB" "$K" -- true
    done
    [ "$(q "select count(*) from pglock.runs where key_name = '$K'")" -eq 3 ]
    for v in 0 no off ""; do
        PGLOCK_RECORD=$v run -0 "$PGLOCK_BIN" run -d "$DB" "$K" -- true
    done
    [ "$(q "select count(*) from pglock.runs where key_name = '$K'")" -eq 3 ]
    # a typo is not a silent "no": 64, nothing run, nothing locked
    PGLOCK_RECORD=ture run -64 --separate-stderr "$PGLOCK_BIN" run -d "$DB" "$K" -- touch "$out/ran"
    [[ "$stderr" == *'invalid value for PGLOCK_RECORD: "ture"'* ]]
    [ ! -e "$out/ran" ]
    PGLOCK_RECORD=2 run -64 "$PGLOCK_BIN" lead -d "$DB" "$K" -- touch "$out/ran"
    [ ! -e "$out/ran" ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
}

@test "history refuses a key that cannot parse before it connects (64, even with the server down); check --within=0 names --within" {
    run -64 --separate-stderr "$PGLOCK_BIN" history -h /nonexistent-socket-dir -p 1 42:x
    [[ "$stderr" == *"pglock: error: "* ]]
    # check is a monitoring plugin: its usage errors are UNKNOWN, 3
    run -3 --separate-stderr "$PGLOCK_BIN" check -d "$DB" "$K" --within=0
    [[ "$stderr" == *"--within must be longer than 0"* ]]
    [[ "$stderr" != *"--warn"* ]]
}

@test "access: a role without the GRANTs gets one clear line; with them it records and reads" {
    local other=$PGLOCK_TEST_OTHER_DB
    q "drop schema if exists pglock cascade" "$other"
    "$PGLOCK_BIN" init -q -d "$other"
    local as_user="$other user=pglock_user"
    run --separate-stderr "$PGLOCK_BIN" run --record -d "$as_user" "$K" -- touch "$out/ran"
    [ "$status" -eq 69 ]
    [[ "$stderr" == "pglock: error: permission denied to record runs in pglock.runs"* ]]
    [ ! -e "$out/ran" ]
    "$PGLOCK_BIN" init -d "$other" 2>/dev/null | sed 's/[a-z]*_role;/pglock_user;/' |
        grep -v pg_read_all_stats | psql -X -q -v ON_ERROR_STOP=1 "$other" >/dev/null
    run --separate-stderr "$PGLOCK_BIN" run --record -d "$as_user" "$K" -- true
    [ "$status" -eq 0 ]
    run --separate-stderr "$PGLOCK_BIN" history --json -d "$as_user" "$K"
    [ "$status" -eq 0 ]
    [ "$(py 'd[0]["outcome"]')" = succeeded ]
}

@test "three simulated hosts race --try --record: one run, two skips, right hosts and tokens" {
    local h
    for h in h1 h2 h3; do
        bg "$h" run --try --record --fencing-token --host-label="$h" "$K" \
            -c "echo \$PGLOCK_FENCING_TOKEN > $out/token; while [ ! -e $out/release ]; do sleep 0.1; done"
    done
    local winner='' h
    wait_until 10 eval "[ -s $out/token ]"
    # the two that found it held exit 75 while the winner still runs
    wait_until 10 eval '[ "$(exited_of h1 h2 h3)" -eq 2 ]'
    local losers=0
    for h in h1 h2 h3; do
        if gone "$(pid_of "$h")"; then
            finish "$h" 1
            [ "$(status_of "$h")" -eq 75 ]
            losers=$((losers + 1))
        else
            winner=$h
        fi
    done
    [ "$losers" -eq 2 ]
    touch "$out/release"
    finish "$winner" 10
    [ "$(status_of "$winner")" -eq 0 ]
    runs_json "$K"
    [ "$(py 'len(d)')" -eq 3 ]
    [ "$(py '[r["host"] for r in d if r["outcome"] == "succeeded"]')" = "['$winner']" ]
    [ "$(py 'sorted(r["host"] for r in d if r["outcome"] == "skipped")')" = \
        "$(printf '%s\n' h1 h2 h3 | grep -vx "$winner" | python3 -S -c 'import sys; print(sorted(sys.stdin.read().split()))')" ]
    [ "$(py '[r["fencing_token"] for r in d if r["outcome"] == "succeeded"][0]')" = "$(cat "$out/token")" ]
    [ "$(py '[r["fencing_token"] for r in d if r["outcome"] == "skipped"]')" = "[None, None]" ]
}

@test "every outcome: running, succeeded, failed, killed by a signal, lock lost, pglock SIGKILLed" {
    bg a run --record --lease=3s "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    [ "$(py 'd[0]["backend_pid"]')" = "$(q "select pid from pg_stat_activity where application_name = '$(run_app "$K")'")" ]
    # status names the run lock after its run, not as a bare pair
    local id
    id=$(py 'd[0]["id"]')
    run -0 "$PGLOCK_BIN" status
    [[ "$output" == *"$K (history) = key 1885826162:$id: exclusive"* ]]
    touch "$out/a.release"
    finish a 10
    outcome_is "$K" succeeded
    [ "$(py 'd[0]["exit_status"]')" -eq 0 ]
    [ "$(py 'd[0]["command"]')" = sh ]

    run "$PGLOCK_BIN" run --record "$K" -- sh -c 'exit 3'
    [ "$status" -eq 3 ]
    outcome_is "$K" failed
    [ "$(py 'd[0]["exit_status"]')" -eq 3 ]

    run "$PGLOCK_BIN" run --record "$K" -- sh -c 'kill -TERM $$'
    [ "$status" -eq 143 ]
    outcome_is "$K" killed

    # lost: the server ends the lock's session; the history's connection
    # is another one and records it
    bg b run --record --lease=3s "$K" -c "touch $out/b.start; sleep 30"
    wait_until 10 file_exists "$out/b.start"
    q "select pg_terminate_backend(pid) from pg_stat_activity where application_name = '$(run_app "$K")'" >/dev/null
    finish b 10
    [ "$(status_of b)" -eq 74 ]
    outcome_is "$K" lost
    [ "$(py 'd[0]["exit_status"]')" -eq 74 ]

    # SIGKILLed pglock: no end recorded; once its hold is gone it shows
    # "unrecorded", never "running"
    bg c run --record "$K" -c "touch $out/c.start; sleep 30"
    wait_until 10 file_exists "$out/c.start"
    outcome_is "$K" running
    kill -KILL "$(pid_of c)"
    wait_until 10 outcome_is "$K" unrecorded
    [ "$(py 'd[0]["ended_at"]')" = None ]
}

@test "a backend pid is no proof of a run: behind PgBouncer a later run on the same backend leaves the earlier one unrecorded" {
    need PGLOCK_TEST_POOLER
    # Run a ends, but its end cannot be recorded (the table is locked);
    # its server backend goes back to the pool (LIFO) and serves run b,
    # which holds the same key: (pid, backend_start) alone would call a
    # "running" again; its xact_start tells them apart.
    bg a run --record -d "$PGLOCK_TEST_POOLER" --lease=3s "$K" \
        -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    lock_table
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
    unlock_table
    outcome_is "$K" unrecorded
    local a_pid
    a_pid=$(py 'd[0]["backend_pid"]')
    bg b run --record -d "$PGLOCK_TEST_POOLER" "$K" \
        -c "touch $out/b.start; while [ ! -e $out/b.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/b.start"
    wait_until 5 outcome_is "$K" running
    [ "$(py 'd[0]["hold"]')" = xact ]
    [ "$(py 'd[0]["backend_pid"]')" = "$a_pid" ] # the same backend serves b
    [ "$(py '[r["outcome"] for r in d]')" = "['running', 'unrecorded']" ]
    touch "$out/b.release"
    finish b 10
}

@test "through PgBouncer: runs and skips are recorded, each run ended when its job did" {
    need PGLOCK_TEST_POOLER
    bg a run --record -d "$PGLOCK_TEST_POOLER" --fencing-token "$K" \
        -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done; date +%s%N >$out/a.end"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    run "$PGLOCK_BIN" run --try --record -d "$PGLOCK_TEST_POOLER" "$K" -- true
    [ "$status" -eq 75 ]
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
    runs_json "$K"
    [ "$(py '[r["outcome"] for r in d]')" = "['skipped', 'succeeded']" ]
    [ "$(py 'd[1]["fencing_token"] is not None')" = True ]
    # Its end is the job's, not the start of the transaction that held its
    # run lock (now() there).
    local ended
    ended=$(q "select floor(extract(epoch from ended_at) * 1000)::bigint from pglock.runs
                 where key_name = '$K' and outcome = 'succeeded'")
    [ "$ended" -ge $(($(cat "$out/a.end") / 1000000 - 2)) ] ||
        { echo "ended_at $ended, before the job's end $(($(cat "$out/a.end") / 1000000))"; false; }
}

@test "a start record not written in time: one warning, the job runs; an end record that fails: one warning, the command's status" {
    lock_table
    run --separate-stderr "$PGLOCK_BIN" run --record --lease=3s "$K" -- sh -c "touch $out/ran; exit 3"
    [ "$status" -eq 3 ]
    [ -e "$out/ran" ]
    [ "$stderr" = "pglock: warning: could not record the start of the run: no answer in time" ]
    unlock_table

    bg a run --record --lease=3s "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done; exit 4"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    lock_table
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 4 ]
    [ "$(cat "$out/a.err")" = "pglock: warning: could not record the end of the run: no answer in time" ]
}

# record_backends: how many server sessions of $K's history connections
# there are (whatever else application_name says of the host).
record_backends() {
    q "select count(*) from pg_stat_activity where application_name like '%record%'
         and application_name like '%$K%'"
}
# newest_run_ms: "OUTCOME ENDED_MS" of $K's newest row (ended_at in ms
# since the epoch; "null" for a row not ended).
newest_run_ms() {
    q "select coalesce(outcome, 'null') || ' ' || coalesce(floor(extract(epoch from ended_at) * 1000)::bigint::text, 'null')
         from pglock.runs where key_name = '$K' order by id desc limit 1"
}

@test "an end given up on never lands later: the UPDATE that waited for a locked table writes nothing once it is free" {
    bg a run --record --lease=3s "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done; exit 4"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    lock_table
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 4 ]
    grep -q "could not record the end of the run: no answer in time" "$out/a.err"
    # Free the table, but leave the statement that waits for it alone: it
    # runs now, long after pglock gave up on it and exited.
    q "select pg_terminate_backend(pid) from pg_locks where relation = 'pglock.runs'::regclass
         and mode = 'AccessExclusiveLock' and granted" >/dev/null
    wait "$locker" || true
    locker=
    # It has run (or failed) once its session is gone: pglock's end of
    # the connection is closed.
    wait_until 10 eval '[ "$(record_backends)" -eq 0 ]'
    [ "$(newest_run_ms)" = "null null" ]
    outcome_is "$K" unrecorded
}

@test "a run that loses its lock to a restart (fast, then immediate) is recorded as lost, ended when its job did" {
    local how
    for how in fast immediate; do
        rm -f "$out"/b.*
        bg b run --record --lease=10s "$K" -c "$(stamp_job b)"
        wait_until 10 file_exists "$out/b.start"
        wait_until 5 outcome_is "$K" running
        if [ "$how" = fast ]; then
            "$PGLOCK_TEST_HARNESS" restart-primary
        else
            "$PGLOCK_TEST_HARNESS" stop-primary immediate
            "$PGLOCK_TEST_HARNESS" start-primary
        fi
        finish b 30
        date +%s%N >"$out/b.exited"
        [ "$(status_of b)" -eq 74 ] || { echo "$how: exit $(status_of b): $(cat "$out/b.err")"; false; }
        local row alive exited
        row=$(newest_run_ms)
        alive=$(($(cat "$out/b.alive") / 1000000))
        exited=$(($(cat "$out/b.exited") / 1000000))
        report "$how restart: row \"$row\"; job's last line at $alive, pglock seen gone at $exited"
        [ "${row% *}" = lost ] || { echo "$how: recorded as ${row% *}: $(cat "$out/b.err")"; false; }
        # Between the job's last line and pglock's exit (2 ms: the
        # clocks' resolution in the sum that makes ended_at).
        [ "${row#* }" -ge $((alive - 2)) ] && [ "${row#* }" -le "$exited" ] ||
            { echo "$how: ended_at ${row#* } is not within [$alive, $exited]"; false; }
    done
}

@test "lead --record: the leadership's run is recorded" {
    run "$PGLOCK_BIN" lead --record --host-label=leader1 "$K" -- sh -c 'exit 0'
    [ "$status" -eq 0 ]
    outcome_is "$K" succeeded
    [ "$(py 'd[0]["host"]')" = leader1 ]
    [ "$(py 'd[0]["fencing_token"] is not None')" = True ]
}

@test "hostile names: quotes, newlines, non-ASCII intact in JSON, escaped in text" {
    local name host
    name=$(printf 'text:it'"'"'s "q"\nü-%s' "$K")
    host=$(printf 'h"o\x27st\nzweite Zeile ü')
    run "$PGLOCK_BIN" run --record --host-label="$host" "$name" -- true
    [ "$status" -eq 0 ]
    runs_json "$name"
    [ "$(py 'd[0]["key_name"]')" = "$name" ]
    [ "$(py 'd[0]["host"]')" = "$host" ]
    run --separate-stderr "$PGLOCK_BIN" history "$name"
    [ "$status" -eq 0 ]
    [ "${#lines[@]}" -eq 2 ] # the header and one line: no raw newline
    [[ "${lines[1]}" == *'h"o'"'"'st\x0Azweite Zeile ü'* ]]
    [[ "${lines[1]}" == *"text:it's \"q\"\\x0Aü-"* ]]
    run "$PGLOCK_BIN" metrics
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" | promtool check metrics
}

@test "history: newest first, --limit, --since, --prune" {
    local i
    for i in 1 2 3; do "$PGLOCK_BIN" run --record --host-label="n$i" "$K" -- true; done
    runs_json --limit=2 "$K"
    [ "$(py '[r["host"] for r in d]')" = "['n3', 'n2']" ]
    q "update pglock.runs set started_at = started_at - interval '2 hours', ended_at = ended_at - interval '2 hours' where key_name = '$K' and host = 'n1'"
    runs_json --since=1h "$K"
    [ "$(py '[r["host"] for r in d]')" = "['n3', 'n2']" ]
    run "$PGLOCK_BIN" history --prune=36501d
    [ "$status" -eq 64 ]
    run --separate-stderr "$PGLOCK_BIN" history --prune=90m
    [ "$status" -eq 0 ]
    [[ "$stderr" == "pglock: deleted "*" run"* ]]
    runs_json "$K"
    [ "$(py '[r["host"] for r in d]')" = "['n3', 'n2']" ]
}

@test "check: OK, WARNING when stale, CRITICAL when too old, failed last or no history, UNKNOWN when it cannot tell" {
    run "$PGLOCK_BIN" check "$K" --within=1h
    [ "$status" -eq 2 ]
    [[ "$output" == "PGLOCK CRITICAL - $K has no finished run recorded" ]]

    "$PGLOCK_BIN" run --record --host-label=web1 "$K" -- true
    run --separate-stderr "$PGLOCK_BIN" check "$K" --within=1h --warn=30m
    [ "$status" -eq 0 ]
    [[ "$output" == "PGLOCK OK - $K succeeded on web1, started "*" | age="*";1800.000;3600.000;0; duration="* ]]
    [ "${#lines[@]}" -eq 1 ]
    # ages in days, for weekly and monthly jobs (a DURATION stops at 24 days)
    run "$PGLOCK_BIN" check "$K" --within=31d --warn=8d
    [ "$status" -eq 0 ]
    [[ "$output" == *";691200.000;2678400.000;0;"* ]]

    q "update pglock.runs set started_at = started_at - interval '45 minutes', ended_at = ended_at - interval '45 minutes' where key_name = '$K'"
    run "$PGLOCK_BIN" check "$K" --within=1h --warn=30m
    [ "$status" -eq 1 ]
    [[ "$output" == "PGLOCK WARNING - "* ]]
    run "$PGLOCK_BIN" check "$K" --within=40m
    [ "$status" -eq 2 ]

    # the most recent run decides, not an earlier success; a skip does not count
    "$PGLOCK_BIN" run --record "$K" -- false || true
    run "$PGLOCK_BIN" check "$K" --within=1h
    [ "$status" -eq 2 ]
    [[ "$output" == "PGLOCK CRITICAL - $K failed on "* ]]

    run --separate-stderr "$PGLOCK_BIN" check "$K"
    [ "$status" -eq 3 ]
    [[ "$output" == "PGLOCK UNKNOWN - "* ]]
    run --separate-stderr "$PGLOCK_BIN" check "$K" --within=1h -h /nonexistent-socket-dir -p 1
    [ "$status" -eq 3 ]
    q "drop schema if exists pglock cascade" "$PGLOCK_TEST_OTHER_DB"
    run --separate-stderr "$PGLOCK_BIN" check "$K" --within=1h -d "$PGLOCK_TEST_OTHER_DB"
    [ "$status" -eq 3 ]
    [[ "$stderr" == *"pglock init"* ]]
}

@test "metrics: promtool accepts them, and they match pg_locks" {
    local id
    id=$(q "select $(name_sql "$K")")
    "$PGLOCK_BIN" run --record "$K" -- true
    bg a run "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    bg b run "$K" -- true
    wait_until 10 waiting_on "$K"
    run --separate-stderr "$PGLOCK_BIN" metrics
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" | promtool check metrics
    local held waiting
    held=$(advisory_count "$id" t)
    waiting=$(advisory_count "$id" f)
    # named from the history, since the key has a recorded run
    [[ "$output" == *"pglock_locks_held{key=\"$id\",name=\"$K\"} $held"* ]]
    [[ "$output" == *"pglock_locks_waiting{key=\"$id\",name=\"$K\"} $waiting"* ]]
    [ "$held" -eq 1 ] && [ "$waiting" -eq 1 ]
    [[ "$output" == *"pglock_last_run_outcome{key=\"$id\",name=\"$K\",outcome=\"succeeded\"} 1"* ]]
    touch "$out/a.release"
    finish a 10
    finish b 10
    # once the lock is free, no sample for the key
    run "$PGLOCK_BIN" metrics
    [[ "$output" != *"pglock_locks_held{key=\"$id\""* ]]
}

@test "metrics: locks held by host, the host --record stores (--host-label), \"\" for a holder that names none" {
    local id
    id=$(q "select $(name_sql "$K")")
    bg a run --record --shared --host-label cron-3 "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    bg b run --shared --host-label cron-4 "$K" -c "touch $out/b.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 10 file_exists "$out/b.start"
    PGAPPNAME=psql-holder psql -X -q "$DB" -c "select pg_advisory_lock_shared($id), pg_sleep(30)" >/dev/null 2>&1 &
    local holder=$!
    echo "$holder" >"$out/psql.pid"
    wait_until 10 eval "[ \"\$(advisory_count $id t)\" = 3 ]"
    run --separate-stderr "$PGLOCK_BIN" metrics
    [ "$status" -eq 0 ]
    printf '%s\n' "$output" | promtool check metrics
    [[ "$output" == *"pglock_locks_held{key=\"$id\",name=\"$K\"} 3"* ]]
    [ "$(grep -c "^pglock_locks_held_by_host{key=\"$id\"," <<<"$output")" = 3 ]
    [[ "$output" == *"pglock_locks_held_by_host{key=\"$id\",name=\"$K\",host=\"\"} 1"* ]]
    [[ "$output" == *"pglock_locks_held_by_host{key=\"$id\",name=\"$K\",host=\"cron-3\"} 1"* ]]
    [[ "$output" == *"pglock_locks_held_by_host{key=\"$id\",name=\"$K\",host=\"cron-4\"} 1"* ]]
    # the run's row names the same host
    run -0 "$PGLOCK_BIN" history --json "$K"
    [ "$(py 'd[0]["host"]')" = cron-3 ]
    q "select pg_terminate_backend(pid) from pg_stat_activity where application_name = 'psql-holder'" >/dev/null
    wait "$holder" || true
    touch "$out/a.release"
    finish a 10
    finish b 10
}

@test "key forms: a pair, a negative and a legacy hashtext key are seen running while held" {
    local k
    for k in "7:-$RANDOM" "int:-$RANDOM$RANDOM" "hashtext:$K"; do
        run "$PGLOCK_BIN" run --record "$k" -c "\"$PGLOCK_BIN\" history --json '$k' >$out/h.json"
        [ "$status" -eq 0 ]
        [ "$(python3 -S -c 'import json,sys; print(json.load(sys.stdin)[0]["outcome"])' <"$out/h.json")" = running ]
        outcome_is "$k" succeeded
    done
}

@test "an invalid UTF-8 --host-label is refused (64, one line), before the lock" {
    run -64 --separate-stderr "$PGLOCK_BIN" run --record --host-label="$(printf 'web\377')" "$K" -- touch "$out/ran"
    [ "${stderr_lines[0]}" = "pglock: error: invalid value for --host-label: it is not valid UTF-8" ]
    [ ! -e "$out/ran" ]
    [ "$(q "select count(*) from pglock.runs where key_name = '$K'")" -eq 0 ]
}

@test "a run of several keys is found under each of its keys: history, check, metrics (each key under its own name)" {
    local k1="$K-a" k2="$K-b" k id
    bg a run --record "$k1" "$k2" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$k1" running
    outcome_is "$k2" running
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
    [ ! -s "$out/a.err" ]
    run -0 "$PGLOCK_BIN" metrics
    local metrics=$output
    for k in "$k1" "$k2"; do
        outcome_is "$k" succeeded
        [ "$(py 'len(d)')" -eq 1 ]
        [ "$(py 'd[0]["key_name"]')" = "$k" ]
        run -0 "$PGLOCK_BIN" check "$k" --within=1h
        [[ "$output" == "PGLOCK OK - $k succeeded on "* ]]
        id=$(q "select $(name_sql "$k")")
        [[ "$metrics" == *"pglock_last_run_outcome{key=\"$id\",name=\"$k\",outcome=\"succeeded\"} 1"* ]]
    done
}

# The most keys a run takes, each of the longest id (a pair of two
# 11-character ints; its classid and objid 10 digits each): the arrays
# sized for fewer refused to record 26 keys or more.
@test "a run of RUN_MAX_KEYS (32) keys of the longest ids is recorded under each of them" {
    local keys=() i
    for i in $(seq 10 41); do keys+=("pair:-2147483648:-21474836$i"); done
    run -0 --separate-stderr "$PGLOCK_BIN" run --record "${keys[@]}" -- true
    [ -z "$stderr" ]
    for i in 0 31; do
        outcome_is "${keys[$i]}" succeeded
    done
}

@test "a run whose record was deleted while it ran (pruned): its end warns, and the job's status stays" {
    bg a run --record "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done; exit 5"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    local id
    id=$(py 'd[0]["id"]')
    q "delete from pglock.runs where key_name = '$K'" >/dev/null
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 5 ]
    [ "$(cat "$out/a.err")" = "pglock: warning: could not record the end of the run: its record (run $id) is no longer in pglock.runs" ]
}

@test "metrics always print pglock_up: 1 with the server, 0 (and 69) without; a run going does not hide the last success (as check)" {
    run -0 --separate-stderr "$PGLOCK_BIN" metrics
    [[ "$output" == *$'\npglock_up 1\n'* ]]
    run -69 --separate-stderr "$PGLOCK_BIN" metrics -h /nonexistent-socket-dir -p 1
    [ "$output" = "# HELP pglock_up 1 when the database answered every query of pglock metrics, else 0 (and nothing else is printed).
# TYPE pglock_up gauge
pglock_up 0" ]
    printf '%s\n' "$output" | promtool check metrics
    [ "${#stderr_lines[@]}" -eq 1 ]
    [[ "$stderr" == "pglock: error: "* ]]

    # docs/operations.md's alert reads the last finished run: a run going does
    # not make it fire
    local id
    id=$(q "select $(name_sql "$K")")
    "$PGLOCK_BIN" run --record "$K" -- true
    bg a run --record "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    run -0 "$PGLOCK_BIN" metrics
    [[ "$output" == *"pglock_last_run_outcome{key=\"$id\",name=\"$K\",outcome=\"succeeded\"} 1"* ]]
    [[ "$output" == *"pglock_last_run_end_timestamp_seconds{key=\"$id\",name=\"$K\"} "* ]]
    [[ "$output" == *"pglock_runs_running{key=\"$id\",name=\"$K\"} 1"* ]]
    run -0 "$PGLOCK_BIN" check "$K" --within=1h
    # it fires once the job fails
    touch "$out/a.release"
    finish a 10
    "$PGLOCK_BIN" run --record "$K" -- false || true
    run -0 "$PGLOCK_BIN" metrics
    [[ "$output" == *"pglock_last_run_outcome{key=\"$id\",name=\"$K\",outcome=\"succeeded\"} 0"* ]]
    [[ "$output" != *"pglock_runs_running{key=\"$id\""* ]]
    run -2 "$PGLOCK_BIN" check "$K" --within=1h
}

@test "history: columns aligned with long host labels; no runs: one line saying so, not a bare header" {
    "$PGLOCK_BIN" run --record --host-label=h1 "$K" -- true
    "$PGLOCK_BIN" run --record --host-label=a-long-host-label.build-farm.example.internal "$K" -- true
    run -0 --separate-stderr "$PGLOCK_BIN" history "$K"
    [ "${#lines[@]}" -eq 3 ]
    local l at=()
    for l in "${lines[@]:1}"; do
        at+=("$(awk -v s="$l" -v k="  $K" 'BEGIN { print index(s, k) }')")
    done
    [ "${at[0]}" -gt 0 ] && [ "${at[0]}" -eq "${at[1]}" ]
    [ "$(awk -v s="${lines[0]}" 'BEGIN { print index(s, "  KEY") }')" -eq "${at[0]}" ]

    run -0 --separate-stderr "$PGLOCK_BIN" history "$K-none"
    [ -z "$output" ]
    [ "$stderr" = "pglock: no runs recorded for $K-none" ]
    run -0 --separate-stderr "$PGLOCK_BIN" history --json "$K-none"
    [ "$output" = "[]" ]
}

# alert_fires METRICS EXPECTED: docs/operations.md's alert (for $K), evaluated
# by promtool on METRICS (pglock metrics' output, as node_exporter would
# export it) 1700 minutes after the series begin, fires with EXPECTED
# (promtool's exp_alerts, YAML; [] for silent).  The run timestamps keep
# their age: now becomes the evaluation time.
alert_fires() {
    local now
    now=$(date +%s)
    {
        printf 'groups:\n- name: pglock\n  rules:\n  - alert: NotSucceeded\n    expr: |\n'
        doc_block docs/operations.md ops-alert | sed -e "s/\"nightly-billing\"/\"$K\"/g" -e 's/^/      /'
    } >"$out/rules.yml"
    {
        printf 'rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n'
        printf '%s\n' "$1" | awk -v k="name=\"$K\"" -v now="$now" '
            /^#/ { next }
            index($0, k) || /^pglock_(up|history_readable) / {
                v = $NF
                if ($1 ~ /^pglock_last_run_(start|end)_timestamp_seconds/)
                    v = sprintf("%.3f", v - now + 1700 * 60)
                printf "  - series: %c%s%c\n    values: %c%sx1700%c\n", 39, $1, 39, 39, v, 39
            }'
        printf '  alert_rule_test:\n  - eval_time: 1700m\n    alertname: NotSucceeded\n    exp_alerts: %s\n' "$2"
    } >"$out/test.yml"
    (cd "$out" && promtool test rules test.yml) || { cat "$out/test.yml"; return 1; }
}

@test "docs/operations.md's alert, evaluated by promtool on pglock metrics: silent during a run after a success, while the server is down or the history unreadable; fires after a failure and after a success older than its window" {
    local id
    id=$(q "select $(name_sql "$K")")
    # no run ever: absent() fires
    run -0 "$PGLOCK_BIN" metrics
    alert_fires "$output" "[{exp_labels: {name: \"$K\"}}]"
    "$PGLOCK_BIN" run --record "$K" -- true
    bg a run --record "$K" -c "touch $out/a.start; while [ ! -e $out/a.release ]; do sleep 0.1; done; exit 3"
    wait_until 10 file_exists "$out/a.start"
    wait_until 5 outcome_is "$K" running
    run -0 "$PGLOCK_BIN" metrics
    alert_fires "$output" "[]"
    # the database does not answer: pglock cannot tell, the alert does not
    # say the job failed (pglock_up == 0 alerts)
    run -69 "$PGLOCK_BIN" metrics -h /nonexistent-socket-dir -p 1
    alert_fires "$output" "[]"
    # nor while the history cannot be read (a role without the GRANTs)
    run -0 "$PGLOCK_BIN" metrics -d "$PGLOCK_TEST_ORDINARY"
    grep -qx 'pglock_history_readable 0' <<<"$output"
    alert_fires "$output" "[]"
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" -eq 3 ]
    run -0 "$PGLOCK_BIN" metrics
    alert_fires "$output" "[{exp_labels: {key: \"$id\", name: \"$K\", outcome: succeeded}}]"
    # a success 26 h old, past its 25 h window
    "$PGLOCK_BIN" run --record "$K" -- true
    run -0 "$PGLOCK_BIN" metrics
    alert_fires "$output" "[]"
    q "update pglock.runs set started_at = started_at - interval '26 hours', ended_at = ended_at - interval '26 hours' where key_name = '$K'" >/dev/null
    run -0 "$PGLOCK_BIN" metrics
    alert_fires "$output" "[{exp_labels: {key: \"$id\", name: \"$K\"}}]"
}

# old_pglock: the path of a pglock that knows the history's revision 1
# only (the last commit before revision 2), built once per build
# directory from this repository's history; skips without one.
REV1_COMMIT=6476529d840ce369bf3a1cdb12139bc453c40db5
old_pglock() {
    local src=$BATS_TEST_DIRNAME/../.. dir=$PGLOCK_BUILD/compat-rev1
    if [ ! -x "$dir/b/pglock" ]; then
        git -C "$src" cat-file -e "$REV1_COMMIT^{commit}" 2>/dev/null ||
            skip "no git history to build the revision-1 pglock from"
        rm -rf "$dir" && mkdir -p "$dir/src"
        git -C "$src" archive "$REV1_COMMIT" | tar -x -C "$dir/src"
        cmake -S "$dir/src" -B "$dir/b" -DPGLOCK_TESTS=OFF >/dev/null &&
            make -C "$dir/b" pglock_exe >/dev/null 2>&1 ||
            { echo "could not build the revision-1 pglock"; return 1; }
    fi
    echo "$dir/b/pglock"
}

# window_count METRICS KEY OUTCOME: pglock_window_runs' value.
window_count() {
    local id
    id=$(q "select $(name_sql "$2")")
    sed -n "s/^pglock_window_runs{key=\"$id\",name=\"$2\",outcome=\"$3\"} //p" <<<"$1"
}

@test "a fleet upgrade: init moves revision 1 to 2 in place; pglock of either revision records and reads against one table before, during and after it" {
    local old other=$PGLOCK_TEST_OTHER_DB
    old=$(old_pglock)
    q "drop schema if exists pglock cascade" "$other"
    "$old" init -q -d "$other"
    [ "$(q "select obj_description('pglock.runs'::regclass, 'pg_class')" "$other")" = \
        "pglock run history, schema version 1" ]
    # this pglock against revision 1: records as revision 1 does (a skip
    # without its reason, no wait), without a warning
    run -0 --separate-stderr "$PGLOCK_BIN" run --record -d "$other" "$K" -- true
    [ -z "$stderr" ]
    bg h run --record -d "$other" "$K" -c "touch $out/h.start; while [ ! -e $out/h.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/h.start"
    run -75 --separate-stderr "$PGLOCK_BIN" run --record --try -d "$other" "$K" -- true
    [[ "$stderr" != *warning* ]]
    run -0 --separate-stderr "$PGLOCK_BIN" history --json -d "$other" "$K"
    [ "$(py '[r["outcome"] + ":" + str(r["skipped_as"]) + ":" + str(r["wait_seconds"]) for r in d]')" = \
        "['skipped:None:None', 'running:None:None', 'succeeded:None:None']" ]
    # the upgrade, while h runs; a second init changes nothing
    run -0 --separate-stderr "$PGLOCK_BIN" init -d "$other"
    [ "$stderr" = "pglock: run history upgraded from schema version 1, revision 1 to revision 2 in database \"pglock_other\"" ]
    run -0 --separate-stderr "$PGLOCK_BIN" init -d "$other"
    [ "$stderr" = "pglock: run history (schema version 1, revision 2) already present in database \"pglock_other\"" ]
    [ "$(q "select obj_description('pglock.runs'::regclass, 'pg_class')" "$other")" = \
        "pglock run history, schema version 1, revision 2" ]
    # both against revision 2, for the one key h holds: the old one's skip
    # is "skipped", this one's "busy" or "timed_out"; and the old init
    # takes the upgraded table as its own
    run -0 --separate-stderr "$old" init -d "$other"
    [[ "$stderr" == *"already present"* ]]
    run -75 --separate-stderr "$old" run --record --try -d "$other" "$K" -- true
    [[ "$stderr" != *warning* ]]
    run -75 --separate-stderr "$PGLOCK_BIN" run --record --try -d "$other" "$K" -- true
    [[ "$stderr" != *warning* ]]
    run -75 --separate-stderr "$PGLOCK_BIN" run --record --wait=0.3s -d "$other" "$K" -- true
    [[ "$stderr" != *warning* ]]
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" -eq 0 ]
    [ ! -s "$out/h.err" ] # its end, recorded on the upgraded table
    run -0 --separate-stderr "$old" run --record -d "$other" "$K" -- true
    [ -z "$stderr" ]
    run -0 --separate-stderr "$PGLOCK_BIN" run --record -d "$other" "$K" -- true
    [ -z "$stderr" ]
    run -0 --separate-stderr "$PGLOCK_BIN" history --json -d "$other" "$K"
    [ "$(py '[r["outcome"] + ":" + str(r["skipped_as"]) + ":" + str(r["wait_seconds"] is not None) for r in d]')" = \
        "['succeeded:None:True', 'succeeded:None:False', 'skipped:timed_out:True', 'skipped:busy:True', 'skipped:None:False', 'skipped:None:False', 'succeeded:None:False', 'succeeded:None:False']" ]
    # the old readers read the upgraded table
    run -0 "$old" history -d "$other" "$K"
    [ "${#lines[@]}" -eq 9 ]
    run -0 "$old" check -d "$other" "$K" --within=1h
    [[ "$output" == "PGLOCK OK - $K succeeded"* ]]
    run -0 "$old" metrics -d "$other"
    printf '%s\n' "$output" | promtool check metrics
    # and the new metrics count both revisions' rows
    run -0 --separate-stderr "$PGLOCK_BIN" metrics -d "$other"
    printf '%s\n' "$output" | promtool check metrics
    [ "$(window_count "$output" "$K" started)" -eq 4 ]
    [ "$(window_count "$output" "$K" succeeded)" -eq 4 ]
    [ "$(window_count "$output" "$K" busy)" -eq 1 ]
    [ "$(window_count "$output" "$K" timed_out)" -eq 1 ]
    [ "$(window_count "$output" "$K" skipped)" -eq 2 ]
    [[ "$output" == *"pglock_window_wait_seconds_count{key=\"$(q "select $(name_sql "$K")")\",name=\"$K\"} 1"* ]]
    [[ "$output" == *"pglock_window_hold_seconds_count{key=\"$(q "select $(name_sql "$K")")\",name=\"$K\"} 4"* ]]
}

# window_alert_fires RULE METRICS EXPECTED: an alert's expression RULE
# (docs/operations.md's, for $K), evaluated by promtool on METRICS (pglock
# metrics' output, constant for 10 minutes), fires with EXPECTED
# (exp_alerts).
window_alert_fires() {
    {
        printf 'groups:\n- name: pglock\n  rules:\n  - alert: Window\n    expr: |\n'
        printf '%s\n' "$1" | sed -e "s/\"nightly-billing\"/\"$K\"/g" -e 's/^/      /'
    } >"$out/rules.yml"
    {
        printf 'rule_files: [rules.yml]\nevaluation_interval: 1m\ntests:\n- interval: 1m\n  input_series:\n'
        printf '%s\n' "$2" | awk -v k="name=\"$K\"" '
            /^#/ { next }
            index($0, k) || /^pglock_(up|window_seconds|window_keys) / {
                printf "  - series: %c%s%c\n    values: %c%sx10%c\n", 39, $1, 39, 39, $NF, 39
            }'
        printf '  alert_rule_test:\n  - eval_time: 5m\n    alertname: Window\n    exp_alerts: %s\n' "$3"
    } >"$out/test.yml"
    (cd "$out" && promtool test rules test.yml) || { cat "$out/rules.yml" "$out/test.yml"; return 1; }
}

@test "the window's series: busy and timed out told apart, waits and holds; docs/operations.md's alert for each, evaluated by promtool" {
    local id m runs skips wait hold keys
    id=$(q "select $(name_sql "$K")")
    runs=$(doc_block docs/operations.md ops-alert-window-runs)
    skips=$(doc_block docs/operations.md ops-alert-window-skips)
    wait=$(doc_block docs/operations.md ops-alert-window-wait)
    hold=$(doc_block docs/operations.md ops-alert-window-hold)
    keys=$(doc_block docs/operations.md ops-alert-window-keys)
    "$PGLOCK_BIN" run --record "$K" -- true
    run -0 "$PGLOCK_BIN" metrics --window=1h
    m=$output
    printf '%s\n' "$m" | promtool check metrics
    grep -qx 'pglock_window_seconds 3600.000' <<<"$m"
    [ "$(window_count "$m" "$K" started)" -eq 1 ]
    [ "$(window_count "$m" "$K" succeeded)" -eq 1 ]
    [[ "$m" == *"pglock_window_wait_seconds_count{key=\"$id\",name=\"$K\"} 1"* ]]
    [[ "$m" == *"pglock_window_hold_seconds_bucket{key=\"$id\",name=\"$K\",le=\"+Inf\"} 1"* ]]
    local rule
    for rule in "$runs" "$skips" "$wait" "$hold" "$keys"; do
        window_alert_fires "$rule" "$m" "[]"
    done
    # one run holds: a --wait that runs out, then three --try
    bg h run --record "$K" -c "touch $out/h.start; while [ ! -e $out/h.release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/h.start"
    run -75 "$PGLOCK_BIN" run --record --wait=0.3s "$K" -- true
    run -0 "$PGLOCK_BIN" metrics --window=1h
    window_alert_fires "$runs" "$output" "[{exp_labels: {key: \"$id\", name: \"$K\", outcome: timed_out}}]"
    window_alert_fires "$skips" "$output" "[]"
    run -75 "$PGLOCK_BIN" run --record --try "$K" -- true
    run -75 "$PGLOCK_BIN" run --record --try "$K" -- true
    touch "$out/h.release"
    finish h 10
    run -0 "$PGLOCK_BIN" metrics --window=1h
    m=$output
    printf '%s\n' "$m" | promtool check metrics
    [ "$(window_count "$m" "$K" started)" -eq 2 ]
    [ "$(window_count "$m" "$K" busy)" -eq 2 ]
    [ "$(window_count "$m" "$K" timed_out)" -eq 1 ]
    [ "$(window_count "$m" "$K" skipped)" -eq 0 ]
    window_alert_fires "$skips" "$m" "[{exp_labels: {key: \"$id\", name: \"$K\"}}]"
    # the timed-out wait is in history --json, not in the waits for the lock
    # (a --try's own wait is not bounded here: on a loaded machine its
    # connect alone can take longer than the 0.3 s that the --wait waited)
    runs_json "$K"
    [ "$(py '[(r["skipped_as"], r["skipped_as"] == "busy" or r["wait_seconds"] >= 0.3) for r in d if r["outcome"] == "skipped"]')" = \
        "[('busy', True), ('busy', True), ('timed_out', True)]" ]
    [[ "$m" == *"pglock_window_wait_seconds_count{key=\"$id\",name=\"$K\"} 2"* ]]
    # long waits and holds (rewritten: the test does not wait for hours)
    q "update pglock.runs set wait_ms = 600000, ended_at = started_at + interval '3 hours' where key_name = '$K' and outcome = 'succeeded'" >/dev/null
    run -0 "$PGLOCK_BIN" metrics --window=1h
    window_alert_fires "$wait" "$output" "[{exp_labels: {key: \"$id\", name: \"$K\"}}]"
    window_alert_fires "$hold" "$output" "[{exp_labels: {key: \"$id\", name: \"$K\"}}]"
    [[ "$output" == *"pglock_window_hold_seconds_bucket{key=\"$id\",name=\"$K\",le=\"7200\"} 0"* ]]
    [[ "$output" == *"pglock_window_hold_seconds_bucket{key=\"$id\",name=\"$K\",le=\"14400\"} 2"* ]]
    # out of the window: no series for the key
    run -0 "$PGLOCK_BIN" metrics --window=1ms
    [[ "$output" != *"pglock_window_runs{key=\"$id\""* ]]
    run -64 --separate-stderr "$PGLOCK_BIN" metrics --window=soon
    [[ "$stderr" == "pglock: error: invalid value for --window: "* ]]
}

@test "the window's cardinality: at most 500 keys have series, the most recently run; pglock_window_keys counts them all and its alert fires" {
    local other=$PGLOCK_TEST_OTHER_DB
    q "drop schema if exists pglock cascade" "$other"
    "$PGLOCK_BIN" init -q -d "$other"
    # 501 keys with a run each, the oldest first (rows as a run writes them)
    q "insert into pglock.runs (key, key_name, classid, objid, objsubid, host, started_at, ended_at, outcome, exit_status)
       select g::text, 'k' || g, 0, g, 1, 'h', now() - (600 - g) * interval '1 second', now() - (600 - g) * interval '1 second', 'succeeded', 0
       from generate_series(1, 501) g" "$other" >/dev/null
    run -0 --separate-stderr "$PGLOCK_BIN" metrics -d "$other"
    printf '%s\n' "$output" | promtool check metrics
    grep -qx 'pglock_window_keys 501' <<<"$output"
    [ "$(grep -c '^pglock_window_runs{.*outcome="started"}' <<<"$output")" -eq 500 ]
    # the least recently run is left out
    [ "$(grep -c '^pglock_window_.*name="k1"' <<<"$output")" -eq 0 ]
    [ "$(grep -c '^pglock_window_.*name="k501"' <<<"$output")" -eq 40 ]
    K=k1 window_alert_fires "$(doc_block docs/operations.md ops-alert-window-keys)" \
        "$output" "[{exp_labels: {}}]"
}
