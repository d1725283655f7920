#!/usr/bin/env bash
# run.sh — pglock's benchmarks, side by side with the limit (raw libpq) and
# the alternatives (sleep-and-poll loops, Redis, psql, flock, etcdctl lock),
# in one run.
#
#   bench/run.sh BUILD_DIR [--smoke]
#
# Runs against a throwaway PostgreSQL from tests/harness/harness.sh (or the
# harness already running, when PGLOCK_TEST_PRIMARY is set, as under
# tests/run.sh), a throwaway Redis on a Unix socket in a temp dir and a
# throwaway etcd on loopback (bench/etcd_side.sh).
# Prints a markdown report and writes it to bench/results/latest.md
# (--smoke: a few seconds, tiny counts, written to BUILD_DIR/bench-smoke.md;
# for CI, which checks that every section is there, never the numbers).
set -euo pipefail

BUILD=${1:?usage: bench/run.sh BUILD_DIR [--smoke]}
BUILD=$(readlink -f "$BUILD")
SMOKE=0
[ "${2:-}" != --smoke ] || SMOKE=1
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
B=$BUILD/bench
PGLOCK=$BUILD/pglock
HARNESS=${PGLOCK_BENCH_HARNESS:-$ROOT/tests/harness/harness.sh}

say() { echo "bench: $*" >&2; }
fail() { say "error: $*"; exit 1; }

for p in bench_ops bench_contend bench_scale bench_trylock bench_pairs bench_sql_variants; do
    [ -x "$B/$p" ] || fail "$B/$p is not built (run: make, or cmake --build $BUILD)"
done

# No server yet: run ourselves again under a harness of our own, which may
# be reconfigured (a bigger lock table for 10,000 locks).
if [ -z "${PGLOCK_TEST_PRIMARY:-}" ]; then
    [ -x "$HARNESS" ] || fail "$HARNESS not found; set PGLOCK_TEST_PRIMARY to a server"
    export PGLOCK_BENCH_OWN_HARNESS=1
    exec "$HARNESS" run --build "$BUILD" -- "${BASH_SOURCE[0]}" "$@"
fi

T=$(mktemp -d "${TMPDIR:-/tmp}/pglock-bench.XXXXXX")
REDIS_PID=
cleanup() {
    if [ -n "$REDIS_PID" ]; then
        kill -TERM "$REDIS_PID" 2>/dev/null || true
        wait "$REDIS_PID" 2>/dev/null || true
    fi
    rm -rf "$T"
}
trap cleanup EXIT

q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$PGLOCK_TEST_PRIMARY" -c "$1"; }

# 10,000 locks held by one client, and 100,000 held by another session
# beside 200 holders (server cost per holder), need a lock table larger
# than the default 64 x max_connections, and more connections.
SCALE_COUNTS=1,100,10000
SERVER_COUNTS=0,10000,100000
HOLDERS=200
if [ "$SMOKE" = 1 ]; then
    SCALE_COUNTS=1,100
    SERVER_COUNTS=0,100
    HOLDERS=10
elif [ "$(q 'show max_locks_per_transaction')" -lt 512 ] ||
     [ "$(q 'show max_connections')" -lt 250 ]; then
    if [ -n "${PGLOCK_BENCH_OWN_HARNESS:-}" ]; then
        q 'ALTER SYSTEM SET max_locks_per_transaction = 512' >/dev/null
        q 'ALTER SYSTEM SET max_connections = 250' >/dev/null
        # commits that a token takes wait for the disk, as in production
        q 'ALTER SYSTEM SET fsync = on' >/dev/null
        "$HARNESS" restart-primary
    else
        say "max_locks_per_transaction < 512 or max_connections < 250 on this server: smaller counts"
        SCALE_COUNTS=1,100,1000
        SERVER_COUNTS=0,1000
        HOLDERS=50
    fi
fi

# A throwaway Redis, when redis-server is installed and the benchmarks
# were built with hiredis.
REDIS_SOCK=
if command -v redis-server >/dev/null && ldd "$B/bench_contend" | grep hiredis >/dev/null; then
    redis-server --port 0 --unixsocket "$T/redis.sock" --unixsocketperm 700 \
        --save '' --appendonly no --dir "$T" --logfile "$T/redis.log" &
    REDIS_PID=$!
    for _ in $(seq 100); do
        [ -S "$T/redis.sock" ] && break
        sleep 0.05
    done
    [ -S "$T/redis.sock" ] || fail "redis-server did not start (see $T/redis.log)"
    REDIS_SOCK=$T/redis.sock
fi

if [ "$SMOKE" = 1 ]; then
    OPS="--reps 2 --iters 30"
    CONTEND="--procs 2 --gaps-us 0,1000 --duration-ms 200 --reps 1 --slices 2 --pin"
    TARGET="--procs 2 --gaps-us 0 --duration-ms 300 --reps 1 --slices 3 --pin"
    DISTINCT="--procs 1,2 --duration-ms 200 --reps 1 --slices 2 --pin"
    SCALE="--iters 20 --reps 1"
    SERVER="--iters 20 --reps 1 --hold-ms 500 --settle-ms 0"
    HYPERFINE="--warmup 1 --runs 3"
    PAIRS="3 1"
    BREAKDOWN_RUNS=2
    STATUS_COUNTS="100 1000"
    STATUS_REPS=1
    RECORD_RUNS=3
    HANDOFF_RUNS=2
    VARIANTS="--iters 20 --rounds 2 --pin"
    # takeovers at etcd's minimum TTL, and none at its default (10 s each)
    ETCD_TAKEOVERS="2 0"
else
    OPS="--reps 11 --iters 1000"
    CONTEND="--procs 2,4,8 --gaps-us 0,1000 --duration-ms 1000 --reps 7 --slices 5 --pin"
    # The contention target (pglock at least 0.95x raw libpq) is judged
    # on repetitions of 3 s: in one of 1 s this machine moves raw libpq
    # against itself by up to 15 %.
    TARGET="--procs 2,4,8 --gaps-us 0 --duration-ms 3000 --reps 7 --slices 15 --pin"
    DISTINCT="--procs 1,2,4,8 --duration-ms 3000 --reps 7 --slices 15 --pin"
    SCALE="--iters 100 --reps 9"
    SERVER="--iters 500 --reps 7 --hold-ms 10000"
    HYPERFINE="--warmup 5 --runs 40"
    PAIRS="80 5"
    BREAKDOWN_RUNS=20
    STATUS_COUNTS="1000 10000 50000"
    STATUS_REPS=9
    RECORD_RUNS=30
    HANDOFF_RUNS=30
    VARIANTS="--iters 3000 --rounds 21 --pin"
    ETCD_TAKEOVERS="15 5"
fi
REDIS_ARG=()
[ -z "$REDIS_SOCK" ] || REDIS_ARG=(--redis "$REDIS_SOCK")
COUNT_ARGS=()
if [ -n "${PGLOCK_TEST_PROXY:-}" ] && [ -n "${PGLOCK_TEST_PROXY_CTL:-}" ]; then
    COUNT_ARGS=(--count-conninfo "$PGLOCK_TEST_PROXY" --count-ctl "$PGLOCK_TEST_PROXY_CTL")
fi
# pglock's library parts are built once the library is (PGLOCK_BENCH_LIBRARY).
HAVE_LIB=0
if nm "$B/bench_ops" 2>/dev/null | grep ' T pglock_client_open$' >/dev/null; then HAVE_LIB=1; fi

REPORT=$T/report.md
out() { printf '%s\n' "$*" >>"$REPORT"; }

# ---- the report
out "# pglock benchmarks"
out ""
[ "$SMOKE" = 0 ] || out "**Smoke run** (CI): tiny counts, the numbers mean nothing."
out ""
out "## Machine"
out ""
out "- CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(nproc) cores online"
out "- Kernel: $(uname -sr)"
out "- PostgreSQL: $(q 'show server_version') (fsync $(q 'show fsync'), synchronous_commit $(q 'show synchronous_commit'); Unix socket and TCP loopback)"
out "- etcd: $(command -v etcd >/dev/null && etcd --version | sed -n 's/^etcd Version: //p' || echo 'not run (not installed)')"
out "- Redis: $( [ -n "$REDIS_SOCK" ] && redis-server --version | sed 's/ sha=.*//' || echo 'not run (no redis-server or no hiredis)')"
out "- Date: $(date -u '+%Y-%m-%d %H:%M UTC'); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
out "- pglock: $(git -C "$ROOT" describe --always --dirty 2>/dev/null || echo unknown), build $(basename "$BUILD")"
[ "$HAVE_LIB" = 1 ] || out "- pglock's library was not benchmarked (built with PGLOCK_BENCH_LIBRARY=OFF): baselines only"
out ""

out "## 1–2. One client, no contention: raw libpq (the limit) and pglock"
out ""
out "Round trips are counted at the test proxy (frontend 'Q' and 'S' messages), not inferred."
out "Ratios are per repetition (pglock / raw, same repetition), median (min–max)."
out ""
say "operations over the Unix socket"
"$B/bench_ops" --label "Unix socket" --conninfo "$PGLOCK_TEST_PRIMARY" $OPS \
    "${COUNT_ARGS[@]}" >>"$REPORT"
if [ -n "${PGLOCK_TEST_PRIMARY_TCP:-}" ]; then
    say "operations over TCP loopback"
    "$B/bench_ops" --label "TCP loopback" --conninfo "$PGLOCK_TEST_PRIMARY_TCP" $OPS \
        "${COUNT_ARGS[@]}" >>"$REPORT"
fi

# raw-again: raw libpq compared with itself, how far the machine alone
# moves a ratio (an A/A control for pglock's).
LOCKERS=raw,raw-again,poll10,poll1,redis10,redis1
[ "$HAVE_LIB" = 0 ] || LOCKERS=pglock,$LOCKERS
out "## 3. Contention: N processes, one key (Unix socket)"
out ""
out "Lock, 10 µs of work, unlock, in a loop; with no gap or a 1 ms idle gap between attempts."
out "Per acquisition: requests the client sent (one round trip each; pglock's calls, which section 2"
out "shows are one round trip each) / statements the server counted (pg_stat_database transactions;"
out "Redis INFO commands, where the unlock script's GET and DEL count besides EVAL)."
out ""
say "contention"
"$B/bench_contend" --conninfo "$PGLOCK_TEST_PRIMARY" "${REDIS_ARG[@]}" --lockers "$LOCKERS" \
    $CONTEND >>"$REPORT"

if [ "$HAVE_LIB" = 1 ]; then
    out "### pglock against raw libpq alone, in longer repetitions"
    out ""
    out "The lockers of the contention target (at least 0.95× raw libpq as a median, no"
    out "repetition below 0.90×), with no gap, in repetitions three times as long: in the 1 s"
    out "repetitions above this 2-core machine alone moves raw libpq against itself by up to 15 %."
    out ""
    say "contention, the target"
    "$B/bench_contend" --conninfo "$PGLOCK_TEST_PRIMARY" --lockers pglock,raw,raw-again \
        $TARGET >>"$REPORT"
fi

out "## 4. No contention: N processes, distinct keys (Unix socket)"
out ""
say "distinct keys"
"$B/bench_contend" --distinct --conninfo "$PGLOCK_TEST_PRIMARY" \
    --lockers "$([ "$HAVE_LIB" = 1 ] && echo pglock,raw,raw-again || echo raw,raw-again)" \
    $DISTINCT >>"$REPORT"

out "## 5. The command line: one try-lock run of \`true\`"
out ""
say "command line"
cat >"$T/psql_run.sh" <<'EOF'
#!/bin/sh
# The psql wrapper people write: hold the lock in a psql session while \!
# runs the command (psql's own variables do not reach \!).
dsn=$1 key=$2; shift 2
psql -X -q -A -t -v ON_ERROR_STOP=1 "$dsn" <<SQL
SELECT pg_try_advisory_lock($key) AS got \gset
\if :got
\! $*
SELECT pg_advisory_unlock_all();
\endif
SQL
EOF
chmod +x "$T/psql_run.sh"
CMDS=()
NAMES=()
add() { NAMES+=("$1"); CMDS+=("$2"); }
DSN="'$PGLOCK_TEST_PRIMARY'"   # one word for hyperfine's splitting
add "flock -n FILE true (local floor)" "flock -n $T/flock.lock true"
add "minimal libpq: connect, try-lock, run true, unlock (the floor)" "$B/bench_trylock -d $DSN 777001 true"
# pglock run counts only if it really holds the lock while the command
# runs: a second try-lock from inside must find it busy (exit 75).
rc=0
[ ! -x "$PGLOCK" ] || "$PGLOCK" run -d "$PGLOCK_TEST_PRIMARY" --try 777002 -- \
    "$B/bench_trylock" -d "$PGLOCK_TEST_PRIMARY" 777002 >/dev/null 2>&1 || rc=$?
if [ "$rc" = 75 ]; then
    add "pglock run --try K -- true" "$PGLOCK run -d $DSN --try 777003 -- true"
    add "pglock run --try --fencing-token K -- true (the token's cost)" \
        "$PGLOCK run -d $DSN --try --fencing-token 777007 -- true"
    HAVE_RUN=1
else
    HAVE_RUN=0
fi
add "psql wrapper (try-lock in psql, \\! true)" "$T/psql_run.sh $DSN 777004 true"
add "breakdown: true" "true"
add "breakdown: minimal libpq: connect, try-lock, unlock, no child" "$B/bench_trylock -d $DSN 777005"
if [ -x "$PGLOCK" ]; then
    add "breakdown: pglock --version (exec, dynamic linking, exit)" "$PGLOCK --version"
fi
HF_ARGS=()
for c in "${CMDS[@]}"; do HF_ARGS+=("$c"); done
printf '%s\n' "${NAMES[@]}" >"$T/cli.names"
if ! command -v hyperfine >/dev/null; then
    out "hyperfine is not installed: not measured."
elif hyperfine -N $HYPERFINE --export-json "$T/cli.json" "${HF_ARGS[@]}" >"$T/hyperfine.log" 2>&1; then
    python3 "$ROOT/bench/cli_table.py" "$T/cli.json" "$T/cli.names" >>"$REPORT"
else
    cat "$T/hyperfine.log" >&2
    fail "hyperfine failed"
fi
if [ "$HAVE_RUN" = 1 ]; then
    say "command line, interleaved"
    out "The same comparisons interleaved run by run (\`bench_pairs\`: the floor, then pglock, then"
    out "the other way round), so that the machine's drift weighs on both alike; hyperfine runs"
    out "each command's runs as one block. Goal 3 is judged here."
    out ""
    out "| comparison | floor: median (min–max) ms | pglock: median (min–max) ms | ratio of medians | pairs' ratios: median (p10–p90) |"
    out "|---|---:|---:|---:|---:|"
    # shellcheck disable=SC2086  # RUNS WARMUP
    "$B/bench_pairs" $PAIRS "the floor" "pglock run --try K -- true" \
        -- "$B/bench_trylock" -d "$PGLOCK_TEST_PRIMARY" 777008 true \
        -- "$PGLOCK" run -d "$PGLOCK_TEST_PRIMARY" --try 777009 -- true >>"$REPORT"
    if [ -n "${PGLOCK_TEST_PRIMARY_TCP:-}" ]; then
        # shellcheck disable=SC2086
        "$B/bench_pairs" $PAIRS "the floor" "pglock run --try K -- true over TCP loopback" \
            -- "$B/bench_trylock" -d "$PGLOCK_TEST_PRIMARY_TCP" 777012 true \
            -- "$PGLOCK" run -d "$PGLOCK_TEST_PRIMARY_TCP" --try 777013 -- true >>"$REPORT"
    fi
    # shellcheck disable=SC2086
    "$B/bench_pairs" $PAIRS "the floor" "pglock run --try --fencing-token K -- true" \
        -- "$B/bench_trylock" -d "$PGLOCK_TEST_PRIMARY" 777010 true \
        -- "$PGLOCK" run -d "$PGLOCK_TEST_PRIMARY" --try --fencing-token 777011 -- true >>"$REPORT"
    out ""
fi
if [ "$HAVE_RUN" = 0 ]; then
    out "\`pglock run\` is not available in this build: not measured."
elif command -v strace >/dev/null; then
    python3 "$ROOT/bench/run_breakdown.py" "$BREAKDOWN_RUNS" "$PGLOCK" "$PGLOCK_TEST_PRIMARY" \
        777006 >>"$REPORT" 2>"$T/breakdown.log" ||
        out "The strace breakdown failed: $(tail -1 "$T/breakdown.log")"
fi
out ""

out "## 6. Scale: one client holding many locks (Unix socket)"
out ""
say "scale"
STATUS_ARGS=()
if [ -x "$PGLOCK" ] && "$PGLOCK" status -d "$PGLOCK_TEST_PRIMARY" >/dev/null 2>&1; then
    STATUS_ARGS=(--status-cmd "$PGLOCK status -d '$PGLOCK_TEST_PRIMARY'")
else
    out "\`pglock status\` is not available in this build: its refresh is not measured."
    out ""
fi
"$B/bench_scale" --conninfo "$PGLOCK_TEST_PRIMARY" --counts "$SCALE_COUNTS" $SCALE \
    "${STATUS_ARGS[@]}" >>"$REPORT"

out "## 7. Server cost per holder (Unix socket)"
out ""
out "The heartbeat proves possession without reading \`pg_locks\` (the same backend answers;"
out "in xact hold, the same open, unfailed transaction). With other sessions holding many"
out "advisory locks: wall time per heartbeat, median (min–max) of repetitions, its ratio to"
out "\`SELECT pg_backend_pid()\` within each repetition, and the server CPU its backend spent"
out "(/proc/PID/schedstat). The last two rows are sent by hand: the session heartbeat of \`run\`"
out "and \`lead\`, which also tries the lock's stop-request key (--replace), and the heartbeat"
out "pglock sent before."
out ""
if [ -x "$B/bench_server" ]; then
    say "server cost per holder"
    "$B/bench_server" --conninfo "$PGLOCK_TEST_PRIMARY" --counts "$SERVER_COUNTS" \
        --holders "$HOLDERS" $SERVER >>"$REPORT"
else
    out "pglock's library was not built into the benchmarks: not measured."
fi

out "## 8. pglock status as the server's lock count grows"
out ""
out "A throwaway server of its own holds N advisory locks; the statement's server time (from"
out "the server log) and a whole \`pglock status\` process, beside \`SELECT count(*) FROM pg_locks\`"
out "and a whole \`psql -c\` running it (medians)."
out ""
say "status at many locks"
REPS=$STATUS_REPS "$ROOT/bench/status_scale.sh" "$BUILD" $STATUS_COUNTS >>"$REPORT"
out ""
out "## 9. What --record costs run --try"
out ""
out "Round trips and protocol messages through the harness's counting proxy, and the median"
out "wall time of whole \`pglock run --try K -- true\` processes, with and without \`--record\`."
out ""
if [ -n "${PGLOCK_TEST_PROXY:-}" ]; then
    say "--record"
    "$ROOT/bench/record_cost.sh" "$BUILD" "$RECORD_RUNS" >>"$REPORT"
else
    out "No counting proxy in this harness: not measured."
fi
out ""
out "## 10. Semaphore handoff: run --slots=N against a single lock"
out ""
out "From a holder's job ending to a waiting job starting, whole \`pglock run\` processes: the"
out "holder's release and exit, the server waking the waiter, and for \`--slots\` the head waiter's"
out "watchers (one connection per slot) cancelled and joined before the job is forked."
out ""
say "semaphore handoff"
"$ROOT/bench/slots_handoff.sh" "$BUILD" "$HANDOFF_RUNS" >>"$REPORT"
out ""

out "## 11. What each form of the lock statement costs the server (why pglock sends the one it does)"
out ""
out "One connection, no contention, raw libpq sending each form by hand: per iteration (a lock and"
out "its unlock, or one heartbeat) the backend's CPU time (/proc/PID/schedstat; utime+stime from"
out "/proc/PID/stat beside it, in 10 ms ticks), and the wall time. Variants run in interleaved rounds"
out "(forwards, then backwards); median (min–max) over rounds, and the median of the per-round ratios"
out "of backend CPU to the first row's."
out ""
say "statement variants"
"$B/bench_sql_variants" --conninfo "$PGLOCK_TEST_PRIMARY" $VARIANTS >>"$REPORT"
out ""

out "## 12. Side by side with etcd: \`etcdctl lock\`"
out ""
say "etcd"
# shellcheck disable=SC2086  # PAIRS ETCD_TAKEOVERS
"$ROOT/bench/etcd_side.sh" "$BUILD" $PAIRS $ETCD_TAKEOVERS >>"$REPORT"
out ""

out "Load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)."
out ""
# Last, what this run met and missed (bench/targets.py reads the tables
# above): every run tells the truth, and the README quotes this table.
python3 -S "$ROOT/bench/targets.py" "$REPORT" >"$T/targets.md"
cat "$T/targets.md" >>"$REPORT"

if [ "$SMOKE" = 1 ]; then
    DEST=$BUILD/bench-smoke.md
else
    mkdir -p "$ROOT/bench/results"
    DEST=$ROOT/bench/results/latest.md
fi
cp "$REPORT" "$DEST"
cat "$REPORT"
say "report written to $DEST"
