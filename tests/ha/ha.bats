#!/usr/bin/env bats
# pglock against a Patroni cluster behind HAProxy, over TLS (verify-full):
# tests/harness/ha.sh's cluster, run by `make check-ha` (tests/ha/check.sh)
# once asynchronous and once with synchronous_mode.  Clients run in the
# cluster's hub namespace (`ha.sh exec`), where HAProxy and every node are
# reachable.  Every wait is bounded polling; the figures printed are
# measurements, never assertions.

load ../support/harness
bats_require_minimum_version 1.5.0

setup() {
    need PGLOCK_HA PGLOCK_HA_DIR PGLOCK_BIN
    out=$BATS_TEST_TMPDIR
    K="ha-test-$BATS_TEST_NUMBER-$$-$RANDOM"
}

teardown() {
    local f
    for f in "$out"/*.pid; do
        [ -e "$f" ] || continue
        kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
    # Whatever a test did to the cluster, the next one starts from a
    # settled one.
    "$PGLOCK_HA" heal
}

hx() { "$PGLOCK_HA" exec -- "$@"; }
# hq CONNINFO SQL: one value, from the hub.
hq() { hx psql -X -q -A -t -v ON_ERROR_STOP=1 "$1" -c "$2"; }
pglock() { hx "$PGLOCK_BIN" "$@"; }
report() { echo "# $*" >&3; }
now_ns() { date +%s%N; }

# bgx NAME ARGS...: pglock ARGS in the hub, in the background; output in
# $out/NAME.out/.err, pid (pglock's own: ip netns exec execs) in .pid.
bgx() {
    local name=$1
    shift
    "$PGLOCK_HA" exec -- "$PGLOCK_BIN" "$@" >"$out/$name.out" 2>"$out/$name.err" &
    echo $! >"$out/$name.pid"
}

# lines FILE: how many lines FILE has (0 if none).
lines() { [ -e "$1" ] && wc -l <"$1" || echo 0; }
at_least() { [ "$(lines "$1")" -ge "$2" ]; }

@test "through HAProxy's primary port, run holds the lock over TLS with the server's certificate verified (verify-full)" {
    run -0 pglock run -d "$PGLOCK_HA_PRIMARY" "$K" -- \
        psql -X -q -A -t "$PGLOCK_HA_PRIMARY" -c "select s.ssl, s.version from pg_stat_ssl s join pg_locks l on l.pid = s.pid where l.locktype = 'advisory' and l.granted"
    [ "$output" = "t|TLSv1.3" ]
    # And a client that does not know the CA is refused: the TLS is real.
    run ! pglock run -d "$PGLOCK_HA_PRIMARY sslrootcert=/dev/null" "$K" -- true
    [ "$status" = 69 ]
}

@test "through HAProxy's replica port, run never takes a lock: it exits 69 at its first connection and the job never runs" {
    run pglock run -d "$PGLOCK_HA_REPLICA" "$K" -- touch "$out/ran"
    [ "$status" = 69 ]
    [[ $output == *standby* || $output == *recovery* || $output == *read-only* ]]
    [ ! -e "$out/ran" ]
}

@test "a stale multi-host entry that names a standby first (target_session_attrs=any): run exits 69, the job never runs" {
    local p s conn
    p=$("$PGLOCK_HA" primary)
    s=$((p % 3 + 1))
    # host=STANDBY,PRIMARY: libpq takes the first that answers.
    conn="host=10.0.$s.2,10.0.$p.2 port=5432 sslmode=verify-full sslrootcert=$PGLOCK_HA_CA user=postgres dbname=postgres"
    [ "$(hq "$conn" 'select pg_is_in_recovery()')" = t ]
    run pglock run -d "$conn" "$K" -- touch "$out/ran"
    [ "$status" = 69 ]
    [ ! -e "$out/ran" ]
    # With target_session_attrs=read-write the same list reaches the primary.
    run -0 pglock run -d "$conn target_session_attrs=read-write" "$K" -- touch "$out/ran"
    [ -e "$out/ran" ]
}

# The job a leader runs: its start time, one line per start.
lead_job() { printf 'date +%%s%%N >> %s; exec sleep 1000' "$1"; }

# A fault (switchover or failover) with `lead` holding through HAProxy and
# `run --wait` waiting through multi-host read-write: both must reach the
# new primary by themselves.  Prints the figures: from the fault to
# Patroni's new primary answering through HAProxy, and to each job's start.
fault_and_follow() {
    local fault=$1 t0 t_primary
    bgx lead lead --restart -d "$PGLOCK_HA_PRIMARY" "$K-lead" -c "$(lead_job "$out/lead.starts")"
    wait_until 20 at_least "$out/lead.starts" 1
    # A holder of the waiter's key that the fault ends with its node.
    bgx holder run -d "$PGLOCK_HA_MULTI" "$K-wait" -- sleep 1000
    wait_until 20 eval "[ \"\$(hq \"\$PGLOCK_HA_PRIMARY\" \"select count(*) from pg_locks where locktype = 'advisory' and granted\")\" -ge 2 ]"
    bgx waiter run --wait=180s -d "$PGLOCK_HA_MULTI" "$K-wait" -c "date +%s%N > $out/waiter.start"
    wait_until 20 eval "[ \"\$(hq \"\$PGLOCK_HA_PRIMARY\" \"select count(*) from pg_locks where locktype = 'advisory' and not granted\")\" -ge 1 ]"
    t0=$(now_ns)
    "$PGLOCK_HA" "$fault" >"$out/fault.out"
    if [ "$fault" = failover ]; then
        "$PGLOCK_HA" wait-primary 90 >/dev/null
    fi
    t_primary=$(now_ns)
    # The old holder's connection died with its node (failover) or with
    # the demotion (switchover): the waiter takes the lock on the new
    # primary, and lead leads there again.
    wait_until 120 file_exists "$out/waiter.start"
    wait_until 120 at_least "$out/lead.starts" 2
    [ "$(hq "$PGLOCK_HA_PRIMARY" 'select pg_is_in_recovery()')" = f ]
    report "$fault (synchronous_mode $PGLOCK_HA_SYNC): ha.sh $fault returned (new primary through HAProxy; a switchover waits for a settled cluster) after $(( (t_primary - t0) / 1000000 )) ms;" \
        "run --wait (multi-host) started after $(( ($(cat "$out/waiter.start") - t0) / 1000000 )) ms;" \
        "lead (HAProxy) started again after $(( ($(tail -n 1 "$out/lead.starts") - t0) / 1000000 )) ms"
}

file_exists() { [ -e "$1" ]; }

@test "after a switchover, lead (through HAProxy) and run --wait (multi-host, read-write) reach the new primary by themselves" {
    fault_and_follow switchover
}

@test "after a failover (the primary's node killed), lead (through HAProxy) and run --wait (multi-host, read-write) reach the new primary by themselves" {
    fault_and_follow failover
}
