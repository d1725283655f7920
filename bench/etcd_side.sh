#!/usr/bin/env bash
# etcd_side.sh — `etcdctl lock` beside `pglock run`: lock + command +
# release of `true`, and the takeover after a holder is SIGKILLed, against a
# throwaway single-node etcd of its own (loopback, free ports, a temp data
# dir; stopped at the end).  Prints the markdown body of make bench's etcd
# section.
#
#   bench/etcd_side.sh BUILD_DIR PAIRS WARMUP TAKEOVERS DEFAULT_TTL_TAKEOVERS
#
# DEFAULT_TTL_TAKEOVERS = 0 leaves out the takeover at etcdctl's default
# TTL (10 s a run: the smoke run's choice).  Needs the harness running
# (PGLOCK_TEST_PRIMARY, as bench/run.sh sets it).
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: bench/etcd_side.sh BUILD_DIR PAIRS WARMUP TAKEOVERS DEFAULT_TTL_TAKEOVERS}")
PAIRS=${2:?} WARMUP=${3:?} TAKEOVERS=${4:?} DEFAULT_TAKEOVERS=${5:?}
PGLOCK=$BUILD/pglock
DB=${PGLOCK_TEST_PRIMARY:?the harness is not running}
# etcd is reached over TCP loopback: so is PostgreSQL, where the harness has it
DB_TCP=${PGLOCK_TEST_PRIMARY_TCP:-$DB}

if ! command -v etcd >/dev/null || ! command -v etcdctl >/dev/null; then
    echo "etcd is not installed (etcd and etcdctl; Debian's etcd-server and etcd-client): not measured."
    exit 0
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/pglock-etcd.XXXXXX")
ETCD_PID=
cleanup() {
    local p
    # the commands of killed holders, if one outlived its holder
    if [ -f "$T/holders" ]; then
        while read -r p; do kill -KILL "$p" 2>/dev/null || true; done <"$T/holders"
    fi
    if [ -n "$ETCD_PID" ]; then
        kill -TERM "$ETCD_PID" 2>/dev/null || true
        wait "$ETCD_PID" 2>/dev/null || true
    fi
    rm -rf "$T"
}
trap cleanup EXIT
say() { echo "bench: $*" >&2; }

# until_ok SECS CMD...: polls CMD every 10 ms, at most SECS seconds.
until_ok() {
    local end=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -lt "$end" ] || { say "error: timed out: $*"; return 1; }
        sleep 0.01
    done
}

# Two free loopback ports, client and peer; another process may take one
# before etcd binds it, so a failed start is tried again.
free_ports() {
    python3 -c 'import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])'
}
E=()
etcd_up() { "${E[@]}" endpoint health >/dev/null 2>&1; }
for attempt in 1 2 3; do
    read -r CPORT PPORT < <(free_ports)
    rm -rf "$T/etcd.data"
    etcd --name bench --data-dir "$T/etcd.data" --logger zap \
        --listen-client-urls "http://127.0.0.1:$CPORT" --advertise-client-urls "http://127.0.0.1:$CPORT" \
        --listen-peer-urls "http://127.0.0.1:$PPORT" --initial-advertise-peer-urls "http://127.0.0.1:$PPORT" \
        --initial-cluster "bench=http://127.0.0.1:$PPORT" >"$T/etcd.log" 2>&1 &
    ETCD_PID=$!
    E=(etcdctl --endpoints="127.0.0.1:$CPORT")
    for _ in $(seq 100); do
        etcd_up && break
        kill -0 "$ETCD_PID" 2>/dev/null || break
        sleep 0.1
    done
    etcd_up && break
    kill -TERM "$ETCD_PID" 2>/dev/null || true
    wait "$ETCD_PID" 2>/dev/null || true
    ETCD_PID=
    [ "$attempt" -lt 3 ] || { say "error: etcd did not start: $(tail -1 "$T/etcd.log")"; exit 1; }
done

echo "etcd $(etcd --version | sed -n 's/^etcd Version: //p'), one node on TCP loopback, its defaults"
echo "(every write fsynced; heartbeat 100 ms, election timeout 1000 ms); PostgreSQL over"
echo "$([ "$DB_TCP" = "$DB" ] && echo "its Unix socket (no TCP in this harness)" || echo "TCP loopback too")."
echo ""
echo "\`etcdctl lock NAME -- CMD\` opens a session (a lease of \`--ttl\` seconds, 10 by default,"
echo "which the client keeps alive every third of it), puts a key under NAME/ on that lease, and"
echo "waits until every older key under NAME/ is gone: it always waits, it has no try-lock"
echo "(uncontended it returns at once, as here). Then it runs CMD (ETCD_LOCK_KEY and"
echo "ETCD_LOCK_REV in its environment), deletes its key and exits without revoking the"
echo "lease, which lingers until its TTL ends."
echo ""

echo "### Lock + command + release, \`true\`, uncontended"
echo ""
echo "Interleaved run by run (\`bench_pairs\`), whole processes; ms."
echo ""
echo "| B ÷ A, pairs | A: median (min–max) ms | B: median (min–max) ms | B ÷ A, medians | B ÷ A, pairs: median (p10–p90) |"
echo "|---|---:|---:|---:|---:|"
say "etcd: lock + command + release"
# bench_pairs ends A at its first "--": etcdctl's command goes without one
"$BUILD/bench/bench_pairs" "$PAIRS" "$WARMUP" "etcdctl lock K true" "pglock run --try K -- true, same transport" \
    -- "${E[@]}" lock bench-k true \
    -- "$PGLOCK" run -d "$DB_TCP" --try 777101 -- true
# etcd's floor: the same Go client starting, dialling and making one write
"$BUILD/bench/bench_pairs" "$PAIRS" "$WARMUP" "etcdctl put k v (etcd's floor)" "etcdctl lock K true" \
    -- "${E[@]}" put bench-floor v \
    -- "${E[@]}" lock bench-k true
echo ""

# one_takeover KIND NAME TTL: ms from SIGKILL of a holder to its waiter's
# command starting, and whether the killed holder's command was still
# running at that moment ("yes"/"no"), on one line.
holder_pid() { [ -s "$T/h.pid" ]; }
pg_waiting() {
    [ "$(psql -X -q -A -t "$DB" -c "select count(*) from pg_locks
         where locktype = 'advisory' and not granted and objid = $1")" -ge 1 ]
}
etcd_waiting() { [ "$("${E[@]}" get --prefix "$1/" --keys-only | grep -c .)" -ge 2 ]; }
one_takeover() {
    local kind=$1 name=$2 ttl=$3 holder waiter t0 hpid
    rm -f "$T/h.pid" "$T/w.start" "$T/w.alive"
    local job_h="echo \$\$ > $T/h.pid; exec sleep 1000"
    local job_w="date +%s%N > $T/w.start; if kill -0 \"\$(cat $T/h.pid)\" 2>/dev/null; then echo yes; else echo no; fi > $T/w.alive"
    if [ "$kind" = pglock ]; then
        "$PGLOCK" run -q -d "$DB_TCP" "$name" -- sh -c "$job_h" &
        holder=$!
        until_ok 20 holder_pid
        "$PGLOCK" run -q -d "$DB_TCP" --wait=60s "$name" -- sh -c "$job_w" &
        waiter=$!
        until_ok 20 pg_waiting "$name"
    else
        "${E[@]}" lock --ttl "$ttl" "$name" -- sh -c "$job_h" >/dev/null &
        holder=$!
        until_ok 20 holder_pid
        "${E[@]}" lock --ttl "$ttl" "$name" -- sh -c "$job_w" >/dev/null &
        waiter=$!
        until_ok 20 etcd_waiting "$name"
    fi
    hpid=$(cat "$T/h.pid")
    echo "$hpid" >>"$T/holders"
    t0=${EPOCHREALTIME/./}
    # (bash reports a job killed by a signal on stderr: not a failure here)
    {
        kill -KILL "$holder"
        wait "$waiter"
        wait "$holder" || true
    } 2>/dev/null
    # a command left running by its killed holder is ended here, not left
    kill -KILL "$hpid" 2>/dev/null || true
    echo "$(($(cat "$T/w.start") / 1000 - t0)) $(cat "$T/w.alive")"
}

# takeover_row LABEL RUNS KIND TTL: RUNS takeovers, one table row.
takeover_row() {
    local label=$1 runs=$2 kind=$3 ttl=$4 i name
    for ((i = 0; i < runs; i++)); do
        if [ "$kind" = pglock ]; then name=$((777200 + i)); else name=bench-take-$ttl-$i; fi
        one_takeover "$kind" "$name" "$ttl"
    done | sort -n | awk -v label="$label" '
        {t[NR] = $1 / 1000; if ($2 == "yes") alive++}
        END {printf "| %s | %d | %.0f (%.0f–%.0f) | %d of %d |\n", label, NR,
                    (t[int((NR + 1) / 2)] + t[int(NR / 2) + 1]) / 2, t[1], t[NR], alive, NR}'
}

echo "### Takeover: a holder SIGKILLed, a waiter queued"
echo ""
echo "From \`kill -KILL\` of the holder's process (\`pglock run K\`, \`etcdctl lock NAME\`; its"
echo "command a \`sleep\`) to the waiter's command starting; ms. The last column: the killed holder's"
echo "command still running when the waiter's started (two holders at once). etcd frees the lock"
echo "when the session's lease expires, not when the client's connection closes; etcdctl's"
echo "\`--ttl\` takes whole seconds, and the server raises a lease below its minimum (1.5 × the"
echo "election timeout, rounded up: 2 s at the default) to that minimum."
echo ""
echo "| holder, SIGKILLed | runs | waiter's command started after: median (min–max) ms | killed holder's command still running then |"
echo "|---|---:|---:|---:|"
say "etcd: takeover"
takeover_row "pglock run K, lease 20 s (the default); waiter pglock run --wait=60s K" "$TAKEOVERS" pglock 0
takeover_row "etcdctl lock --ttl 1 (the flag's minimum)" "$TAKEOVERS" etcd 1
if [ "$DEFAULT_TAKEOVERS" -gt 0 ]; then
    takeover_row "etcdctl lock (--ttl 10, the default)" "$DEFAULT_TAKEOVERS" etcd 10
else
    echo "| etcdctl lock (--ttl 10, the default): left out of this run (10 s a run; the smoke run leaves it out) | 0 | – | – |"
fi
echo ""
