#!/usr/bin/env bash
# record_cost.sh — what --record costs `pglock run --try`: round trips and
# protocol messages through the harness's counting proxy, and the median
# wall time of N runs with and without it.
#
#   bench/record_cost.sh BUILD_DIR [N]
#
# Uses the running harness when PGLOCK_TEST_PROXY is set, else starts one.
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: bench/record_cost.sh BUILD_DIR [N]}")
N=${2:-30}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGLOCK=$BUILD/pglock
if [ -z "${PGLOCK_TEST_PROXY:-}" ]; then
    env_file=$("$ROOT/tests/harness/harness.sh" start --build "$BUILD")
    # shellcheck disable=SC1090
    . "$env_file"
    trap '"$ROOT/tests/harness/harness.sh" stop "$PGLOCK_TEST_DIR"' EXIT
fi
proxy() { "$PGLOCK_TEST_PROXY_BIN" --control "$PGLOCK_TEST_PROXY_CTL" --send "$1"; }
"$PGLOCK" init -q -d "$PGLOCK_TEST_PRIMARY"
key="record-cost-$$"

# median_ms ARGS...: the median wall time of N `pglock run ARGS -n KEY -- true`.
median_ms() {
    local i t0 t1
    for ((i = 0; i < N; i++)); do
        t0=$(date +%s%N)
        "$PGLOCK" run "$@" -n -d "$PGLOCK_TEST_PRIMARY" "$key" -- true
        t1=$(date +%s%N)
        echo $(((t1 - t0) / 1000))
    done | sort -n | awk '{a[NR] = $1} END {printf "%.1f", a[int((NR + 1) / 2)] / 1000}'
}

echo "| run --try | round trips / messages (proxy) | median wall time, ms (N=$N) |"
echo "|---|---|---|"
for mode in plain record; do
    args=()
    [ "$mode" = plain ] || args=(--record)
    proxy reset >/dev/null
    "$PGLOCK" run "${args[@]}" -n -d "$PGLOCK_TEST_PROXY" "$key" -- true
    counts=$(proxy count)
    echo "| $mode | $counts | $(median_ms "${args[@]}") |"
done
