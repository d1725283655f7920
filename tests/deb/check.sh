#!/usr/bin/env bash
# tests/deb/check.sh BUILD OUT — `make check-deb`: the packages that
# `make deb` put in OUT, installed with apt-get, used against a throwaway
# server (tests/harness/harness.sh, which takes its proxy from BUILD) and
# purged: tests/deb/deb.bats.  BUILD is also installed from source into a
# temporary prefix, never onto the machine's /usr/local.
#
# It needs root: it installs and purges packages.  Outside CI, without
# root, it is skipped with a message; under CI=true (as .ci/run sets) a
# skip is a failure, as everywhere in the full harness (tests/run.sh).
# It also refuses to run where a pglock package is installed already,
# which the test would purge.  Whatever this machine has under /usr/local
# must come out of the test unchanged: it is compared before and after.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: tests/deb/check.sh BUILD OUT" >&2; exit 64; }
build=$(cd "$1" && pwd)
debs=$(cd "$2" && pwd)

# not_here REASON: a skip, or a failure under CI.
not_here() {
    if [ "${CI:-}" = true ]; then
        echo "deb: error: $1 (under CI a skip is a failure)" >&2
        exit 1
    fi
    echo "deb: skipped: $1"
    exit 0
}

[ "$(id -u)" = 0 ] || not_here "the package test needs root (apt-get install and purge); CI runs it as root"
for deb in "$debs"/*.deb; do
    p=$(dpkg-deb -f "$deb" Package)
    if dpkg -s "$p" >/dev/null 2>&1; then
        not_here "package $p is installed on this machine, and the test would purge it"
    fi
done

# /usr/local's pglock files (a source install), with their checksums.
local_state() {
    find /usr/local -name '*pglock*' -print0 2>/dev/null | sort -z |
        xargs -0 -r sh -c 'for f; do if [ -f "$f" ]; then sha256sum "$f"; else echo "$f"; fi; done' sh
}
before=$(local_state)

start=$SECONDS
rc=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT
PGLOCK_DEB_DIR=$debs PGLOCK_BUILD=$build \
    "$SRC/tests/harness/harness.sh" run --build "$build" -- bats --tap "$SRC/tests/deb/deb.bats" \
    </dev/null 2>&1 | tee "$log" || rc=$?
if [ "${CI:-}" = true ] && grep -qiE '^ok [0-9]+.*# skip' "$log"; then
    echo "deb: error: a test was skipped (under CI a skip is a failure)" >&2
    rc=1
fi

if [ "$(local_state)" != "$before" ]; then
    echo "deb: error: /usr/local's pglock files changed during the test" >&2
    diff <(echo "$before") <(local_state) >&2 || true
    rc=1
fi
echo "deb: the package test took $((SECONDS - start)) s"
exit "$rc"
