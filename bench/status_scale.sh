#!/usr/bin/env bash
# status_scale.sh — what `pglock status` costs as the server's lock count
# grows, next to reading pg_locks bare.
#
#   bench/status_scale.sh BUILD_DIR [COUNTS...]    (default 1000 10000 50000)
#
# Starts its own throwaway PostgreSQL (a temp dir, a Unix socket only,
# max_locks_per_transaction raised so that 50,000 locks fit), holds N
# advisory locks in one psql session, and prints, for each N, the median
# of REPS runs (default 9) of:
#   - server: the statement's own time from the server log
#     (log_min_duration_statement = 0), status's statement against
#     SELECT count(*) FROM pg_locks;
#   - process: a whole `pglock status` against a whole
#     `psql -c 'select count(*) from pg_locks'`, wall clock, run in turn
#     (one of each, REPS times) so that both see the same machine; the
#     median, with the lowest and highest in brackets.
# Output to stdout goes to /dev/null in both.
set -euo pipefail

BUILD=$(readlink -f "${1:?usage: bench/status_scale.sh BUILD_DIR [COUNTS...]}")
shift
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(1000 10000 50000)
REPS=${REPS:-9}
PGBIN=${PGLOCK_PGBIN:-/usr/lib/postgresql/15/bin}
PSQL=${PGLOCK_PGCLIENT:-/usr/lib/postgresql/15/bin}/psql
PGLOCK=$BUILD/pglock

DIR=$(mktemp -d)
RUNAS=()
if [ "$(id -u)" = 0 ]; then
    chown postgres "$DIR"
    RUNAS=(runuser -u postgres --)
fi
PORT=$((50000 + RANDOM % 5000))
CONN="host=$DIR port=$PORT user=postgres dbname=postgres"
HOLDER=
cleanup() {
    [ -z "$HOLDER" ] || kill "$HOLDER" 2>/dev/null || true
    "${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -m immediate stop >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT

"${RUNAS[@]}" "$PGBIN/initdb" -D "$DIR/data" -A trust -U postgres >/dev/null
# (pg_ctl hands -o to a shell: one line)
OPTS="-p $PORT -k $DIR -c listen_addresses= -c fsync=off -c max_connections=20"
OPTS+=" -c max_locks_per_transaction=3000 -c log_min_duration_statement=0"
"${RUNAS[@]}" "$PGBIN/pg_ctl" -D "$DIR/data" -l "$DIR/log" -w -o "$OPTS" start >/dev/null

now_ns() { date +%s%N; }

# median of the numbers on stdin
median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

# the durations (ms) of the logged statements matching PATTERN since line FROM
durations() {
    tail -n +"$1" "$DIR/log" | grep -E "duration: [0-9.]+ ms +(statement|execute [^:]*): $2" |
        sed -E 's/.*duration: ([0-9.]+) ms.*/\1/'
}

once_us() { # CMD...: one run's wall time, in microseconds
    local t0 t1
    t0=$(now_ns)
    "$@" >/dev/null
    t1=$(now_ns)
    echo $(((t1 - t0) / 1000))
}

# "median (lowest-highest)" in ms of the microseconds in FILE
spread() { sort -n "$1" | awk '{a[NR]=$1} END {printf "%.1f (%.1f-%.1f)", a[int((NR+1)/2)] / 1000, a[1] / 1000, a[NR] / 1000}'; }

echo "| locks | status statement (ms) | count(*) (ms) | ratio | pglock status (ms) | psql count(*) (ms) | ratio |"
echo "|---:|---:|---:|---:|---:|---:|---:|"
for n in "${COUNTS[@]}"; do
    # the previous holder saw EOF when its fifo closed and may be gone already
    [ -z "$HOLDER" ] || { kill "$HOLDER" 2>/dev/null || true; wait "$HOLDER" 2>/dev/null || true; }
    mkfifo "$DIR/in.$n"
    "$PSQL" -X -q "$CONN" -f "$DIR/in.$n" >/dev/null 2>&1 &
    HOLDER=$!
    exec {fd}>"$DIR/in.$n"
    echo "select count(pg_advisory_lock(g)) from generate_series(1, $n) g;" >&$fd
    for _ in $(seq 600); do
        [ "$("$PSQL" -X -Atc "select count(*) from pg_locks where locktype = 'advisory'" "$CONN")" = "$n" ] && break
        sleep 0.1
    done
    from=$(($(wc -l <"$DIR/log") + 1))
    : >"$DIR/status.us"
    : >"$DIR/psql.us"
    for _ in $(seq "$REPS"); do
        once_us "$PGLOCK" status -d "$CONN" >>"$DIR/status.us"
        once_us "$PSQL" -X -c 'select count(*) from pg_locks' "$CONN" >>"$DIR/psql.us"
    done
    p_status=$(spread "$DIR/status.us")
    p_psql=$(spread "$DIR/psql.us")
    s_status=$(durations "$from" "SELECT 'r'" | median)
    s_count=$(durations "$from" "select count\(\*\) from pg_locks" | median)
    awk -v n="$n" -v a="$s_status" -v b="$s_count" -v c="$p_status" -v d="$p_psql" \
        'BEGIN {printf "| %d | %.1f | %.1f | %.2f | %s | %s | %.2f |\n", n, a, b, a / b, c, d, c / d}'
    exec {fd}>&-
done
