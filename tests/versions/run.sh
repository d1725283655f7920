#!/usr/bin/env bash
# tests/versions/run.sh BUILD [MAJOR...] — the version matrix: the C tests
# and the CLI tests of BUILD against each PostgreSQL major (default 13 14
# 16 17 18; 15 is what `make check` runs), servers fetched by fetch.sh.
#
# From 14 up the matrix is the full harness: every suite runs (but the
# version-neutral ones named below), every test
# must pass and a skip is a failure.  13 has no idle_session_timeout, so no
# session lease: run and lead refuse session locks there.  On 13 only the
# suites below run (those of what 13 allows: xact locks and the xact hold,
# keys, session locks without a lease in the library, tokens), with
# tests/cli/versions.bats, which tests the refusals and what 13
# allows.  Logs: BUILD/test-logs-pgMAJOR/.  TESTS=REGEX narrows every
# version's run as in tests/run.sh (on 13 it replaces the list).
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

# What runs on 13: the suites that do not need a session lease.  Left out:
# test_heartbeat, test_session_lock, test_wait (leases on session locks)
# and the CLI suites of run and lead in session mode.
ON_13='^(test_client_open|test_connect|test_fencing_client|test_grant_race|test_harness|test_hold_xact|test_key_sql|test_lock_timeout_per_wait|test_round_trips|test_xact_lock|key\.bats|versions\.bats)$'

# Left out on every major: the suites that cannot depend on the server's
# version (tests/README.md): the unit tests, which start no server; the
# suites of pglock's client side (options, messages, libpq's conninfo
# errors, a cut network's and a full pool's bounds) and of our tooling and
# packaging (the harness and the bench's smoke run, the installed
# library); and the 60 s chaos run, which `make check` runs on 15 and
# `make chaos` at length.
VERSION_NEUTRAL='^(test_abi_layout|test_duration|test_key|test_registry|test_run_lease|test_status_decode|test_versions|chaos|harness\.bats|library_install\.bats|cli_house_format\.bats|cli_messages\.bats|cli_password_never_printed\.bats|cli_connect_bounded\.bats)$'

rc=0
summary=()
ran=()
while read -r major bin; do
    echo "==== PostgreSQL $major ($bin)"
    t0=$SECONDS
    tests=${TESTS:-}
    [ "$major" -ge 14 ] || tests=${TESTS:-$ON_13}
    # stdin from /dev/null: the harness hands its own stdin to the tests,
    # and ours is the list of versions still to run.
    TESTS=$tests SKIP_TESTS=${SKIP_TESTS:-$VERSION_NEUTRAL} PGLOCK_PGBIN=$bin \
        "$SRC/tests/run.sh" "$build" </dev/null 2>&1 |
        tee "$build/versions-pg$major.log"
    out=$(tail -1 "$build/versions-pg$major.log")
    secs=$((SECONDS - t0))
    logs=$build/test-logs-pg$major
    rm -rf "$logs"
    ran+=("$logs")
    if [ -n "$tests" ]; then cp -r "$build/test-logs" "$logs"; else mv "$build/test-logs" "$logs"; fi
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

# The failed tests once more, last: a CI page that shows only the end of
# the output still says what failed and why.
for logs in "${ran[@]}"; do
    for log in "$logs"/*.log; do
        if ! [ -f "$log" ] || ! grep -q '^not ok' "$log"; then continue; fi
        echo
        echo "---- ${log#"$build"/test-logs-}"
        grep -A 25 '^not ok' "$log" | head -n 60
    done
done

echo
echo "==== version matrix (logs in $build/test-logs-pgMAJOR/)"
printf '%s\n' "${summary[@]}"
exit "$rc"
