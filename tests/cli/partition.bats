#!/usr/bin/env bats
# A real network partition, which the server's kernel alone can detect:
# the holder runs inside the harness's network namespace and reaches the
# partition server by TCP;
# the cut drops every packet of that port both ways, so the server's
# kernel hears nothing from the holder (no ACK, no RST, no keepalive
# answer), as on a cut cable.  A waiter outside reaches the same server by
# its Unix socket, which is never cut.  The holder's job ignores SIGTERM,
# so it runs until pglock's SIGKILL at T_c + kill-after; the server must
# not free the lock before then.  Lease 6 s: T_c 4 s, kill-after 1 s,
# margin 1 s.  Every wait is bounded; the assertion is the order of the
# two jobs' own timestamps, not a duration.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_PARTITION_NETNS PGLOCK_TEST_PARTITION_TCP PGLOCK_TEST_PARTITION_SOCKET
    SOCK=$PGLOCK_TEST_PARTITION_SOCKET
}
teardown() {
    teardown_run
    partition_cmd heal >/dev/null 2>&1 || true
}

# bg_partition NAME ARGS...: as bg, but pglock runs inside the namespace
# (the harness's partition-exec execs it: the pid is pglock's own).
bg_partition() {
    local name=$1
    shift
    "$PGLOCK_TEST_HARNESS" partition-exec env --default-signal=INT,QUIT \
        "$PGLOCK_BIN" "$@" >"$out/$name.out" 2>"$out/$name.err" &
    echo $! >"$out/$name.pid"
}

# A job that ignores SIGTERM and stamps its last sign of life (stamp_job).
stubborn_job() { printf "trap '' TERM; %s" "$(stamp_job "$1")"; }

# waiting_on_partition NAME: someone waits for the text key NAME there.
waiting_on_partition() {
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and not granted
              and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$1")" "$SOCK")" -ge 1 ]
}

# job_gone NAME: the job whose pid NAME.jobpid holds no longer runs.
job_gone() { gone "$(cat "$out/$1.jobpid")"; }

# The order the rule demands: the holder's job ran for the last time
# before the waiter's job started, and nothing of it was alive then.
assert_no_overlap() {
    local before
    before=$(ms_between "$out/h.alive" "$out/w.start")
    report "$1: cut -> holder's job last ran at +$(ms_between "$out/cut" "$out/h.alive") ms," \
        "waiter's job started at +$(ms_between "$out/cut" "$out/w.start") ms" \
        "(${before} ms after the holder's last line; lease 6000 ms)"
    [ ! -e "$out/w.overlap" ] || { echo "still running at the waiter's start: $(cat "$out/w.overlap")"; false; }
    [ "$before" -gt 0 ] || { echo "the holder's job ran $((-before)) ms after the waiter's started"; false; }
}

# cut_under_stubborn_holder CMD [OPTION]...: `pglock CMD OPTION...` holds
# $K from inside the namespace (TCP, lease 6 s) with a stubborn_job h; a
# waiter's run queues through the socket, then the partition is cut.
# Returns once the waiter's job ran and exited 0 and the holder's job is
# gone, the two in the order assert_no_overlap demands; the cut stays.
cut_under_stubborn_holder() {
    local cmd=$1
    shift
    bg_partition h "$cmd" "$@" -d "$PGLOCK_TEST_PARTITION_TCP" --lease=6s "$K" -c "$(stubborn_job h)"
    wait_until 20 file_exists "$out/h.start"
    bg w run -d "$SOCK" "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on_partition "$K"
    date +%s%N >"$out/cut"
    partition_cmd cut
    finish w 30
    [ "$(status_of w)" = 0 ] || { echo "waiter: exit $(status_of w): $(cat "$out/w.err")"; false; }
    wait_until 20 job_gone h
    assert_no_overlap "$cmd"
}

@test "partition: the harness's cut is real: the holder's TCP is dark, the socket still answers" {
    run "$PGLOCK_TEST_HARNESS" partition-exec psql -X -A -t "$PGLOCK_TEST_PARTITION_TCP" -c 'select 2'
    [ "$output" = 2 ]
    date +%s%N >"$out/cut"
    partition_cmd cut
    run "$PGLOCK_TEST_HARNESS" partition-exec psql -X -A -t "connect_timeout=2 $PGLOCK_TEST_PARTITION_TCP" -c 'select 1'
    [ "$status" -ne 0 ]
    [ "$(q 'select 3' "$SOCK")" = 3 ]
    partition_cmd heal
    run "$PGLOCK_TEST_HARNESS" partition-exec psql -X -A -t "connect_timeout=5 $PGLOCK_TEST_PARTITION_TCP" -c 'select 4'
    [ "$output" = 4 ]
}

@test "partition: run's job that ignores SIGTERM last ran before a waiter's job started" {
    cut_under_stubborn_holder run
    partition_cmd heal
    finish h 30
    [ "$(status_of h)" = 74 ]
}

@test "partition: lead's job that ignores SIGTERM last ran before a waiter's job started" {
    cut_under_stubborn_holder lead -v
    grep -q "leadership lost" "$out/h.err"
    # lead contends again for ever; stop it before the heal, so that it
    # cannot lead (and stamp) again.
    kill -TERM "$(pid_of h)"
    finish h 30
}

# in_flight: the holder's side still has a TCP connection to the server
# that may send (established, or closing with bytes queued): what it
# queued can still reach the server.
in_flight() {
    local port=${PGLOCK_TEST_PARTITION_TCP#*port=}
    port=${port%% *}
    [ -n "$("$PGLOCK_TEST_HARNESS" partition-exec ss -Htn state established state fin-wait-1 \
        state closing state last-ack "( dport = :$port )")" ]
}
# record_settled: no history session of $K's is running a statement, and
# none has unread bytes: whatever reached the server has run.
record_settled() {
    [ "$(q "select count(*) from pg_stat_activity where application_name like '%record%'
              and application_name like '%$K%' and state = 'active'" "$SOCK")" -eq 0 ] || return 1
    local port=${PGLOCK_TEST_PARTITION_TCP#*port=}
    port=${port%% *}
    "$PGLOCK_TEST_HARNESS" partition-exec ss -Htn "( sport = :$port )" | awk '$2 > 0 { x = 1 } END { exit x }'
}

@test "partition: --record's end is never written late: after the heal the row is unrecorded, or lost and ended when the job did" {
    "$PGLOCK_BIN" init -q -d "$SOCK"
    bg_partition h run --record -d "$PGLOCK_TEST_PARTITION_TCP" --lease=6s "$K" -c "$(stamp_job h)"
    wait_until 20 file_exists "$out/h.start"
    date +%s%N >"$out/cut"
    partition_cmd cut
    finish h 30
    [ "$(status_of h)" = 74 ]
    date +%s%N >"$out/heal"
    partition_cmd heal
    # What pglock left queued reaches the server now, or never.
    wait_until 60 eval '! in_flight'
    wait_until 10 record_settled
    local row alive heal
    row=$(q "select coalesce(outcome, 'null') || ' ' || coalesce(floor(extract(epoch from ended_at) * 1000)::bigint::text, 'null')
               from pglock.runs where key_name = '$K' order by id desc limit 1" "$SOCK")
    alive=$(($(cat "$out/h.alive") / 1000000))
    heal=$(($(cat "$out/heal") / 1000000))
    report "cut -> job's last line at +$(ms_between "$out/cut" "$out/h.alive") ms, heal at +$(ms_between "$out/cut" "$out/heal") ms; row \"$row\""
    # pglock gave up on the end: then nothing it sent may land later.
    if grep -q "could not record the end of the run" "$out/h.err"; then
        [ "$row" = "null null" ] || { echo "an end given up on landed: \"$row\""; false; }
    fi
    case $row in
    "null null") ;; # no write was possible: its end is unknown
    "lost "*)
        [ "${row#* }" -ge $((alive - 2)) ] && [ "${row#* }" -lt "$heal" ] ||
            { echo "ended_at ${row#* } is not the job's end (last line $alive, heal $heal)"; false; } ;;
    *) echo "recorded as \"$row\""; false ;;
    esac
}

# backend_of_waiter NAME: the pid of the backend waiting for text key NAME.
backend_of_waiter() {
    q "select pid from pg_locks where locktype = 'advisory' and not granted
         and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$1")" "$SOCK"
}
backend_gone() {
    [ "$(q "select count(*) from pg_stat_activity where pid = $1" "$SOCK")" -eq 0 ]
}
key_free() {
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and granted
              and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$1")" "$SOCK")" -eq 0 ]
}

@test "partition: a waiter cut off is ended by the server within 20 s, and its command never runs" {
    bg hh run -d "$SOCK" "$K" -c "$(stamp_job hh)"
    wait_until 20 file_exists "$out/hh.start"
    bg_partition w run -d "$PGLOCK_TEST_PARTITION_TCP" --lease=3s "$K" -c "$(check_job w)"
    wait_until 20 waiting_on_partition "$K"
    local backend
    backend=$(backend_of_waiter "$K")
    date +%s%N >"$out/cut"
    partition_cmd cut
    # The waiter's silence ends its session after the lease at the latest
    # (tcp_user_timeout, then client_connection_check_interval).
    wait_until 20 backend_gone "$backend"
    date +%s%N >"$out/ended"
    report "cut -> the silent waiter's backend ended at +$(ms_between "$out/cut" "$out/ended") ms (lease 3000 ms)"
    touch "$out/hh.release"
    finish hh 10
    [ "$(status_of hh)" = 0 ]
    wait_until 5 key_free "$K"
    [ ! -e "$out/w.start" ]
    partition_cmd heal
    finish w 30
    [ ! -e "$out/w.start" ]
}

# busy_cores: two `yes` keep both cores busy until teardown_run kills them
# (their pids are in $out/*.pid), as a loaded host would.
busy_cores() {
    local i
    for i in 1 2; do
        yes >/dev/null &
        echo $! >"$out/load$i.pid"
    done
}

# A job that records each SIGTERM it gets (and runs on after it), and
# stamps its last sign of life (stamp_job).
term_counting_job() {
    printf "trap 'echo TERM >> %s/%s.terms; date +%%s%%N > %s/%s.terms.at' TERM; %s" \
        "$out" "$1" "$out" "$1" "$(stamp_job "$1")"
}

# partition_cut_with_busy_cores KILL_AFTER LEASE: run's job h over the
# partition, both cores busy, then the cut; returns once pglock exited.
partition_cut_with_busy_cores() {
    busy_cores
    bg_partition h run -v -d "$PGLOCK_TEST_PARTITION_TCP" --lease="$2" \
        --kill-after="$1" "$K" -c "$(term_counting_job h)"
    wait_until 20 file_exists "$out/h.start"
    date +%s%N >"$out/cut"
    partition_cmd cut
    finish h 60
    partition_cmd heal
    report "kill-after $1, lease $2: $(grep -c . "$out/h.terms" 2>/dev/null || echo 0) SIGTERM," \
        "last ran at +$(ms_between "$out/cut" "$out/h.alive") ms after the cut;" \
        "$(grep -E 'lost|command exited' "$out/h.err" | tr '\n' ' ')"
    [ "$(status_of h)" = 74 ] || { cat "$out/h.err"; false; }
    # SIGTERM first (the trap ran: it runs only before the SIGKILL), once
    [ "$(cat "$out/h.terms" 2>/dev/null)" = TERM ] || { echo "SIGTERMs: $(grep -c . "$out/h.terms" 2>/dev/null)"; cat "$out/h.err"; false; }
    grep -q "command exited (signal 9)" "$out/h.err"
}

@test "partition: with both cores busy, a lost run's job gets one SIGTERM, then SIGKILL after kill-after" {
    partition_cut_with_busy_cores 1s 6s
}

# A kill-after up to half the lease (T_c = T_s - kill-after - margin): the
# job that ignores SIGTERM gets its whole grace, one SIGTERM, and still
# last runs before a waiter's job starts.
@test "partition: a kill-after of half the lease: one SIGTERM, the whole grace, and no overlap" {
    busy_cores
    bg_partition h run -v -d "$PGLOCK_TEST_PARTITION_TCP" --lease=6s --kill-after=3s \
        "$K" -c "$(term_counting_job h)"
    wait_until 20 file_exists "$out/h.start"
    bg w run -d "$SOCK" "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on_partition "$K"
    date +%s%N >"$out/cut"
    partition_cmd cut
    finish w 30
    [ "$(status_of w)" = 0 ] || { echo "waiter: exit $(status_of w): $(cat "$out/w.err")"; false; }
    finish h 30
    partition_cmd heal
    assert_no_overlap "kill-after 3s"
    [ "$(status_of h)" = 74 ]
    [ "$(cat "$out/h.terms" 2>/dev/null)" = TERM ]
    # the grace was given: the job ran on after its SIGTERM
    report "the job last ran $(ms_between "$out/h.terms.at" "$out/h.alive") ms after its SIGTERM (kill-after 3000 ms)"
    [ "$(ms_between "$out/h.terms.at" "$out/h.alive")" -gt 0 ]
    grep -q "command exited (signal 9)" "$out/h.err"
}

@test "partition: run --replace of a holder cut off falls back to the lease: the new job starts only after the old one is gone" {
    # The holder cannot hear the request: nothing ends its session, the
    # replacer waits (bounded by --wait) until the lease has stopped the
    # job and the server has freed the lock.
    bg_partition h run -d "$PGLOCK_TEST_PARTITION_TCP" --lease=6s "$K" -c "$(stubborn_job h)"
    wait_until 20 file_exists "$out/h.start"
    date +%s%N >"$out/cut"
    partition_cmd cut
    bg w run -d "$SOCK" --replace --wait=40s "$K" -c "$(check_job w "$out/h.jobpid")"
    finish w 45
    [ "$(status_of w)" = 0 ] || { echo "waiter: exit $(status_of w): $(cat "$out/w.err")"; false; }
    wait_until 20 job_gone h
    assert_no_overlap "run --replace"
}
