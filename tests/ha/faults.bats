#!/usr/bin/env bats
# The HA fault matrix: one scene per fault of tests/harness/ha.sh
# (switchover, failover, freeze, partition, dcs-stop), in which `pglock
# run`, `pglock lead` and the library's managed hold (tests/chaos/
# hold_host.c) each hold a key of their own, beside the primary (in its
# namespace, `ha.sh exec --primary`: a partition cuts them off with it).
# For each key a contender in the hub (another namespace) waits through
# the other path: HAProxy's primary port, or the multi-host conninfo with
# target_session_attrs=read-write; the paths alternate from scene to
# scene.  The contenders are `run --wait` for run's and lead's keys, and
# for the library's key a library waiter (the same program, waiting for
# ever), which opens a new client when its wait ends in a lost
# connection, as the library's callers must.
#
# Every job ticks timestamps (the library's holder writes a line per
# 200 ms step); the assertion is their order: each job of a key starts
# after the last tick of every earlier job of that key, and at its start
# finds none of them alive in /proc; every job process is gone at the end.
#
# The lease is 20 s, which fits Patroni's defaults (ttl 30, loop_wait 10:
# the leader key expires ttl after its last refresh, which came at most
# loop_wait before the death, so no standby is promoted sooner than 20 s
# after it): T_c 13.3 s + kill-after 3.3 s + margin 3.3 s, so a job whose
# server fell silent is gone 16.7 s after the last confirmed heartbeat
# was sent.  Silent losses (freeze; a partition seen through HAProxy)
# and losses whose next primary comes only at the leader key's expiry
# (failover, a partition's demotion seen over multi-host, dcs-stop) must
# show no overlap at all.  A switchover is a loss the server causes where
# the next holder may start at once (the old primary shuts down, the new
# one is promoted within seconds): there a job may overlap by at most the
# stop budget (kill-after, T_s/6 = 3333 ms; for the library the hold's
# stop budget, the same) + 250 ms, as the chaos checker's bound.
#
# The sync variant of check-ha runs only the tests not tagged async-only
# (tests/ha/check.sh): switchover and freeze, to keep check-ha's time.
#
# Figures (printed, never asserted): from the fault to Patroni's promotion
# (its log) and to each new holder's command start.

load ../support/harness
bats_require_minimum_version 1.5.0

LEASE_MS=20000
BOUND_US=$(((LEASE_MS / 6 + 250) * 1000))

setup() {
    need PGLOCK_HA PGLOCK_HA_DIR PGLOCK_BIN PGLOCK_BUILD
    out=$BATS_TEST_TMPDIR
    K="ha-faults-$BATS_TEST_NUMBER-$$-$RANDOM"
    LIBKEY=$((RANDOM * 32768 + RANDOM + 1000000))
    LIBHOLD=$PGLOCK_BUILD/tests/pglock_test_chaos_hold
}

teardown() {
    local f p
    for f in "$out"/*.pid "$out"/*/pids; do
        [ -e "$f" ] || continue
        while read -r p; do kill -KILL "$p" 2>/dev/null || true; done <"$f"
    done
    # (a library program's live/PID: its waiter's loop may be gone already)
    for f in "$out"/*/live/*; do
        [ ! -e "$f" ] || kill -KILL "${f##*/}" 2>/dev/null || true
    done
    "$PGLOCK_HA" heal
}

report() { echo "# $*" >&3; }
now_us() { echo "${EPOCHREALTIME/./}"; }

# A job: writes "START_US NAME PID" to DIR/starts, records in DIR/overlap
# any earlier job of DIR (DIR/pids) still alive then (a zombie does not
# run), then ticks its time into DIR/PID.ticks every 20 ms until
# DIR/release.  It ignores SIGTERM: the worst case, it lives until
# pglock's SIGKILL.  Run as: bash -c "$TICK" tick DIR.
TICK='d=$1
trap "" TERM
echo "${EPOCHREALTIME/./} tick $$" >>"$d/starts"
for p in $(cat "$d/pids" 2>/dev/null); do
    s=$(cat /proc/$p/stat 2>/dev/null) || continue
    s=${s##*) }
    [ "${s%% *}" = Z ] || echo "$p" >>"$d/overlap"
done
echo $$ >>"$d/pids"
exec {z}<> <(:)
while [ ! -e "$d/release" ]; do
    echo "${EPOCHREALTIME/./}" >>"$d/$$.ticks"
    read -r -t 0.02 -u "$z" || :
done'

# holder KIND CONNINFO: KIND (run, lead or lib) holds its key ($K-run,
# $K-lead, $LIBKEY) from the primary's namespace, lease 20 s; its files
# are in $out/KIND.
holder() {
    local kind=$1 conn=$2 d=$out/$1
    mkdir -p "$d/live"
    case $kind in
    run | lead)
        "$PGLOCK_HA" exec --primary -- "$PGLOCK_BIN" "$kind" -v --lease=20s -d "$conn" "$K-$kind" \
            -- bash -c "$TICK" tick "$d" ;;
    lib)
        # one job, 200 ms steps (under the budget T_s/6), for ever
        CHAOS_DIR=$d "$PGLOCK_HA" exec --primary -- "$LIBHOLD" ha thread 0 "$LEASE_MS" 200 1000000 \
            "$LIBKEY" "$conn" ;;
    esac >"$d/holder.out" 2>"$d/holder.err" &
    # (ha.sh exec and ip netns exec exec: the pid is pglock's or the
    # holder program's own)
    echo $! >"$out/$kind-holder.pid"
    [ "$kind" != lib ] || echo $! >>"$d/pids"
}

# The library's waiter, a caller of pglock_lock(PGLOCK_WAIT_FOREVER):
# exit 69 is a lost connection (or none yet), after which it opens a new
# client and waits again; its job is 10 steps of 200 ms.  Run as: bash -c
# "$LIBWAIT" libwait DIR PROGRAM KEY CONNINFO.
LIBWAIT='while :; do
    rc=0
    CHAOS_DIR=$1 "$2" ha-waiter thread -1 20000 200 10 "$3" "$4" || rc=$?
    [ "$rc" = 69 ] || exit "$rc"
    sleep 0.5
done'

# contender KIND CONNINFO: `run --wait` for KIND's key (lib: the library's
# waiter), from the hub.
contender() {
    local kind=$1 d=$out/$1
    if [ "$kind" = lib ]; then
        "$PGLOCK_HA" exec -- bash -c "$LIBWAIT" libwait "$d" "$LIBHOLD" "$LIBKEY" "$2"
    else
        "$PGLOCK_HA" exec -- "$PGLOCK_BIN" run -v --wait=300s --lease=20s -d "$2" "$K-$kind" \
            -- bash -c "$TICK" tick "$d"
    fi >"$d/contender.out" 2>"$d/contender.err" &
    echo $! >"$out/$kind-contender.pid"
}

# jobs_of KIND: KIND's jobs, "START_US LAST_US PID", in start order: the
# tick jobs (last: their last tick) and the library's holder (its first
# and last line in jobs.log).
jobs_of() {
    local d=$out/$1 t p
    {
        if [ -e "$d/starts" ]; then
            while read -r t _ p; do
                echo "$t $(tail -n 1 "$d/$p.ticks" 2>/dev/null || echo "$t") $p"
            done <"$d/starts"
        fi
        if [ -e "$d/jobs.log" ]; then
            awk '!($5 in s) { s[$5] = $1 } { l[$5] = $1 } END { for (p in s) print s[p], l[p], p }' "$d/jobs.log"
        fi
    } | sort -n
}
jobs_at_least() { [ "$(jobs_of "$1" | wc -l)" -ge "$2" ]; }
old_job() { jobs_of "$1" | head -n 1 | cut -d' ' -f3; }
job_gone() { local s; ! proc_state "$1" s || [ "$s" = Z ]; }

# waiting N: N lock requests wait on the primary (through HAProxy).
waiting() {
    [ "$("$PGLOCK_HA" exec -- psql -X -q -A -t "$PGLOCK_HA_PRIMARY" -c \
        "select count(*) from pg_locks where locktype = 'advisory' and not granted")" -ge "$1" ]
}

# promoted_after US: when (µs) a Patroni last logged its promotion after
# US, or nothing.
promoted_after() {
    local line t best=
    while IFS= read -r line; do
        t=$(date -d "$(echo "$line" | cut -c1-23 | tr , .)" +%s%6N) || continue
        [ "$t" -gt "$1" ] || continue
        [ -n "$best" ] && [ "$best" -le "$t" ] || best=$t
    done < <(grep -h "promoted self to leader" "$PGLOCK_HA_DIR"/node*/patroni.log)
    echo "$best"
}

# check_order KIND BOUND_US: every job of KIND started after the last
# tick of every earlier one (less BOUND_US, for a switchover); prints
# the gaps (ms, negative: an overlap).
check_order() {
    local kind=$1 bound=$2 start last maxlast='' bad=0 gaps=''
    while read -r start last _; do
        if [ -n "$maxlast" ]; then
            gaps+=" $(((start - maxlast) / 1000))"
            [ "$start" -gt $((maxlast - bound)) ] || bad=1
        fi
        [ -n "$maxlast" ] && [ "$maxlast" -ge "$last" ] || maxlast=$last
    done < <(jobs_of "$kind")
    echo "$kind: ms from the earlier jobs' last tick to each later start:$gaps"
    [ "$bad" = 0 ] || { jobs_of "$kind"; return 1; }
}

# scene FAULT RUN_PATH LEAD_PATH LIB_PATH: the three holders (each on the
# path named, HAProxy or multi) and their contenders (on the other one),
# then FAULT; every key must reach a new holder.
scene() {
    local fault=$1 kind t0 p i
    declare -A paths=([run]=$2 [lead]=$3 [lib]=$4)
    conn_of() { if [ "$1" = haproxy ]; then echo "$PGLOCK_HA_PRIMARY"; else echo "$PGLOCK_HA_MULTI"; fi; }
    other_of() { if [ "$1" = haproxy ]; then echo multi; else echo haproxy; fi; }
    for kind in run lead lib; do holder "$kind" "$(conn_of "${paths[$kind]}")"; done
    for kind in run lead lib; do wait_until 30 jobs_at_least "$kind" 1; done
    # Every contender is queued on the primary before the fault.  On a
    # frozen one, a multi-host waiter's socket never fails (the node's
    # kernel still ACKs and answers keepalives): the library's wait in
    # slices of T_s ends it (lease_wait_slice_ms()), and it reaches the
    # promoted standby by itself.  Through HAProxy the health check ends
    # such a session (on-marked-down shutdown-sessions).
    for kind in run lead lib; do contender "$kind" "$(conn_of "$(other_of "${paths[$kind]}")")"; done
    wait_until 30 waiting 3
    p=$("$PGLOCK_HA" primary)
    t0=$(now_us)
    "$PGLOCK_HA" "$fault" >"$out/fault.out"
    if [ "$fault" = dcs-stop ]; then
        # No primary until etcd is back: Patroni demotes the old one (a
        # loss the server causes); only then does the heal let a new one
        # be elected.
        wait_until 60 job_gone "$(old_job run)"
        wait_until 60 job_gone "$(old_job lib)"
        wait_until 60 job_gone "$(old_job lead)"
        "$PGLOCK_HA" heal
    fi
    for kind in run lead lib; do wait_until 120 jobs_at_least "$kind" 2; done
    # The old jobs were gone by then or are now, by pglock's doing.
    for kind in run lead lib; do wait_until 30 job_gone "$(old_job "$kind")"; done
    local figs="" pr
    pr=$(promoted_after "$t0")
    [ -z "$pr" ] || pr="at +$(((pr - t0) / 1000)) ms"
    for kind in run lead lib; do
        figs+=" $kind (${paths[$kind]}) old job's last tick +$((($(jobs_of "$kind" | sed -n 1p | cut -d' ' -f2) - t0) / 1000)) ms,"
        figs+=" new start +$((($(jobs_of "$kind" | sed -n 2p | cut -d' ' -f1) - t0) / 1000)) ms;"
    done
    report "$fault of node$p (synchronous_mode $PGLOCK_HA_SYNC): Patroni's promotion ${pr:-not logged};$figs"
    # The end: the contenders' jobs stop, lead stops.
    for kind in run lead lib; do touch "$out/$kind/release"; done
    kill -TERM "$(cat "$out/lead-holder.pid")" 2>/dev/null || true
    for p in "$out"/*-holder.pid "$out"/*-contender.pid; do
        wait_until 60 job_gone "$(cat "$p")"
        i=0
        wait "$(cat "$p")" || i=$?
        p=${p##*/}
        echo "$i" >"$out/${p%.pid}.status"
    done
    for p in $(cat "$out"/*/pids); do wait_until 10 job_gone "$p"; done
    for kind in run lead lib; do
        cat "$out/$kind"/*.err >&2
    done
    # run's and the library's holders lost (74), lead was stopped (143),
    # every contender ran its job and exited 0.
    [ "$(cat "$out/run-holder.status")/$(cat "$out/lib-holder.status")" = 74/74 ]
    [ "$(cat "$out/lead-holder.status")" = 143 ]
    [ "$(cat "$out"/*-contender.status | sort -u)" = 0 ]
}

# after_scene BOUND_US: the order of every key's jobs; with no bound, no
# job found an earlier one alive at its start either.
after_scene() {
    local kind
    for kind in run lead lib; do
        check_order "$kind" "$1"
        [ "$1" != 0 ] || [ ! -e "$out/$kind/overlap" ] ||
            { echo "$kind: earlier jobs alive at a start: $(cat "$out/$kind/overlap")"; false; }
    done
}

@test "switchover: run, lead and the library's hold stop their jobs; the next holders overlap them by at most the stop budget + 250 ms" {
    scene switchover haproxy multi multi
    after_scene "$BOUND_US"
}

# bats test_tags=async-only
@test "failover (the primary's node killed): run, lead and the library's hold: no overlap with the holders on the new primary" {
    scene failover multi haproxy haproxy
    after_scene 0
}

@test "freeze (a silent primary): run, lead and the library's hold stop their jobs before the promoted standby grants the lock" {
    scene freeze haproxy multi haproxy
    after_scene 0
}

# bats test_tags=async-only
@test "partition of the primary with its holders: run, lead and the library's hold: no overlap with the holders on the new primary" {
    scene partition multi haproxy multi
    after_scene 0
}

# bats test_tags=async-only
@test "dcs-stop (etcd lost): the primary demotes itself, the holders stop; the next holders start on the re-elected primary, no overlap" {
    scene dcs-stop haproxy multi haproxy
    after_scene 0
}
