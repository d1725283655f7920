#!/usr/bin/env bash
# tests/versions/run.sh BUILD [MAJOR...] — the version matrix: the C tests
# and the CLI tests of BUILD against each PostgreSQL major (default 13 14
# 16 17 18; 15 is what `make check` runs), servers fetched by fetch.sh.
#
# From 14 up the matrix is the full harness: every test must pass and a
# skip is a failure.  13 has no idle_session_timeout, so tests of session
# leases skip there (each says why); its own refusals and what it allows
# are tested by tests/cli/old_server.bats.  Logs: BUILD/test-logs-pgMAJOR/.
# TESTS=REGEX narrows every version's run as in tests/run.sh.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -ge 1 ] || { echo "usage: tests/versions/run.sh BUILD [MAJOR...]" >&2; exit 64; }
build=$(cd "$1" && pwd) || exit 64
shift
majors=("$@")
[ ${#majors[@]} -gt 0 ] || majors=(13 14 16 17 18)

bins=$("$SRC/tests/versions/fetch.sh" "${majors[@]}") || exit 1

# Whatever harness the caller runs in is not ours to test against.
unset PGLOCK_TEST_PRIMARY PGLOCK_TEST_SERVER PGLOCK_TEST_DIR

rc=0
summary=()
while read -r major bin; do
    echo "==== PostgreSQL $major ($bin)"
    t0=$SECONDS
    out=$(PGLOCK_PGBIN=$bin "$SRC/tests/run.sh" "$build" 2>&1 | tee /dev/stderr | tail -1)
    secs=$((SECONDS - t0))
    logs=$build/test-logs-pg$major
    rm -rf "$logs"
    mv "$build/test-logs" "$logs" 2>/dev/null || true
    read -r p _ f _ s _ <<<"$out"
    verdict=ok
    if ! [[ $p =~ ^[0-9]+$ && $f =~ ^[0-9]+$ && $s =~ ^[0-9]+$ ]]; then
        verdict="FAIL (no result line)"
    elif [ "$f" -gt 0 ]; then
        verdict=FAIL
    elif [ "$major" -ge 14 ] && [ "$s" -gt 0 ]; then
        verdict="FAIL (skips count as failures from 14 up)"
    fi
    [ "$verdict" = ok ] || rc=1
    summary+=("$(printf 'PostgreSQL %-3s %4s passed %3s failed %3s skipped %5ss  %s' \
        "$major" "$p" "$f" "$s" "$secs" "$verdict")")
done <<<"$bins"

echo
echo "==== version matrix (logs in $build/test-logs-pgMAJOR/)"
printf '%s\n' "${summary[@]}"
exit "$rc"
