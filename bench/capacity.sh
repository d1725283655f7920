#!/usr/bin/env bash
# capacity.sh — what one PostgreSQL carries: many
# `pglock run` processes on this machine against one throwaway server.
#
#   bench/capacity.sh BUILD_DIR [--smoke] [N...]     (default N: 100 500 1000)
#
# For each N, with max_connections raised as a user would (ALTER SYSTEM,
# restart) and PgBouncer's max_client_conn and pool raised for its runs:
#   - holders: N `pglock run` holders of N keys at the default lease: the
#     server's memory per holder (PSS, /proc/PID/smaps_rollup, of its
#     backends and of the whole server), its CPU for their heartbeats (all
#     server processes, /proc/PID/stat, minus an idle baseline) as % of one
#     core, pglock's own, and the time `pglock status` takes;
#   - the 02:00 storm: N `pglock run --try` on one key released at once,
#     directly, through PgBouncer, and N `redis-cli SET NX` on one Redis
#     key as the peer: time until exactly one runs and every other exited,
#     peak server processes, exit statuses and failures by kind;
#   - waiters: N `pglock run --wait` queued on one key: memory, the rate at
#     which the queue drains, and whether it drains in arrival order.
# Clients and server share the machine's cores; the server's CPU is
# counted apart.  Writes bench/results/capacity.md (--smoke: N 20 50,
# short windows, BUILD_DIR/capacity-smoke.md).  Not part of `make bench`:
# `make bench-capacity`.
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: bench/capacity.sh BUILD_DIR [--smoke] [N...]}")
shift
SMOKE=0
if [ "${1:-}" = --smoke ]; then SMOKE=1; shift; fi
COUNTS=("$@")
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGLOCK=$BUILD/pglock
HARNESS=${PGLOCK_BENCH_HARNESS:-$ROOT/tests/harness/harness.sh}

say() { echo "capacity: $(date +%T) $*" >&2; }
fail() { say "error: $*"; exit 1; }
[ -x "$PGLOCK" ] || fail "$PGLOCK is not built (run: make)"

# A harness of our own: its server and pooler are reconfigured.
if [ -z "${PGLOCK_CAPACITY_HARNESS:-}" ]; then
    export PGLOCK_CAPACITY_HARNESS=1
    SMOKE_ARG=()
    [ "$SMOKE" = 0 ] || SMOKE_ARG=(--smoke)
    exec "$HARNESS" run --build "$BUILD" -- "${BASH_SOURCE[0]}" "$BUILD" \
        "${SMOKE_ARG[@]}" "${COUNTS[@]}"
fi

if [ ${#COUNTS[@]} -eq 0 ]; then
    if [ "$SMOKE" = 1 ]; then COUNTS=(20 50); else COUNTS=(100 500 1000); fi
fi
MAXN=0
for n in "${COUNTS[@]}"; do [ "$n" -le "$MAXN" ] || MAXN=$n; done
if [ "$SMOKE" = 1 ]; then
    WINDOW=5 WINDOWS=2 STATUS_RUNS=3 REPORT=$BUILD/capacity-smoke.md
else
    WINDOW=20 WINDOWS=3 STATUS_RUNS=7 REPORT=$ROOT/bench/results/capacity.md
fi
POOL=20 # PgBouncer's server connections per pool in the storm through it

D=$(mktemp -d "${TMPDIR:-/tmp}/pglock-capacity.XXXXXX")
chmod 755 "$D"
REDIS_PID=
CHILDREN=()
cleanup() {
    local p
    for p in "${CHILDREN[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    [ -z "$REDIS_PID" ] || kill -TERM "$REDIS_PID" 2>/dev/null || true
    rm -rf "$D"
}
trap cleanup EXIT
trap 'exit 143' TERM INT

P=$PGLOCK_TEST_PRIMARY
q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$P" -c "$1"; }
now_ns() { date +%s%N; }
HZ=$(getconf CLK_TCK)
ulimit -n 20000 2>/dev/null || true

# ---- the server as a user would raise it; the pooler too
say "max_connections = $((MAXN + 100)), then a restart"
q "alter system set max_connections = $((MAXN + 100))" >/dev/null
q "alter system set shared_buffers = '32MB'" >/dev/null
"$HARNESS" restart-primary >/dev/null
INI=$PGLOCK_TEST_DIR/pgbouncer.ini
sed -i -e "s/^max_client_conn = .*/max_client_conn = $((MAXN + 100))/" \
    -e "s/^default_pool_size = .*/default_pool_size = $POOL/" "$INI"
"$HARNESS" restart-pooler >/dev/null
if command -v redis-server >/dev/null; then
    redis-server --port 0 --unixsocket "$D/redis.sock" --unixsocketperm 700 \
        --save '' --appendonly no --dir "$D" --logfile "$D/redis.log" \
        --maxclients $((MAXN + 100)) &
    REDIS_PID=$!
    for _ in $(seq 100); do [ -S "$D/redis.sock" ] && break; sleep 0.05; done
fi

PM=$(head -1 "$PGLOCK_TEST_PGDATA/postmaster.pid")
server_pids() { echo "$PM"; cat "/proc/$PM/task/$PM/children" 2>/dev/null; }
pss_kb() { awk '/^Pss:/ {print $2}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0; }
sum_pss() { local p s=0; for p in "$@"; do s=$((s + $(pss_kb "$p"))); done; echo "$s"; }
ticks() { # PID...: user + system clock ticks (stat fields 14, 15), summed
    local p s=0 f a
    for p in "$@"; do
        { read -r f <"/proc/$p/stat"; } 2>/dev/null || continue
        read -ra a <<<"${f##*) }" # from field 3 on
        s=$((s + a[11] + a[12]))
    done
    echo "$s"
}
# nap SECS: a sleep without a process
exec {NAP_FD}<> <(:)
nap() { read -r -t "$1" -u "$NAP_FD" _ || true; }
# descendants PID...: the pids of their process trees
descendants() {
    local p
    for p in "$@"; do
        echo "$p"
        # shellcheck disable=SC2046
        [ -r "/proc/$p/task/$p/children" ] && descendants $(cat "/proc/$p/task/$p/children")
    done
}
# files_at_least DIR PREFIX N: DIR holds at least N files named PREFIX*
files_at_least() { [ "$(compgen -G "$1/$2*" | wc -l)" -ge "$3" ]; }
# lines_at_least FILE N
lines_at_least() { [ -e "$1" ] && [ "$(wc -l <"$1")" -ge "$2" ]; }
comm_is() { [ "$(cat "/proc/$1/comm" 2>/dev/null)" = "$2" ]; }
# median (min-max) of the numbers on stdin, with printf format F
spread() { sort -g | awk -v f="$1" '{a[NR]=$1} END {if (!NR) {print "-"; exit}
    printf f " (" f "–" f ")", a[int((NR+1)/2)], a[1], a[NR]}'; }
median() { sort -g | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : 0}'; }
# wait_for SECS CMD...: bounded polling, every 200 ms
wait_for() {
    local i secs=$1
    shift
    for ((i = 0; i < secs * 5; i++)); do "$@" && return 0; sleep 0.2; done
    return 1
}
count_where() { q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
    where l.locktype = 'advisory' and a.application_name like '$1' and l.granted = $2"; }
at_least() { [ "$(count_where "$1" "$2")" -ge "$3" ]; }
# none_left: no advisory lock held or awaited (PgBouncer's idle server
# connections keep the last client's application_name: not a count of those)
none_left() { [ "$(q "select count(*) from pg_locks where locktype = 'advisory'")" = 0 ]; }
# stop_all PID...: TERM, then bounded waits, then KILL
stop_all() {
    kill -TERM "$@" 2>/dev/null || true
    reap_all "$@"
}
# reap_all PID...: bounded waits for each to end by itself, then KILL
reap_all() {
    local p
    for p in "$@"; do
        for _ in $(seq 300); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    CHILDREN=()
}

out() { printf '%s\n' "$*" >>"$REPORT.tmp"; }
: >"$REPORT.tmp"

# ---- idle baseline: the server's own CPU with no client
idle_pct=()
for ((w = 0; w < WINDOWS; w++)); do
    # shellcheck disable=SC2046
    t0=$(ticks $(server_pids))
    sleep "$WINDOW"
    # shellcheck disable=SC2046
    t1=$(ticks $(server_pids))
    idle_pct+=("$(awk -v a="$t0" -v b="$t1" -v hz="$HZ" -v w="$WINDOW" 'BEGIN {printf "%.2f", (b - a) * 100 / hz / w}')")
done
IDLE=$(printf '%s\n' "${idle_pct[@]}" | median)
# shellcheck disable=SC2046
IDLE_PSS=$(sum_pss $(server_pids))

out "# What one PostgreSQL carries (bench/capacity.sh)"
out ""
out "- $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), $(free -g | awk '/^Mem:/ {print $2}') GiB; clients and server share the cores"
out "- $(q 'select version()' | cut -d, -f1); max_connections $(q 'show max_connections'), shared_buffers $(q 'show shared_buffers'), max_locks_per_transaction $(q 'show max_locks_per_transaction'); fsync $(q 'show fsync') (the harness's)"
out "- PgBouncer $("${PGLOCK_PGBOUNCER:-/usr/sbin/pgbouncer}" --version 2>/dev/null | head -1 | awk '{print $2}'), transaction pooling, max_client_conn $((MAXN + 100)), default_pool_size $POOL; Redis $(redis-server --version 2>/dev/null | awk '{print $3}' | sed 's/v=//')"
out "- $("$PGLOCK" --version 2>/dev/null | head -1), default lease 20 s (a heartbeat every 3.3 s); windows of $WINDOW s, $WINDOWS of them"
out "- idle server: $IDLE % of one core, $((IDLE_PSS / 1024)) MiB PSS (all its processes)"
out ""

# ---- holders
out "## Holders: N \`pglock run\` holding N keys, default lease"
out ""
out "Server PSS per holder: the median backend's PSS, and (the whole server's PSS with the holders − without) / N."
out "Server CPU: all its processes, minus the idle baseline, as % of one core: median (min–max) of the windows."
out "pglock: the \`pglock run\` processes (and their watchdogs), PSS per holder and CPU."
out ""
out "| N | backend PSS (KiB) | server PSS / holder (KiB) | server CPU (% core) | per heartbeat (µs) | pglock PSS / holder (KiB) | pglock CPU (% core) | \`pglock status\` (ms) |"
out "|---:|---:|---:|---:|---:|---:|---:|---:|"
for n in "${COUNTS[@]}"; do
    say "holders: $n"
    pids=()
    for ((i = 1; i <= n; i++)); do
        "$PGLOCK" run -q -d "$P" "cap-h-$i" -- sleep 100000 </dev/null >/dev/null 2>>"$D/holders.err" &
        pids+=($!)
    done
    CHILDREN=("${pids[@]}")
    wait_for 600 at_least 'pglock run cap-h-%' true "$n" || fail "only $(count_where 'pglock run cap-h-%' true) of $n holders after 600 s"
    sleep 5
    mapfile -t backends < <(q "select pid from pg_stat_activity where application_name like 'pglock run cap-h-%'")
    back_pss=$(for b in "${backends[@]}"; do pss_kb "$b"; done | median)
    # shellcheck disable=SC2046
    all_pss=$(sum_pss $(server_pids))
    per_holder=$(((all_pss - IDLE_PSS) / n))
    mapfile -t clients < <(for p in $(descendants "${pids[@]}"); do comm_is "$p" pglock && echo "$p"; done)
    client_pss=$(($(sum_pss "${clients[@]}") / n))
    : >"$D/cpu" ; : >"$D/ccpu"
    for ((w = 0; w < WINDOWS; w++)); do
        # shellcheck disable=SC2046
        s0=$(ticks $(server_pids)); c0=$(ticks "${clients[@]}")
        sleep "$WINDOW"
        # shellcheck disable=SC2046
        s1=$(ticks $(server_pids)); c1=$(ticks "${clients[@]}")
        awk -v a="$s0" -v b="$s1" -v hz="$HZ" -v w="$WINDOW" -v idle="$IDLE" \
            'BEGIN {printf "%.2f\n", (b - a) * 100 / hz / w - idle}' >>"$D/cpu"
        awk -v a="$c0" -v b="$c1" -v hz="$HZ" -v w="$WINDOW" \
            'BEGIN {printf "%.2f\n", (b - a) * 100 / hz / w}' >>"$D/ccpu"
    done
    cpu=$(spread '%.2f' <"$D/cpu")
    # heartbeats: n every 5 s; CPU per heartbeat in µs of server time
    per_beat=$(median <"$D/cpu" | awk -v n="$n" '{printf "%.0f", $1 / 100 * 1e6 / (n / 5)}')
    ccpu=$(spread '%.1f' <"$D/ccpu")
    : >"$D/status"
    for ((r = 0; r < STATUS_RUNS; r++)); do
        t0=$(now_ns); "$PGLOCK" status -d "$P" >"$D/status.out" 2>&1 || true; t1=$(now_ns)
        echo $(((t1 - t0) / 1000)) | awk '{printf "%.1f\n", $1 / 1000}' >>"$D/status"
    done
    st=$(spread '%.0f' <"$D/status")
    lines=$(wc -l <"$D/status.out")
    out "| $n | $back_pss | $per_holder | $cpu | $per_beat | $client_pss | $ccpu | $st ($lines lines) |"
    stop_all "${pids[@]}"
    wait_for 60 none_left || say "warning: pglock sessions left after the holders"
done
[ ! -s "$D/holders.err" ] || { out ""; out "Holder errors: $(sort "$D/holders.err" | uniq -c | sort -rn | head -3 | tr '\n' ';')"; }
out ""

# ---- the storm
# storm TAG N KIND [CONNINFO]: N processes released at once on a barrier
# (a fifo: each reads one byte of it).  KIND pglock: `pglock run --try`
# whose job holds the lock until the storm is over (as --min-hold does for
# a nightly job); redis: redis-cli SET NX.
storm() {
    local tag=$1 n=$2 kind=$3 conn=${4:-} i
    local S=$D/storm-$tag-$n
    mkdir -p "$S"
    mkfifo "$S/go"
    pids=()
    for ((i = 1; i <= n; i++)); do
        (
            : >"$S/ready.$i"
            read -r -n 1 _ <"$S/go" || true
            if [ "$kind" = redis ]; then
                rc=0
                redis-cli -s "$D/redis.sock" SET "nightly-$tag-$n" "$i" NX PX 600000 >"$S/out.$i" 2>"$S/err.$i" || rc=$?
                [ "$(cat "$S/out.$i")" != OK ] || echo "$i" >>"$S/ran"
            else
                rc=0
                "$PGLOCK" run --try -d "$conn" "nightly-$tag-$n" -- \
                    sh -c "echo $i >> $S/ran; while [ ! -e $S/over ]; do sleep 0.1; done" \
                    </dev/null >"$S/out.$i" 2>"$S/err.$i" || rc=$?
            fi
            echo "$rc $(date +%s%N)" >"$S/st.$i"
        ) &
        pids+=($!)
    done
    CHILDREN=("${pids[@]}")
    wait_for 600 files_at_least "$S" ready. "$n" || say "warning: storm $tag $n: not every process is ready"
    nap 0.5
    # peak server processes (backends and refused forks), every 10 ms
    (
        peak=0
        while [ -d "$S" ] && [ ! -e "$S/over" ]; do
            [ -r "/proc/$PM/task/$PM/children" ] || break
            # one line with no newline: read fills kids and returns 1
            read -ra kids <"/proc/$PM/task/$PM/children" || true
            [ "${#kids[@]}" -le "$peak" ] || { peak=${#kids[@]}; echo "$peak" >"$S/peak"; }
            nap 0.01
        done
    ) &
    local sampler=$!
    CHILDREN+=("$sampler")
    local base
    base=$(wc -w <"/proc/$PM/task/$PM/children")
    local t0 fd
    t0=$(now_ns)
    exec {fd}>"$S/go"
    head -c "$n" /dev/zero | tr '\0' x >&"$fd"
    # done: every process but the one winner has written its status
    local want=$((n - 1))
    [ "$kind" = redis ] && want=$n
    wait_for 600 files_at_least "$S" st. "$want" || say "warning: storm $tag $n: not every process ended"
    exec {fd}>&-
    local t_last
    t_last=$(cat "$S"/st.* | awk '{print $2}' | sort -n | tail -1)
    touch "$S/over"
    wait "$sampler" 2>/dev/null || true
    reap_all "${pids[@]}"
    local ran codes fails peak
    ran=$(wc -l <"$S/ran" 2>/dev/null || echo 0)
    codes=$(cat "$S"/st.* | awk '{print $1}' | sort -n | uniq -c | awk '{printf "%s%d×%s", (NR > 1 ? ", " : ""), $1, $2}')
    fails=$(cat "$S"/err.* 2>/dev/null | grep -E '^pglock: (error|warning)|Error|ERR' |
        sed -E -e 's/.*too many clients.*/too many clients/' \
            -e 's/.*remaining connection slots.*/reserved slots/' \
            -e 's/.*max_client_conn.*/max_client_conn/' \
            -e 's/.*(did not answer|timeout|timed out).*/timeout/' \
            -e 's/.*(Connection refused|No such file).*/refused/' \
            -e 's/^pglock: error: (.{0,50}).*/other: \1/' | sort | uniq -c |
        awk '{c=$1; $1=""; printf "%s%d×%s", (NR > 1 ? ", " : ""), c, substr($0, 2)}' || true)
    peak=$(($(cat "$S/peak" 2>/dev/null || echo "$base") - base))
    awk -v t0="$t0" -v t1="$t_last" -v n="$n" -v tag="$tag" -v ran="$ran" -v codes="$codes" \
        -v peak="$peak" -v fails="${fails:-none}" \
        'BEGIN {printf "| %s | %d | %.2f | %d | %s | %d | %s |\n", tag, n, (t1 - t0) / 1e9, ran, codes, peak, fails}' >>"$REPORT.tmp"
}

out "## The 02:00 storm: N processes fire at once on one key"
out ""
out "Released together on a barrier.  pglock: \`pglock run --try nightly -- JOB\`, whose job holds the lock until"
out "the storm is over (what \`--min-hold\` does for a job shorter than the storm); Redis: \`redis-cli SET nightly ID NX PX\`."
out "Time: from the release until every process but the winner has exited.  Peak: the server's processes"
out "above its idle count (a refused connection forks one too).  Exit statuses: count×status."
out ""
out "| path | N | time (s) | ran | exit statuses | peak server processes | failures |"
out "|---|---:|---:|---:|---|---:|---|"
for n in "${COUNTS[@]}"; do
    say "storm: $n direct"
    storm direct "$n" pglock "$P"
    say "storm: $n through PgBouncer"
    storm pgbouncer "$n" pglock "$PGLOCK_TEST_POOLER"
    if [ -n "$REDIS_PID" ]; then
        say "storm: $n Redis"
        storm redis "$n" redis
    fi
done
out ""

# ---- waiters
out "## Waiters: N \`pglock run --wait\` queued on one key"
out ""
out "A holder takes the key, N waiters queue behind it (started one after another), then the holder lets go;"
out "each waiter's job records its backend and the time.  Arrival order: the waiters' lock statements by"
out "\`pg_stat_activity.query_start\`.  Drain: handoffs per second from the first waiter's job to the last;"
out "gap: the time between consecutive jobs, median (min–max)."
out ""
out "| N | backend PSS (KiB) | server PSS / waiter (KiB) | pglock PSS / waiter (KiB) | drain (handoffs/s) | gap (ms) | in arrival order |"
out "|---:|---:|---:|---:|---:|---:|---|"
for n in "${COUNTS[@]}"; do
    say "waiters: $n"
    W=$D/waiters-$n
    mkdir -p "$W"
    "$PGLOCK" run -q -d "$P" "cap-w-$n" -- sh -c "while [ ! -e $W/go ]; do sleep 0.05; done" </dev/null >/dev/null 2>&1 &
    holder=$!
    wait_for 30 at_least "pglock run cap-w-$n on %" true 1 || fail "the waiters' holder did not start"
    pids=()
    for ((i = 1; i <= n; i++)); do
        "$PGLOCK" run -q --wait=3600s -d "$P" "cap-w-$n" -- \
            sh -c "echo \"\$PGLOCK_BACKEND_PID \$(date +%s%N)\" >> $W/order" </dev/null >/dev/null 2>>"$W/err" &
        pids+=($!)
    done
    CHILDREN=("$holder" "${pids[@]}")
    wait_for 600 at_least "pglock run cap-w-$n on %" false "$n" || fail "only $(count_where "pglock run cap-w-$n on %" false) of $n waiters queued"
    sleep 2
    q "select a.pid from pg_stat_activity a join pg_locks l using (pid) where l.locktype = 'advisory'
        and not l.granted and a.application_name like 'pglock run cap-w-$n on %' order by a.query_start" >"$W/arrival"
    mapfile -t backends <"$W/arrival"
    back_pss=$(for b in "${backends[@]}"; do pss_kb "$b"; done | median)
    # shellcheck disable=SC2046
    all_pss=$(sum_pss $(server_pids))
    per_waiter=$(((all_pss - IDLE_PSS) / (n + 1)))
    mapfile -t clients < <(for p in $(descendants "${pids[@]}"); do comm_is "$p" pglock && echo "$p"; done)
    client_pss=$(($(sum_pss "${clients[@]}") / n))
    touch "$W/go"
    wait_for 900 lines_at_least "$W/order" "$n" || say "warning: waiters $n: the queue did not drain"
    stop_all "$holder" "${pids[@]}"
    drain=$(awk 'NR == 1 {a = $2} {b = $2} END {printf "%.0f", (NR - 1) / ((b - a) / 1e9)}' "$W/order")
    gap=$(awk 'NR > 1 {printf "%.1f\n", ($2 - p) / 1e6} {p = $2}' "$W/order" | spread '%.1f')
    awk '{print $1}' "$W/order" >"$W/ran"
    # in order: position by position, and as pairs (Kendall: pairs run in arrival order)
    inorder=$(awk 'NR == FNR {pos[$1] = FNR; next} {r[FNR] = pos[$1]} END {
        n = FNR; same = 0; ok = 0; pairs = 0
        for (i = 1; i <= n; i++) if (r[i] == i) same++
        for (i = 1; i <= n; i++) for (j = i + 1; j <= n && j <= i + 50; j++) { pairs++; if (r[i] < r[j]) ok++ }
        printf "%d of %d at their place; %.1f %% of near pairs in order", same, n, pairs ? ok * 100 / pairs : 100}' \
        "$W/arrival" "$W/ran")
    out "| $n | $back_pss | $per_waiter | $client_pss | $drain | $gap | $inorder |"
    wait_for 60 none_left || say "warning: pglock sessions left after the waiters"
done
out ""
[ ! -s "$D/holders.err" ] || cp "$D/holders.err" "$BUILD/capacity-holders.err"

mv "$REPORT.tmp" "$REPORT"
say "report: $REPORT"
cat "$REPORT"
