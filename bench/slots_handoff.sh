#!/usr/bin/env bash
# slots_handoff.sh — the handoff of `pglock run --slots=N` against a single
# lock's: the time from a holder's job ending to a waiting job starting,
# through whole pglock processes (the holder's release and exit, the
# server's wake-up, the waiter's grant, its watchers cancelled, its job
# started).  p50 and p99 of R handoffs per row (p99 of fewer than 100 is
# close to the maximum: said in the table).
#
#   bench/slots_handoff.sh BUILD_DIR [R]
#
# Uses the running harness when PGLOCK_TEST_PRIMARY is set, else starts one.
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: bench/slots_handoff.sh BUILD_DIR [R]}")
R=${2:-20}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGLOCK=$BUILD/pglock
OWN_HARNESS=
if [ -z "${PGLOCK_TEST_PRIMARY:-}" ]; then
    env_file=$("$ROOT/tests/harness/harness.sh" start --build "$BUILD")
    # shellcheck disable=SC1090
    . "$env_file"
    OWN_HARNESS=$PGLOCK_TEST_DIR
fi
DB=$PGLOCK_TEST_PRIMARY
T=$(mktemp -d "${TMPDIR:-/tmp}/pglock-handoff.XXXXXX")
cleanup() {
    rm -rf "$T"
    [ -z "$OWN_HARNESS" ] || "$ROOT/tests/harness/harness.sh" stop "$OWN_HARNESS"
}
trap cleanup EXIT
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$DB" -c "$1"; }

# until SECS CMD...: polls CMD every 10 ms, at most SECS seconds.
until_ok() {
    local end=$(($(date +%s) + $1))
    shift
    until "$@"; do
        [ "$(date +%s)" -lt "$end" ] || { echo "bench: timed out: $*" >&2; return 1; }
        sleep 0.01
    done
}
started() { [ "$(find "$T" -maxdepth 1 -name 'h*.started' | wc -l)" -ge "$1" ]; }
# waiting N: at least N advisory requests not granted (the waiter's).
waiting() { [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and not granted")" -ge "$1" ]; }

# one_handoff N KEY: microseconds from holder 0's job ending to the
# waiter's job starting; N = 0 is a single lock, else --slots=N.
one_handoff() {
    local n=$1 key=$2 holders i pids=()
    local args=()
    holders=1
    if [ "$n" -gt 0 ]; then args=(--slots="$n"); holders=$n; fi
    rm -f "$T"/h* "$T"/w*
    # each holder's job blocks on a fifo (no polling, which would load the
    # machine it measures) and stamps its end the moment it is released
    for ((i = 0; i < holders; i++)); do
        mkfifo "$T/h$i.fifo"
        "$PGLOCK" run -q -d "$DB" "${args[@]}" "$key" -c \
            "touch $T/h$i.started; read -r _ < $T/h$i.fifo; date +%s%N > $T/h$i.end" &
        pids+=($!)
    done
    until_ok 20 started "$holders"
    "$PGLOCK" run -q -d "$DB" "${args[@]}" --wait=60s "$key" -c "date +%s%N > $T/w.start" &
    local waiter=$!
    # the waiter waits on the key (single) or on every slot (its head)
    until_ok 20 waiting "$holders"
    echo >"$T/h0.fifo"
    wait "$waiter"
    for ((i = 1; i < holders; i++)); do echo >"$T/h$i.fifo"; done
    wait "${pids[@]}"
    echo $((($(cat "$T/w.start") - $(cat "$T/h0.end")) / 1000))
}

# row LABEL N: R handoffs, then p50 and p99 in ms.
row() {
    local label=$1 n=$2 i key="handoff-$$-$2"
    for ((i = 0; i < R; i++)); do one_handoff "$n" "$key"; done | sort -n |
        awk -v label="$label" '{a[NR] = $1}
            END {p50 = a[int((NR + 1) / 2)]; i99 = int(NR * 0.99 + 0.999); if (i99 < 1) i99 = 1
                 printf "| %s | %d | %.1f | %.1f |\n", label, NR, p50 / 1000, a[i99] / 1000}'
}

echo "| handoff | runs | p50, ms | p99, ms |"
echo "|---|---|---|---|"
row "single lock (run --wait K)" 0
row "--slots=1" 1
row "--slots=4 (all held, one freed)" 4
