#!/usr/bin/env bash
# tests/versions/run.sh BUILD [MAJOR...] — the version matrix: the C tests
# and the CLI tests of BUILD against each PostgreSQL major (default 13 14
# 16 17 18; 15 is what `make check` runs), servers fetched by fetch.sh.
#
# Every test must pass and a skip is a failure from 14 up.  What runs depends
# on the major (tests/README.md, "What each pass runs"):
# - the newest (18): the full harness, every suite but the version-neutral
#   ones named below;
# - 14, the oldest with a session lease: the same but four suites whose
#   server side has not changed since before 14 (SKIP_ON_14 below);
# - the majors in between (16, 17; 15 is make check's): the suites of what
#   changed in them (ON_BETWEEN below).  A server behaviour that changes at
#   one major stays changed after it, so 14, 15 and 18 see both sides of
#   every change, and 16 and 17 are checked on each one they brought;
# - 13 has no idle_session_timeout, so no session lease: run and lead
#   refuse session locks there.  Only the suites of what 13 allows run
#   (xact locks and the xact hold, keys, session locks without a lease in
#   the library, tokens), with tests/cli/versions.bats, which tests the
#   refusals and what 13 allows.
# PGLOCK_TEST_FULL_MAJORS (default 18) names the majors that run in
# full.  Logs: BUILD/test-logs-pgMAJOR/.  TESTS=REGEX narrows every
# version's run as in tests/run.sh (on 13 and between, it replaces the
# list).
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
ON_13='^(test_client_open|test_connect|test_fencing_client|test_grant_race|test_harness|test_hold_xact|test_key_sql|test_lock_timeout_per_wait|test_round_trips|test_xact_lock|versions\.bats)$'

# What runs on the majors between 14 and the newest: the suites of what
# changed in 16 and 17 that pglock meets (tests/README.md): the
# per-version answers (versions.bats); the opening query, whose settings
# depend on the version (test_client_open, test_connect); role
# membership, which 16 reworked and pg_has_role() reads (history_roles,
# doctor, terminate); the transaction lifetime, whose opening query sets
# transaction_timeout from 17 (run_mode, test_hold_xact, test_xact_lock);
# application_name as status reads it, shown otherwise from 16 (status,
# status_answers); the refusal of the last connection slots, which pglock
# reads by its words, worded otherwise from 16 (run_limits).
ON_BETWEEN='^(test_client_open|test_connect|test_hold_xact|test_xact_lock|versions\.bats|history_roles\.bats|doctor\.bats|terminate\.bats|run_mode\.bats|status\.bats|status_answers\.bats|run_limits\.bats)$'
# On 14, the oldest major in the matrix with a session lease, four suites
# more are left out: what they meet on the server has not changed since
# before 14, so 15 (make check) and 18 see it as 14 would.  slots: the
# advisory-lock functions and pg_locks; history: writes to pglock's own
# table and its run locks (its roles and GRANTs are history_roles', which
# runs); failover, failover_tokens: a standby's refusals and pg_promote()
# (there since 12).  What 14 is there for stays: the session lease's first
# version (idle_session_timeout, client_connection_check_interval) and the
# older side of what changed at 15 and after.
SKIP_ON_14='^(slots\.bats|history\.bats|failover\.bats|failover_tokens\.bats)$'
full_majors=" ${PGLOCK_TEST_FULL_MAJORS:-18} "

# major_kind MAJOR: what runs on MAJOR, as the order the runs start in:
# 1 full, 2 all but SKIP_ON_14 (14), 3 the suites between, 4 those of 13.
major_kind() {
    if [ "$1" -lt 14 ]; then echo 4
    elif [[ $full_majors == *" $1 "* ]]; then echo 1
    elif [ "$1" = 14 ]; then echo 2
    else echo 3; fi
}

# Left out on every major: the suites that cannot depend on the server's
# version (tests/README.md): the unit tests, which start no server; the
# suites of pglock's client side (options, messages, libpq's conninfo
# errors, a cut network's and a full pool's bounds; signals, process
# groups, setuid and pauses, which are the job's and the kernel's; the
# order several keys are taken in; -v's lines; libpq's environment; the
# bounds of a commit stalled by synchronous_standby_names, which every
# major since 9.6 stalls alike) and of our tooling and packaging (the
# harness and the bench's smoke run, the installed library, the
# deployment examples, the docs' examples); the 60 s
# chaos run, which `make check` runs on 15 and `make chaos` at length; and
# the suites whose every statement to the server a suite of the matrix
# sends too (key, run_bad_input, lead_bad_input, status_round_trips:
# tests/README.md says which suite covers each).
VERSION_NEUTRAL='^(test_abi_layout|test_duration|test_key|test_registry|test_run_lease|test_settings|test_status_decode|test_versions|chaos|harness\.bats|library_install\.bats|examples\.bats|examples_docs\.bats|cli_house_format\.bats|cli_messages\.bats|cli_password_never_printed\.bats|cli_connect_bounded\.bats|run_signals\.bats|run_group_signals\.bats|run_supervision\.bats|run_several_keys\.bats|run_verbose\.bats|run_libpq_env\.bats|run_bounded_steps\.bats|key\.bats|run_bad_input\.bats|lead_bad_input\.bats|status_round_trips\.bats|lint_checks\.bats)$'

# Three servers' runs at a time (PGLOCK_TEST_VERSIONS_AT_ONCE), each with
# two lanes (PGLOCK_TEST_JOBS), the full runs first, then 14's: they take
# most of the time, and the short runs of the other majors follow one
# another beside them.  Each writes its own log, printed whole when it ends.
at_once=${PGLOCK_TEST_VERSIONS_AT_ONCE:-3}
export PGLOCK_TEST_JOBS=${PGLOCK_TEST_JOBS:-2}

# run_major MAJOR BIN: one server's run, into versions-pgMAJOR.log; its
# time into versions-pgMAJOR.secs.
# In the background itself, so that a signal to this run ends it at once
# (a background job cannot trap SIGINT: it starts with SIGINT ignored, so
# every stop comes as SIGTERM, which run.sh passes on to its lanes).
run_major() {
    local major=$1 bin=$2 t0=$SECONDS tests=${TESTS:-} child rc=0
    local skip=${SKIP_TESTS:-$VERSION_NEUTRAL}
    case $(major_kind "$major") in
    2) skip=${SKIP_TESTS:-$VERSION_NEUTRAL|$SKIP_ON_14} ;;
    3) tests=${TESTS:-$ON_BETWEEN} ;;
    4) tests=${TESTS:-$ON_13} ;;
    esac
    rm -rf "$build/test-logs-pg$major"
    TESTS=$tests SKIP_TESTS=$skip PGLOCK_PGBIN=$bin \
        PGLOCK_TEST_LOGS=$build/test-logs-pg$major \
        "$SRC/tests/run.sh" "$build" </dev/null >"$build/versions-pg$major.log" 2>&1 &
    child=$!
    trap 'kill -TERM "$child" 2>/dev/null; wait "$child"; exit 143' TERM
    wait "$child" || rc=$?
    echo $((SECONDS - t0)) >"$build/versions-pg$major.secs"
    echo "$rc" >"$build/versions-pg$major.rc"
}

majors_run=()
major_pids=()
trap 'kill -TERM "${major_pids[@]}" 2>/dev/null; wait; exit 130' INT
trap 'kill -TERM "${major_pids[@]}" 2>/dev/null; wait; exit 143' TERM
running=0
ordered=$(while read -r major bin; do echo "$(major_kind "$major") $major $bin"; done <<<"$bins" |
    sort -s -n -k1,1 | cut -d' ' -f2-)
while read -r major bin; do
    echo "==== PostgreSQL $major ($bin): started"
    run_major "$major" "$bin" &
    major_pids+=($!)
    majors_run+=("$major")
    running=$((running + 1))
    if [ "$running" -ge "$at_once" ]; then wait -n; running=$((running - 1)); fi
done <<<"$ordered"
wait
mapfile -t majors_run < <(printf '%s\n' "${majors_run[@]}" | sort -n)

rc=0
summary=()
for major in "${majors_run[@]}"; do
    echo
    echo "==== PostgreSQL $major"
    cat "$build/versions-pg$major.log"
    out=$(tail -1 "$build/versions-pg$major.log")
    secs=$(cat "$build/versions-pg$major.secs" 2>/dev/null || echo '?')
    read -r p _ f _ s _ <<<"$out"
    verdict=ok
    if ! [[ $p =~ ^[0-9]+$ && $f =~ ^[0-9]+$ && $s =~ ^[0-9]+$ ]]; then
        verdict="FAIL (no result line)"
    elif [ "$f" -gt 0 ]; then
        verdict=FAIL
    elif [ "$major" -ge 14 ] && [ "$s" -gt 0 ]; then
        verdict="FAIL (skips count as failures from 14 up)"
    elif [ "$(cat "$build/versions-pg$major.rc" 2>/dev/null)" != 0 ]; then
        verdict="FAIL (run.sh exited $(cat "$build/versions-pg$major.rc" 2>/dev/null))"
    fi
    [ "$verdict" = ok ] || rc=1
    summary+=("$(printf 'PostgreSQL %-3s %4s passed %3s failed %3s skipped %5ss  %s' \
        "$major" "$p" "$f" "$s" "$secs" "$verdict")")
done

# The failed tests once more, last: a CI page that shows only the end of
# the output still says what failed and why.
for major in "${majors_run[@]}"; do
    for log in "$build/test-logs-pg$major"/*.log "$build/test-logs-pg$major"-valgrind/*.log; do
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
