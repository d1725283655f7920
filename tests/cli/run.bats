#!/usr/bin/env bats
# pglock run: the lock is held while the command runs, and only then.
# Real processes against a real server; leases of 2-4 s where they matter.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

@test "of 6 concurrent --try, exactly one runs; it holds until the others exit 75" {
    local i n=6
    for ((i = 0; i < n; i++)); do
        bg "c$i" run --try -d "$DB" "$K" -c "echo \$\$ >> $out/ran; while [ ! -e $out/release ]; do sleep 0.1; done"
    done
    # Every loser must have given up while the winner still runs.
    losers() {
        local c=0 i
        for ((i = 0; i < n; i++)); do
            if ! alive "$(pid_of "c$i")"; then c=$((c + 1)); fi
        done
        [ "$c" -eq $((n - 1)) ]
    }
    wait_until 20 losers
    [ "$(wc -l <"$out/ran")" -eq 1 ]
    touch "$out/release"
    local winners=0 busy=0
    for ((i = 0; i < n; i++)); do
        finish "c$i" 10
        case $(status_of "c$i") in
        0) winners=$((winners + 1)) ;;
        # (the holder is named when pg_locks answers within 500 ms, which
        # six contenders under ASan on a busy machine may not: the --wait
        # test below asserts the name)
        75) busy=$((busy + 1)); grep -qE "is held by ($(uname -n) \\(backend pid [0-9]+, user postgres, client (local|127\\.0\\.0\\.1:[0-9]+), \"$(run_app "$K")\", held [^)]*\\)|another session); the command was not run" "$out/c$i.err" || { cat "$out/c$i.err"; false; } ;;
        *) echo "c$i exited $(status_of "c$i")"; cat "$out/c$i.err"; false ;;
        esac
    done
    [ "$winners" -eq 1 ]
    [ "$busy" -eq $((n - 1)) ]
    [ "$(wc -l <"$out/ran")" -eq 1 ]
}

@test "a text key is the same lock as docs/keys.md's SQL expression" {
    bg h run -d "$DB" nightly-billing-$K -c "touch $out/started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/started"
    [ "$(q "select pg_try_advisory_lock($(name_sql "nightly-billing-$K"))")" = f ]
    touch "$out/release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    [ "$(q "select pg_try_advisory_lock($(name_sql "nightly-billing-$K"))")" = t ]
}

@test "nightly-billing maps to the published bigint and excludes SQL" {
    bg h run -d "$DB" nightly-billing -c "echo \$PGLOCK_KEY_ID > $out/id; touch $out/started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/started"
    [ "$(cat "$out/id")" = -3003901418071974465 ]
    [ "$(q "select pg_try_advisory_lock(-3003901418071974465)")" = f ]
    touch "$out/release"
    finish h 10
    [ "$(status_of h)" = 0 ]
}

@test "a pair key 42:9 excludes pg_try_advisory_lock(42, 9); an integer key its bigint" {
    local ns=$((RANDOM + 1000))
    bg p run -d "$DB" "$ns:9" -c "touch $out/p.started; while [ ! -e $out/release ]; do sleep 0.1; done"
    bg i run -d "$DB" "int:-$ns" -c "touch $out/i.started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/p.started"
    wait_until 10 file_exists "$out/i.started"
    [ "$(q "select pg_try_advisory_lock($ns, 9)")" = f ]
    [ "$(q "select pg_try_advisory_lock($ns, 10)")" = t ]
    [ "$(q "select pg_try_advisory_lock(-$ns::bigint)")" = f ]
    [ "$(q "select pg_try_advisory_lock($ns::bigint)")" = t ]
    touch "$out/release"
    finish p 10
    finish i 10
    [ "$(status_of p)" = 0 ]
    [ "$(status_of i)" = 0 ]
}

@test "shared holders share, and exclude an exclusive lock" {
    bg s1 run -s -d "$DB" "$K" -c "touch $out/s1; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/s1"
    run "$PGLOCK_BIN" run -s --try -d "$DB" "$K" -- true
    [ "$status" -eq 0 ]
    run "$PGLOCK_BIN" run --try -d "$DB" "$K" -- true
    [ "$status" -eq 75 ]
    [ "$(q "select pg_try_advisory_lock_shared($(name_sql "$K"))")" = t ]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = f ]
    touch "$out/release"
    finish s1 10
}

@test "the job's environment names the lock; application_name too" {
    run "$PGLOCK_BIN" run -d "$DB" "42:7" -- sh -c 'echo "$PGLOCK_KEY|$PGLOCK_KEY_ID|$PGLOCK_DATABASE|$PGLOCK_BACKEND_PID"; psql -X -A -t -c "select application_name from pg_stat_activity where pid = $PGLOCK_BACKEND_PID" "$0"' "$DB"
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "42:7|42:7|postgres|"[0-9]* ]]
    [ "${lines[1]}" = "$(run_app 42:7)" ]
}

@test "a long non-ASCII key's application_name: cut on a character boundary, never by the server (63 bytes as it shows them), the host kept" {
    local long="$K-ééééééééééééééééééééééééééééééééééééééé" host
    host=$(uname -n)
    run "$PGLOCK_BIN" run -d "$DB" "$long" -- sh -c 'psql -X -A -t -c "select application_name, octet_length(application_name) from pg_stat_activity where pid = $PGLOCK_BACKEND_PID" "$0"' "$DB"
    [ "$status" -eq 0 ]
    local len=${output##*|}
    [ "$len" -le 63 ]
    local name=${output%|*}
    # a name the server rewrites cannot name the lock: the host stays whole
    [[ "$name" == "pglock run $K-"*" on $host" ]]
    local cut=${name#"pglock run $K-"} re
    cut=${cut%" on $host"}
    # 16 and newer show each non-ASCII byte as \xNN, 15 and older as "?":
    # whole characters either way, none cut by the server
    if [ "${PGLOCK_TEST_SERVER_VERSION_NUM:-150000}" -ge 160000 ]; then
        re='^(\\xc3\\xa9)+$'
    else
        re='^(\?\?)+$'
    fi
    [[ "$cut" =~ $re ]]
}

@test "exit statuses pass through: codes, 128+N, 126, 127" {
    run "$PGLOCK_BIN" run -d "$DB" "$K" -- sh -c 'exit 3'
    [ "$status" -eq 3 ]
    run "$PGLOCK_BIN" run -d "$DB" "$K" -c 'exit 255'
    [ "$status" -eq 255 ]
    run "$PGLOCK_BIN" run -d "$DB" "$K" -c 'kill -TERM $$'
    [ "$status" -eq 143 ]
    run -127 "$PGLOCK_BIN" run -d "$DB" "$K" -- /nonexistent/command
    [ "$status" -eq 127 ]
    [[ "$output" == *'could not execute "/nonexistent/command": No such file or directory'* ]]
    echo 'not a program' >"$out/data"
    chmod a-x "$out/data"
    run -126 "$PGLOCK_BIN" run -d "$DB" "$K" -- "$out/data"
    [ "$status" -eq 126 ]
    [[ "$output" == *"Permission denied"* ]]
    run -127 "$PGLOCK_BIN" run -d "$DB" "$K" -c 'nonexistent-command-xyz'
    [ "$status" -eq 127 ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
}

@test "a command that cannot be executed is refused before the lock: 127 or 126, never 75" {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    # A --try race: the host without the program must not win, nor skip.
    run -127 "$PGLOCK_BIN" run --try -d "$DB" "$K" -- /nonexistent/command
    [[ "$output" == *'could not execute "/nonexistent/command": No such file or directory; the lock was not taken'* ]]
    run -127 env PATH="$out" "$PGLOCK_BIN" run --try -d "$DB" "$K" -- true
    run -126 "$PGLOCK_BIN" run --try -d "$DB" "$K" -- "$out"
    run -127 "$PGLOCK_BIN" lead -d "$DB" "$K" -- /nonexistent/command
    # Found along PATH (an empty entry is the current directory): busy.
    cp /bin/true "$out/true-here"
    run -75 env PATH=: /bin/sh -c "cd '$out' && exec '$PGLOCK_BIN' run --try -d '$DB' '$K' -- true-here"
    run -75 "$PGLOCK_BIN" run --try -d "$DB" "$K" -c 'nonexistent-command-xyz'
    touch "$out/h.release"
    finish h 10
    # What only the exec can tell (a script whose interpreter is missing)
    # still fails after the lock, with the exec's errno, and frees it.
    printf '#!/nonexistent/interpreter\n' >"$out/script"
    chmod +x "$out/script"
    run -127 "$PGLOCK_BIN" run -d "$DB" "$K" -- "$out/script"
    [[ "$output" == *'could not execute "'"$out"'/script": No such file or directory'* ]]
    [[ "$output" != *'the lock was not taken'* ]]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
}

@test "COMMAND's own options are not pglock's" {
    run "$PGLOCK_BIN" run -d "$DB" "$K" -- sh -c 'echo "args: $*"' sh -n -w 5 --lease
    [ "$status" -eq 0 ]
    [ "$output" = "args: -n -w 5 --lease" ]
}

@test "SIGTERM to pglock reaches the job's grandchildren; status 128+N" {
    bg h run -d "$DB" "$K" -c "sh -c 'trap \"echo got > $out/gc; exit 0\" TERM; touch $out/started; while :; do sleep 0.1; done' & wait"
    wait_until 10 file_exists "$out/started"
    kill -TERM "$(pid_of h)"
    finish h 10
    [ "$(status_of h)" = 143 ]
    [ "$(cat "$out/gc")" = got ]
}

@test "background grandchildren are stopped when the command ends" {
    run "$PGLOCK_BIN" run -d "$DB" --lease=3s "$K" -c "sleep 1000 & echo \$! > $out/bg.jobpid; setsid sleep 1000 & echo \$! >> $out/bg.jobpid; exit 0"
    [ "$status" -eq 0 ]
    local p
    for p in $(cat "$out/bg.jobpid"); do
        gone "$p"
    done
}

@test "pglock SIGKILLed: its job and a background grandchild are gone before a waiter starts" {
    bg h run -d "$DB" --lease=4s "$K" -c "sleep 1000 & echo \$! > $out/h.bgpid; $(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=4s "$K" -c "$(check_job w "$out/h.jobpid" "$out/h.bgpid")"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/killed"
    kill -KILL "$(pid_of h)"
    finish w 15
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ]
    gone "$(cat "$out/h.jobpid")"
    gone "$(cat "$out/h.bgpid")"
    report "SIGKILL -> waiter's job starts: $(ms_between "$out/killed" "$out/w.start") ms;" \
        "holder's job last ran $(ms_between "$out/h.alive" "$out/w.start") ms before"
    finish h 5 || true
}

@test "interrupted while waiting: exit 130, no waiter and no session left" {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" "$K" -- touch "$out/w.ran"
    wait_until 10 waiting_on "$K"
    kill -INT "$(pid_of w)"
    finish w 10
    [ "$(status_of w)" = 130 ]
    [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]
    touch "$out/h.release"
    finish h 10
    [ ! -e "$out/w.ran" ]
    [ "$(q "select count(*) from pg_stat_activity where application_name = '$(run_app "$K")'")" -eq 0 ]
}

@test "--wait times out with 75 and leaves no waiter" {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    run "$PGLOCK_BIN" run -w 300ms -d "$DB" "$K" -- touch "$out/w.ran"
    [ "$status" -eq 75 ]
    [ ! -e "$out/w.ran" ]
    # The message names the holder, as status would.
    local pid
    pid=$(q "select pid from pg_locks where locktype = 'advisory' and granted
             and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")")
    [[ "$output" == *"lock \"$K\" in database \"postgres\" is still held by $(uname -n) (backend pid $pid, user postgres, client "*", \"$(run_app "$K")\", held "*"); the command was not run"* ]]
    [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]
    run "$PGLOCK_BIN" run --try --conflict-exit-code=3 -d "$DB" "$K" -- true
    [ "$status" -eq 3 ]
    # flock's -E, as flock users type it
    run -3 "$PGLOCK_BIN" run -n -E 3 -d "$DB" "$K" -- touch "$out/e.ran"
    run -0 "$PGLOCK_BIN" run -nE0 -d "$DB" "$K" -- touch "$out/e.ran"
    [ ! -e "$out/e.ran" ]
    run "$PGLOCK_BIN" run -q --try -d "$DB" "$K" -- true
    [ "$status" -eq 75 ]
    [ -z "$output" ]
    touch "$out/h.release"
    finish h 10
}

@test "the busy line names the holder's host: --host-label, else none for a holder that names none" {
    bg h run -d "$DB" --host-label "cron-3" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    local pid
    pid=$(q "select pid from pg_stat_activity where application_name = 'pglock run $K on cron-3'")
    [ -n "$pid" ]
    run -75 --separate-stderr "$PGLOCK_BIN" run --try -d "$DB" "$K" -- touch "$out/w.ran"
    [[ "$stderr" == "pglock: lock \"$K\" in database \"postgres\" is held by cron-3 (backend pid $pid, user postgres, client "*", \"pglock run $K on cron-3\", held "*"); the command was not run" ]]
    touch "$out/h.release"
    finish h 10
    # a psql holder: its backend pid, no host
    PGAPPNAME=psql-holder psql -X -q "$DB" -c "select pg_advisory_lock($(name_sql "$K")), pg_sleep(30)" >/dev/null 2>&1 &
    local holder=$!
    echo "$holder" >"$out/psql.pid"
    wait_until 10 eval "[ \"\$(advisory_count \"\$(name_sql \"$K\")\" t)\" = 1 ]"
    pid=$(q "select pid from pg_stat_activity where application_name = 'psql-holder'")
    run -75 --separate-stderr "$PGLOCK_BIN" run --try -d "$DB" "$K" -- touch "$out/w.ran"
    [[ "$stderr" == "pglock: lock \"$K\" in database \"postgres\" is held by backend pid $pid (user postgres, client "*", \"psql-holder\", held "*"); the command was not run" ]]
    q "select pg_terminate_backend($pid)" >/dev/null
    wait "$holder" || true
    [ ! -e "$out/w.ran" ]
}

# The holder's name costs a pg_locks read, bounded: a read that cannot be
# answered (pg_locks locked by another session for 30 s) is given up, and
# the loser says "another session" and exits while the read would still
# wait.
@test "a losing --try does not wait on the holder's name: a pg_locks read that hangs is given up, 75 all the same" {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    psql -X -q "$DB" -c "BEGIN; LOCK TABLE pg_catalog.pg_locks IN ACCESS EXCLUSIVE MODE; SELECT pg_sleep(30); COMMIT" \
        >/dev/null 2>&1 &
    local locker=$!
    wait_until 5 eval "[ \"\$(q \"select count(*) from pg_stat_activity where query like 'BEGIN; LOCK TABLE pg_catalog.pg_locks%' and wait_event = 'PgSleep'\")\" = 1 ]"
    run -75 --separate-stderr "$PGLOCK_BIN" run --try -d "$DB" "$K" -- touch "$out/w.ran"
    [ "$stderr" = "pglock: lock \"$K\" in database \"postgres\" is held by another session; the command was not run" ]
    # given up, not waited out: pg_locks is still locked
    alive "$locker"
    q "select pg_terminate_backend(pid) from pg_stat_activity where query like 'BEGIN; LOCK TABLE pg_catalog.pg_locks%'" >/dev/null
    wait "$locker" || true
    [ ! -e "$out/w.ran" ]
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
}

@test "--min-hold keeps the lock after the command ended" {
    bg h run --min-hold=3s -d "$DB" "$K" -- touch "$out/done"
    wait_until 10 file_exists "$out/done"
    # The command is over, the hold is not.
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = f ]
    run "$PGLOCK_BIN" run --try -d "$DB" "$K" -- true
    [ "$status" -eq 75 ]
    finish h 10
    [ "$(status_of h)" = 0 ]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = t ]
}

@test "as PID 1 (a container's entry point): SIGTERM reaches the job, nothing is left" {
    unshare --pid --fork --mount-proc true 2>/dev/null || skip "no PID namespaces here (unshare)"
    unshare --pid --fork --mount-proc "$PGLOCK_BIN" run -d "$DB" "$K" -c \
        "echo \$(cut -d' ' -f1 /proc/1/stat) > $out/pid1; (sleep 1000 &); touch $out/started; sleep 1000" &
    local u=$!
    wait_until 10 file_exists "$out/started"
    [ "$(cat "$out/pid1")" = 1 ]
    local p
    p=$(cat "/proc/$u/task/$u/children")
    p=${p%% *}
    [ "$(cat "/proc/$p/comm")" = pglock ]
    kill -TERM "$p"
    wait_until 10 eval "! alive $u"
    local st=0
    wait "$u" || st=$?
    [ "$st" -eq 143 ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
}

@test "--foreground: an interactive command reads the terminal; by default it is told why it cannot" {
    command -v script >/dev/null || skip "script(1) is not installed"
    # Each key is typed once the terminal shows the job is at its read.
    (wait_until 20 grep -q ready "$out/fg" || true; echo yes) | timeout 20 script -qec \
        "$PGLOCK_BIN run --foreground -d '$DB' '$K' -- sh -c 'echo ready; read a; echo answer=\$a'" /dev/null >"$out/fg" 2>&1
    grep -q "answer=yes" "$out/fg"
    (wait_until 20 grep -q "tried to read" "$out/bg" || true; printf '\003') | timeout 20 script -qec \
        "$PGLOCK_BIN run -d '$DB' '$K' -- sh -c 'read a; echo answer=\$a'" /dev/null >"$out/bg" 2>&1 || true
    grep -q "tried to read from the terminal, which only --foreground lets it use" "$out/bg"
    run ! grep -q "answer=" "$out/bg"
}
