#!/usr/bin/env bash
# tests/run.sh BUILD [BUILD...] — run every test of each build directory
# against the throwaway servers of tests/harness/harness.sh.
#
# For each BUILD: every BUILD/tests/test_* cmocka binary (TAP output), then
# every tests/cli/*.bats with PGLOCK_BIN=BUILD/pglock, then (normal builds
# only) a 60 s run of tests/chaos.  Full output goes to
# BUILD/test-logs/SUITE.log, the servers' logs to BUILD/test-logs/servers/;
# failures are printed.  The last line is
# "N passed, N failed, N skipped"; the exit status is nonzero if anything
# failed or crashed.
#
# Under the full harness (make check, CI, a version matrix) a skipped test
# is a failure, its reason printed: every server, tool and variable a test
# needs is there, so a skip would only hide a test that never ran.  Only
# against the user's own server (PGLOCK_TEST_SERVER), where the standby,
# pooler and proxy are missing, do skips stay skips.
#
# Sets PGLOCK_BIN and PGLOCK_BUILD for bats files, and PGLOCK_SANITIZE=1
# (with ASAN_OPTIONS, UBSAN_OPTIONS) when BUILD is an ASan+UBSan build;
# such a build skips harness.bats and bench_smoke.bats (tooling only).
#
# Environment:
#   TESTS=REGEX          run only the suites whose name matches (grep -E),
#                        e.g. TESTS=keys or TESTS='test_lease|run.bats'
#   SKIP_TESTS=REGEX     leave out the suites whose name matches
#   PGLOCK_TEST_TIMEOUT  seconds per suite (default 300)
#
# A BUILD written valgrind:BUILD runs only that build's cmocka binaries,
# under valgrind's memcheck (an error or a definite leak fails the suite):
# the bats files watch pglock's own pids and signals, which valgrind hides.
#   PGLOCK_TEST_SERVER   use this server instead of starting any (see
#                        tests/harness/README.md)
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [ $# -lt 1 ]; then
    echo "usage: tests/run.sh BUILD_DIR [BUILD_DIR...]" >&2
    exit 64
fi
for b in "$@"; do
    [ -d "${b#valgrind:}" ] || { echo "run.sh: no build directory ${b#valgrind:}" >&2; exit 64; }
done

# Start the servers once for everything, unless we already run inside a
# harness (or a developer's `harness.sh start` environment).
if [ -z "${PGLOCK_TEST_PRIMARY:-}" ]; then
    exec "$SRC/tests/harness/harness.sh" run --build "${1#valgrind:}" -- "$SRC/tests/run.sh" "$@"
fi

TIMEOUT=${PGLOCK_TEST_TIMEOUT:-300}

# psql and python3 run thousands of times (q, py, ...), and their usual
# launchers cost more than the work: Debian's psql is a Perl wrapper that
# picks a version (0.1 s a call), pyenv's python3 a shim that runs pyenv
# (0.5 s).  The tests get the very programs those launchers would run:
# the harness's psql ($PGLOCK_PGCLIENT, which it uses itself) and the
# interpreter python3 resolves to, through links put first on PATH.
direct_tools=$(mktemp -d)
trap 'rm -rf "$direct_tools"' EXIT
if [ -x "${PGLOCK_PGCLIENT:-}/psql" ]; then
    ln -s "$PGLOCK_PGCLIENT/psql" "$direct_tools/psql"
fi
if python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$python" ]; then
    ln -s "$python" "$direct_tools/python3"
fi
export PATH=$direct_tools:$PATH
skips_fail=1
[ -z "${PGLOCK_TEST_SERVER:-}" ] || skips_fail=0
passed=0 failed=0 skipped=0
failed_suites=()

# Counts one TAP log into p/f/s.  Skips: cmocka writes "not ok N # SKIP",
# bats "ok N name # skip (reason)".
count_tap() {
    local log=$1
    p=$(grep -cE '^ok [0-9]+' "$log" | head -1)
    s=$(grep -ciE '^(not )?ok [0-9]+.*# skip' "$log" | head -1)
    f=$(grep -cE '^not ok [0-9]+' "$log" | head -1)
    local okskip notokskip
    okskip=$(grep -ciE '^ok [0-9]+.*# skip' "$log" | head -1)
    notokskip=$((s - okskip))
    p=$((p - okskip))
    f=$((f - notokskip))
}

# Runs one suite: $1 = display name, $2 = log file, rest = command.
run_suite() {
    local name=$1 log=$2 rc t0 t1 note=
    shift 2
    t0=$(date +%s.%N)
    timeout -k 10 "$TIMEOUT" "$@" >"$log" 2>&1 </dev/null
    rc=$?
    t1=$(date +%s.%N)
    count_tap "$log"
    local plan
    plan=$(grep -m1 -oE '^1\.\.[0-9]+' "$log" | cut -d. -f3)
    if [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$((p + f + s))" -lt "${plan:-0}" ]; then
        f=1 note=" (only $((p + f + s - 1)) of $plan results)"
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        # Nonzero exit with no failed test: a crash, a sanitizer report at
        # exit, a timeout or a broken plan.  It counts as one failure.
        f=1
        case $rc in
        124 | 137) note=" (timed out after ${TIMEOUT}s)" ;;
        *) note=" (exit status $rc)" ;;
        esac
    fi
    local skips=
    if [ "$skips_fail" = 1 ] && [ "$s" -gt 0 ]; then
        # The skip lines and cmocka's "# skip: reason" lines say why.
        skips=$(grep -iE '# skip' "$log" | sed 's/^/         /')
        note="$note ($s skipped: a skip fails under the full harness)"
        f=$((f + s)) s=0
    fi
    passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
    local status=ok
    [ "$f" -eq 0 ] || { status=FAIL; failed_suites+=("$name|$log"); }
    printf '  %-4s %-32s %3d passed %3d failed %3d skipped %6.1fs%s\n' \
        "$status" "$name" "$p" "$f" "$s" "$(awk "BEGIN{print $t1 - $t0}")" "$note"
    [ -z "$skips" ] || printf '%s\n' "$skips"
}

# wanted NAME: whether suite NAME runs (TESTS, SKIP_TESTS).
wanted() {
    { [ -z "${TESTS:-}" ] || echo "$1" | grep -qE "$TESTS"; } &&
        { [ -z "${SKIP_TESTS:-}" ] || ! echo "$1" | grep -qE "$SKIP_TESTS"; }
}

for build in "$@"; do
    memcheck=()
    case $build in valgrind:*)
        build=${build#valgrind:}
        memcheck=(valgrind -q --error-exitcode=99 --leak-check=full
                  --errors-for-leak-kinds=definite)
    esac
    build=$(cd "$build" && pwd)
    logs=$build/test-logs${memcheck:+-valgrind}
    # A filtered run keeps the other suites' logs.
    [ -n "${TESTS:-}" ] || rm -rf "$logs"
    mkdir -p "$logs"
    if grep -q '^PGLOCK_SANITIZE:BOOL=ON' "$build/CMakeCache.txt" 2>/dev/null; then
        export ASAN_OPTIONS=detect_leaks=1
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        # Tests that compile programs against this build must use the same
        # sanitizers (an ASan library needs the ASan runtime loaded first).
        export PGLOCK_SANITIZE=1
    else
        unset ASAN_OPTIONS UBSAN_OPTIONS PGLOCK_SANITIZE
    fi
    echo "== $build${memcheck:+ (C tests under valgrind)}"
    for bin in "$build"/tests/test_*; do
        [ -x "$bin" ] && [ -f "$bin" ] || continue
        name=$(basename "$bin")
        wanted "$name" || continue
        CMOCKA_MESSAGE_OUTPUT=TAP run_suite "$name" "$logs/$name.log" \
            "${memcheck[@]}" "$bin"
    done
    [ ${#memcheck[@]} -eq 0 ] || continue
    for bats_file in "$SRC"/tests/cli/*.bats; do
        [ -f "$bats_file" ] || continue
        name=$(basename "$bats_file")
        wanted "$name" || continue
        # The harness's own suite and the bench's smoke run test our shell
        # tooling, where the sanitizers have nothing to watch: once, on the
        # normal build, is enough (they take about 80 s).
        if [ -n "${PGLOCK_SANITIZE:-}" ] && [[ $name =~ ^(harness|bench_smoke)\.bats$ ]]; then
            continue
        fi
        PGLOCK_BIN=$build/pglock PGLOCK_BUILD=$build \
            run_suite "$name" "$logs/$name.log" bats --tap "$bats_file"
    done
    # 60 s of random faults (tests/chaos), on the normal build only: the
    # sanitizer builds are too slow for its timing bounds.
    if [ -z "${PGLOCK_SANITIZE:-}" ] && wanted chaos; then
        run_suite chaos "$logs/chaos.log" "$SRC/tests/chaos/chaos.sh" --tap --duration 60s "$build"
    fi
done

# The servers' logs, for post-mortems (the harness removes its directory).
if [ -n "${PGLOCK_TEST_DIR:-}" ] && [ -d "$PGLOCK_TEST_DIR" ]; then
    for build in "$@"; do
        mkdir -p "${build#valgrind:}/test-logs/servers"
        cp "$PGLOCK_TEST_DIR"/*.log "${build#valgrind:}/test-logs/servers/" 2>/dev/null || true
    done
fi

for entry in "${failed_suites[@]}"; do
    echo
    echo "---- ${entry%%|*} (${entry#*|})"
    tail -n 80 "${entry#*|}"
done
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
