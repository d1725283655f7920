#!/usr/bin/env bash
# tests/run.sh BUILD [BUILD...] — run every test of each build directory
# against the throwaway servers of tests/harness/harness.sh, several suites
# at a time (tests/README.md).
#
# The suites of every BUILD form one queue: every BUILD/tests/test_*
# cmocka binary (TAP output), every tests/cli/*.bats with
# PGLOCK_BIN=BUILD/pglock, and (normal builds only) a 60 s run of
# tests/chaos.  Lanes take suites from the queue, the longest first (by
# tests/suite-times), and run them one at a time; each lane runs in a
# harness of its own, so suites that restart, stop or reconfigure a server
# never meet another suite.  Full output goes to BUILD/test-logs/SUITE.log,
# the servers' logs to BUILD/test-logs/servers/LANE/.  A line per suite is
# printed as it ends; then each group's time, the slowest suites, the
# failed tests' reports once more, and last
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
# (with ASAN_OPTIONS, UBSAN_OPTIONS) when BUILD is an ASan+UBSan build.
# A BUILD written valgrind:BUILD runs only that build's C tests, under
# valgrind's memcheck (an error or a definite leak fails the suite);
# c:BUILD runs only its C tests, cli:BUILD only its CLI suites (make
# check runs the ASan build's C tests, CI its CLI suites: make check-asan);
# tls:BUILD the suites of the lock connection (TLS_SUITES) once more, each
# in a harness of its own started with --tls, so that every lock
# connection is TCP over verified TLS.  What
# each pass runs, and why, is in tests/README.md.
#
# Environment:
#   TESTS=REGEX          run only the suites whose name matches (grep -E),
#                        e.g. TESTS=keys or TESTS='test_lease|run.bats'
#   SKIP_TESTS=REGEX     leave out the suites whose name matches
#   PGLOCK_TEST_JOBS     lanes, each a harness of its own (default 4; 1
#                        inside a running harness or with PGLOCK_TEST_SERVER)
#   PGLOCK_TEST_TIMEOUT  seconds per suite (default 300)
#   PGLOCK_TEST_LOGS     the logs' directory instead of BUILD/test-logs
#                        (one BUILD only; the version matrix runs several
#                        servers' runs of one build at once)
#   PGLOCK_TEST_SERVER   use this server instead of starting any (see
#                        tests/harness/README.md)
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TIMEOUT=${PGLOCK_TEST_TIMEOUT:-300}

# ------------------------------------------------------------ the suites

# The ASan+UBSan pass leaves out the CLI suites that run no line of
# pglock that the pass does not run already (tests/README.md, "What each
# pass runs"): our tooling and packaging (the harness, make lint's
# checkers, the bench's smoke run, the installed library's files), and the
# suites whose every line of src/ another suite or a C test runs too, by
# gcov.
ASAN_SKIP='^(harness|library_install|examples|examples_docs|lint_checks|lead_bad_input|run_bad_input|run_group_signals|failover_tokens|run_hostile_settings|run_key_forms|run_round_trips|status_round_trips|run_verbose)\.bats$'

# The TLS pass: the suites of the lock connection (heartbeats, the managed
# hold, waits and cancels, leases, the partition, release, answers that
# come in several TLS records) and tls.bats, which only that pass runs.
TLS_SUITES='^(test_answer_in_pieces|test_heartbeat|test_hold|test_hold_xact|test_partition|test_session_lock|test_xact_lock|test_wait|test_run_lease|run|run_cancel|run_lease|lead|partition|tls)(\.bats)?$'

# is_asan BUILD: whether BUILD was configured with PGLOCK_SANITIZE.
is_asan() { grep -q '^PGLOCK_SANITIZE:BOOL=ON' "$1/CMakeCache.txt" 2>/dev/null; }

# The group a suite belongs to, for the summary: a bats file's name up to
# its first '_' or '.', a C test's folder (unit or live).
group_of() {
    local kind=$1 name=$2
    case $kind in
    chaos) echo chaos ;;
    bats) name=${name%.bats}; echo "${name%%_*}" ;;
    *) if [ -f "$SRC/tests/unit/$name.c" ]; then echo unit; else echo library; fi ;;
    esac
}

# wanted NAME: whether suite NAME runs (TESTS, SKIP_TESTS).
wanted() {
    { [ -z "${TESTS:-}" ] || echo "$1" | grep -qE "$TESTS"; } &&
        { [ -z "${SKIP_TESTS:-}" ] || ! echo "$1" | grep -qE "$SKIP_TESTS"; }
}

# The expected seconds of a suite (tests/suite-times; 5 if unknown): the
# queue starts with the longest, so that no long suite starts last.
expected_secs() {
    local secs
    secs=$(awk -v k="$1" '$1 == k { print $2; exit }' "$SRC/tests/suite-times" 2>/dev/null)
    echo "${secs:-5}"
}

# Writes the queue: one line per suite, "SECONDS<TAB>PASS<TAB>KIND<TAB>
# BUILD<TAB>PATH", longest first.  PASS is normal, asan or valgrind.
list_suites() {
    local spec kinds build pass bin name f
    for spec in "$@"; do
        kinds=all
        case $spec in
        c:*) kinds=c ;;
        cli:*) kinds=cli ;;
        tls:*) kinds=tls ;;
        esac
        build=$(cd "${spec#*:}" && pwd)
        pass=normal
        if [ "$spec" != "${spec#valgrind:}" ]; then pass=valgrind kinds=c
        elif [ "$kinds" = tls ]; then pass=tls
        elif is_asan "$build"; then pass=asan; fi
        for bin in "$build"/tests/test_*; do
            [ "$kinds" != cli ] || break
            [ -x "$bin" ] && [ -f "$bin" ] || continue
            name=$(basename "$bin")
            wanted "$name" || continue
            [ "$pass" != tls ] || [[ $name =~ $TLS_SUITES ]] || continue
            printf '%s\t%s\tc\t%s\t%s\n' "$(expected_secs "$pass:$name")" "$pass" "$build" "$bin"
        done
        [ "$kinds" != c ] || continue
        for f in "$SRC"/tests/cli/*.bats; do
            name=$(basename "$f")
            wanted "$name" || continue
            [ "$pass" != asan ] || ! [[ $name =~ $ASAN_SKIP ]] || continue
            if [ "$pass" = tls ]; then [[ $name =~ $TLS_SUITES ]] || continue
            elif [ "$name" = tls.bats ]; then continue; fi
            printf '%s\t%s\tbats\t%s\t%s\n' "$(expected_secs "$pass:$name")" "$pass" "$build" "$f"
        done
        # 60 s of random faults (tests/chaos), on the normal build only:
        # the sanitizer builds are too slow for its timing bounds.
        if [ "$pass" = normal ] && wanted chaos; then
            printf '%s\t%s\tchaos\t%s\t%s\n' "$(expected_secs normal:chaos)" "$pass" "$build" chaos
        fi
    done | sort -t "$(printf '\t')" -k1,1nr
}

# ------------------------------------------------------------ one lane

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

# Runs one suite of the queue and appends its result line to $RESULTS:
# "STATUS<TAB>PASS<TAB>GROUP<TAB>NAME<TAB>P<TAB>F<TAB>S<TAB>SECS<TAB>LOG".
run_suite() {
    local pass=$1 kind=$2 build=$3 path=$4
    local name logs log cmd=() rc t0 t1 note=
    case $kind in
    chaos) name=chaos ;;
    *) name=$(basename "$path") ;;
    esac
    logs=${PGLOCK_TEST_LOGS:-$build/test-logs}
    [ "$pass" != valgrind ] || logs=$logs-valgrind
    [ "$pass" != tls ] || logs=$logs-tls
    log=$logs/$name.log
    unset ASAN_OPTIONS UBSAN_OPTIONS PGLOCK_SANITIZE
    if [ "$pass" = asan ]; then
        export ASAN_OPTIONS=detect_leaks=1
        export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
        # Tests that compile programs against this build must use the same
        # sanitizers (an ASan library needs the ASan runtime loaded first).
        export PGLOCK_SANITIZE=1
    fi
    case $kind in
    c)
        cmd=(env CMOCKA_MESSAGE_OUTPUT=TAP)
        [ "$pass" != valgrind ] || cmd+=(valgrind -q --error-exitcode=99
            --leak-check=full --errors-for-leak-kinds=definite)
        cmd+=("$path") ;;
    bats) cmd=(env PGLOCK_BIN="$build/pglock" PGLOCK_BUILD="$build" bats --tap "$path") ;;
    chaos) cmd=("$SRC/tests/chaos/chaos.sh" --tap --duration 60s --scenes "direct pooler partition" "$build") ;;
    esac
    [ "$pass" != tls ] || cmd=("$SRC/tests/harness/harness.sh" run --tls --build "$build" -- "${cmd[@]}")
    local cpu0
    children_cpu
    cpu0=$CPU_NOW
    t0=$(date +%s.%N)
    # In the background, so that a signal to the lane ends it at once
    # (lane_main's trap); timeout runs the suite in a process group of its
    # own and passes the signal on.
    timeout -k 10 "$TIMEOUT" "${cmd[@]}" >"$log" 2>&1 </dev/null &
    SUITE_PID=$!
    wait "$SUITE_PID"
    rc=$?
    SUITE_PID=
    t1=$(date +%s.%N)
    local cpu
    children_cpu
    cpu=$(awk -v a="$cpu0" -v b="$CPU_NOW" 'BEGIN{printf "%.1f", b - a}')
    count_tap "$log"
    local plan
    plan=$(grep -m1 -oE '^1\.\.[0-9]+' "$log" | cut -d. -f3)
    if [ "$rc" -eq 0 ] && [ -z "$plan" ]; then
        f=$((f + 1)) note=" (no TAP plan: the suite never said what it would run)"
    elif [ "$rc" -eq 0 ] && [ "$f" -eq 0 ] && [ "$((p + f + s))" -lt "${plan:-0}" ]; then
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
    if [ "$SKIPS_FAIL" = 1 ] && [ "$s" -gt 0 ]; then
        # The skip lines and cmocka's "# skip: reason" lines say why.
        skips=$'\n'$(grep -iE '# skip' "$log" | sed 's/^/         /')
        note="$note ($s skipped: a skip fails under the full harness)"
        f=$((f + s)) s=0
    fi
    local status=ok secs
    [ "$f" -eq 0 ] || status=FAIL
    secs=$(awk "BEGIN{printf \"%.1f\", $t1 - $t0}")
    # One write per line: lanes share the terminal.
    printf '  %-4s %-8s %-30s %3d passed %3d failed %3d skipped %6ss %5ss CPU%s%s\n' \
        "$status" "$pass" "$name" "$p" "$f" "$s" "$secs" "$cpu" "$note" "$skips"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$status" "$pass" \
        "$(group_of "$kind" "$name")" "$name" "$p" "$f" "$s" "$secs" "$log" "$cpu" >>"$RESULTS"
}

# CPU_NOW: the CPU seconds (user + system) of every process the lane has
# reaped so far: a suite's own processes (bats, pglock, psql, valgrind...),
# not the servers', which are the harness's.  Called as is, never in a
# $(...) subshell, which has reaped nothing.
children_cpu() {
    local file=$QUEUE_DIR/times.$BASHPID
    times >"$file"
    CPU_NOW=$(awk 'NR == 2 { split($1, u, /[ms]/); split($2, s, /[ms]/)
        printf "%.2f", u[1] * 60 + u[2] + s[1] * 60 + s[2] }' "$file")
}

# next_suite: the queue's next line into $line (under a lock: every lane
# takes from one queue); 1 when the queue is empty.
next_suite() {
    local n
    {
        flock 8
        n=$(cat "$QUEUE_DIR/next")
        echo $((n + 1)) >"$QUEUE_DIR/next"
    } 8>>"$QUEUE_DIR/lock"
    line=$(sed -n "${n}p" "$QUEUE_DIR/queue")
    [ -n "$line" ]
}

# A lane: runs inside a harness, takes suites until the queue is empty.
lane_main() {
    QUEUE_DIR=$1
    RESULTS=$QUEUE_DIR/results
    SKIPS_FAIL=1
    [ -z "${PGLOCK_TEST_SERVER:-}" ] || SKIPS_FAIL=0
    # psql and python3 run thousands of times (q, py, ...), and their usual
    # launchers cost more than the work: Debian's psql is a Perl wrapper
    # that picks a version (0.1 s a call), pyenv's python3 a shim that runs
    # pyenv (0.5 s).  The tests get the very programs those launchers would
    # run: the harness's psql ($PGLOCK_PGCLIENT, which it uses itself) and
    # the interpreter python3 resolves to, through links put first on PATH.
    local python line
    direct_tools=$(mktemp -d)
    SUITE_PID=
    trap 'rm -rf "$direct_tools"' EXIT
    # timeout passes the signal on to the suite and bounds its end (-k).
    trap '[ -z "$SUITE_PID" ] || { kill -TERM "$SUITE_PID" 2>/dev/null; wait "$SUITE_PID"; }; exit 143' TERM INT
    if [ -x "${PGLOCK_PGCLIENT:-}/psql" ]; then
        ln -s "$PGLOCK_PGCLIENT/psql" "$direct_tools/psql"
    fi
    if python=$(python3 -c 'import sys; print(sys.executable)' 2>/dev/null) && [ -x "$python" ]; then
        ln -s "$python" "$direct_tools/python3"
    fi
    export PATH=$direct_tools:$PATH
    local first_build=
    while next_suite; do
        local pass kind build path
        IFS=$'\t' read -r _ pass kind build path <<<"$line"
        first_build=${first_build:-$build}
        run_suite "$pass" "$kind" "$build" "$path"
    done
    # The servers' logs, for post-mortems (the harness removes its dir).
    if [ -n "${PGLOCK_TEST_DIR:-}" ] && [ -d "$PGLOCK_TEST_DIR" ] && [ -n "$first_build" ]; then
        local dest=${PGLOCK_TEST_LOGS:-$first_build/test-logs}/servers/${PGLOCK_TEST_DIR##*/}
        mkdir -p "$dest"
        cp "$PGLOCK_TEST_DIR"/*.log "$dest/" 2>/dev/null || true
    fi
}

if [ "${1:-}" = --lane ]; then
    lane_main "$2"
    exit 0
fi

# ------------------------------------------------------------ the run

if [ $# -lt 1 ]; then
    echo "usage: tests/run.sh BUILD_DIR [BUILD_DIR...]" >&2
    exit 64
fi
for b in "$@"; do
    [ -d "${b#*:}" ] || { echo "run.sh: no build directory ${b#*:}" >&2; exit 64; }
done
jobs=${PGLOCK_TEST_JOBS:-4}
[[ $jobs =~ ^[1-9][0-9]*$ ]] || { echo "run.sh: PGLOCK_TEST_JOBS must be a positive number" >&2; exit 64; }
# Inside a running harness (a developer's `harness.sh start`) there is one
# set of servers, and on the user's own server other suites' locks would
# be visible: one lane.
inside=0
[ -z "${PGLOCK_TEST_PRIMARY:-}" ] || inside=1
[ -z "${PGLOCK_TEST_SERVER:-}" ] || jobs=1

QUEUE_DIR=$(mktemp -d)
# One initdb per server version for every harness of this run (each lane's
# and the suites' own): tests/harness/harness.sh copies it.  Writable by
# the harness's server owner, who runs initdb.
PGLOCK_TEST_INITDB_CACHE=$(mktemp -d)
chmod 1777 "$PGLOCK_TEST_INITDB_CACHE"
export PGLOCK_TEST_INITDB_CACHE
trap 'rm -rf "$QUEUE_DIR" "$PGLOCK_TEST_INITDB_CACHE"' EXIT
list_suites "$@" >"$QUEUE_DIR/queue"
echo 1 >"$QUEUE_DIR/next"
: >"$QUEUE_DIR/results"
total=$(wc -l <"$QUEUE_DIR/queue")
[ "$total" -gt 0 ] || { echo "run.sh: no suite matches" >&2; exit 64; }
[ "$jobs" -le "$total" ] || jobs=$total
[ "$inside" = 0 ] || jobs=1

if [ -n "${PGLOCK_TEST_LOGS:-}" ] && [ $# -gt 1 ]; then
    echo "run.sh: PGLOCK_TEST_LOGS takes one build directory" >&2
    exit 64
fi
for b in "$@"; do
    logs=${PGLOCK_TEST_LOGS:-${b#*:}/test-logs}
    [ "$b" = "${b#valgrind:}" ] || logs=$logs-valgrind
    [ "$b" = "${b#tls:}" ] || logs=$logs-tls
    # A filtered run keeps the other suites' logs.
    [ -n "${TESTS:-}" ] || rm -rf "$logs"
    mkdir -p "$logs"
done

t_start=$SECONDS
echo "== $total suites of $*, $jobs at a time"
first=${1#*:}
lane_pids=()
# Ctrl-C or SIGTERM: each lane's harness stops its suite and its servers.
trap 'kill -TERM "${lane_pids[@]}" 2>/dev/null; wait; exit 130' INT
trap 'kill -TERM "${lane_pids[@]}" 2>/dev/null; wait; exit 143' TERM
for ((i = 0; i < jobs; i++)); do
    if [ "$inside" = 1 ]; then
        "$SRC/tests/run.sh" --lane "$QUEUE_DIR" &
    else
        "$SRC/tests/harness/harness.sh" run --build "$first" -- \
            "$SRC/tests/run.sh" --lane "$QUEUE_DIR" </dev/null &
    fi
    lane_pids+=($!)
done
lanes_rc=0
for pid in "${lane_pids[@]}"; do wait "$pid" || lanes_rc=1; done
wall=$((SECONDS - t_start))

results=$QUEUE_DIR/results
ran=$(wc -l <"$results")
read -r passed failed skipped < <(awk -F'\t' '{p += $5; f += $6; s += $7}
    END {print p + 0, f + 0, s + 0}' "$results")
if [ "$ran" -lt "$total" ]; then
    echo "run.sh: only $ran of $total suites ran (a lane's harness failed?)"
    failed=$((failed + total - ran))
fi
[ "$lanes_rc" = 0 ] || { echo "run.sh: a lane failed"; failed=$((failed + 1)); }

echo
echo "== time by group (the sum of its suites' times and CPU; $wall s of wall time, $jobs lanes)"
awk -F'\t' '{t[$3] += $8; c[$3] += $10; n[$3]++; T += $8; C += $10}
    END {for (g in t) printf "  %-10s %7.1fs %7.1fs CPU  %3d suites\n", g, t[g], c[g], n[g]
         printf "  %-10s %7.1fs %7.1fs CPU  %3d suites\n", "(all)", T, C, NR}' \
    "$results" | sort -k2,2nr
echo "== CPU by pass"
awk -F'\t' '{t[$2] += $8; c[$2] += $10; n[$2]++}
    END {for (p in t) printf "  %-10s %7.1fs %7.1fs CPU  %3d suites\n", p, t[p], c[p], n[p]}' \
    "$results" | sort -k3,3nr
# Each suite's time, in tests/suite-times' form (copy it there to
# reorder the queue after suites change).
times=${PGLOCK_TEST_LOGS:-$first/test-logs}/suite-times
awk -F'\t' '{printf "%s:%s %s\n", $2, $4, $8}' "$results" | sort >"$times"
echo "== the slowest five (every suite's time: $times)"
sort -t "$(printf '\t')" -k8,8nr "$results" | head -5 |
    awk -F'\t' '{printf "  %-8s %-30s %6.1fs\n", $2, $4, $8}'

# The failed tests once more, last: a CI page that shows only the end of
# the output still says what failed and why.
while IFS=$'\t' read -r status pass _ name _ _ _ _ log _; do
    [ "$status" = FAIL ] || continue
    echo
    echo "---- $pass $name ($log)"
    if grep -q '^not ok' "$log"; then
        grep -A 25 '^not ok' "$log" | head -n 80
    else
        tail -n 40 "$log"
    fi
done <"$results"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
