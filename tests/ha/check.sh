#!/usr/bin/env bash
# make check-ha: tests/ha/*.bats against tests/harness/ha.sh's cluster,
# once asynchronous and once with synchronous_mode, then a check that the
# cluster's stop left nothing behind (no process, no namespace, no dir).
#   tests/ha/check.sh [BUILD]        (root: the cluster needs ip netns)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(readlink -f "${1:-$SRC/build}")
[ -x "$BUILD/pglock" ] || { echo "check-ha: no $BUILD/pglock (run make)" >&2; exit 1; }
logs=$BUILD/test-logs/ha
mkdir -p "$logs"

# leftovers DIR: what a stopped cluster in DIR left: processes whose
# command line names DIR, its namespaces, DIR itself.
leftovers() {
    local dir=$1 f
    for f in /proc/[0-9]*/cmdline; do
        if { tr "\\0" " " <"$f"; } 2>/dev/null | grep -qF "$dir/"; then
            f=${f#/proc/}
            echo "process ${f%/cmdline}"
        fi
    done
    ip netns list | grep -F "pglock-ha-${dir##*.}-" | sed 's/^/namespace /' || true
    [ ! -e "$dir" ] || echo "directory $dir"
}

rc=0
for mode in async sync; do
    flag=() filter=()
    # The sync variant skips the tests tagged async-only (check-ha's time).
    [ "$mode" = async ] || { flag=(--sync); filter=(--filter-tags '!async-only'); }
    start=$SECONDS
    st=0
    "$SRC/tests/harness/ha.sh" run "${flag[@]}" -- env PGLOCK_BIN="$BUILD/pglock" \
        PGLOCK_BUILD="$BUILD" bats --tap "${filter[@]}" "$SRC/tests/ha" 2>"$logs/$mode.err" || st=$?
    dir=$(sed -n 's/^ha: cluster up in [0-9]* s (\([^;]*\);.*/\1/p' "$logs/$mode.err")
    echo "check-ha: $mode: exit $st in $((SECONDS - start)) s"
    [ "$st" = 0 ] || { tail -n 30 "$logs/$mode.err"; rc=1; }
    if [ -n "$dir" ]; then
        left=$(leftovers "$dir")
        if [ -n "$left" ]; then
            echo "check-ha: not ok: the cluster's stop left behind:"; echo "$left"; rc=1
        else
            echo "check-ha: ok: the cluster's stop left nothing behind ($dir)"
        fi
    fi
done
exit "$rc"
