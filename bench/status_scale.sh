#!/usr/bin/env bash
# status_scale.sh — how `pglock status` grows with the server's lock count:
# its wall time as a whole process (hyperfine's median) at each count,
# beside `psql -c 'select count(*) from pg_locks'` run the same way.
# Prints a markdown table.
#
#   bench/status_scale.sh PGLOCK CONNINFO COUNTS HYPERFINE_ARGS
# COUNTS: comma-separated, ascending (e.g. 1000,10000,50000).
set -euo pipefail

PGLOCK=${1:?usage: status_scale.sh PGLOCK CONNINFO COUNTS HYPERFINE_ARGS}
DSN=${2:?}
COUNTS=${3:?}
HF_ARGS=${4:-"--warmup 2 --runs 10"}
T=$(mktemp -d "${TMPDIR:-/tmp}/pglock-status-scale.XXXXXX")
HOLDER=
APP=pglock-status-scale-$$
# Ends the holding session on the server (its psql alone would leave the
# backend asleep, holding the locks) and waits for its psql.
release() {
    [ -n "$HOLDER" ] || return 0
    q "select count(pg_terminate_backend(pid)) from pg_stat_activity
       where application_name = '$APP'" >/dev/null || true
    wait "$HOLDER" 2>/dev/null || true
    HOLDER=
}
cleanup() {
    release
    rm -rf "$T"
}
trap cleanup EXIT

q() { psql -X -q -A -t -v ON_ERROR_STOP=1 "$DSN" -c "$1"; }


echo "| locks held | \`pglock status\` ms | \`psql -c 'select count(*) from pg_locks'\` ms | ratio |"
echo "|---:|---:|---:|---:|"
IFS=, read -r -a counts <<<"$COUNTS"
for n in "${counts[@]}"; do
    # One session holds n locks (pairs in namespace 779) until killed.
    PGAPPNAME=$APP psql -X -q -A -t "$DSN" >/dev/null 2>&1 <<SQL &
SELECT count(pg_advisory_lock(779, g::int)) FROM generate_series(1, $n) g;
SELECT pg_sleep(3600);
SQL
    HOLDER=$!
    held=0
    for _ in $(seq 300); do
        kill -0 "$HOLDER" 2>/dev/null || { echo "status_scale: the lock holder failed" >&2; exit 1; }
        held=$(q "select count(*) from pg_locks where locktype = 'advisory' and classid = 779 and granted")
        [ "$held" -lt "$n" ] || break
        sleep 0.2
    done
    [ "$held" -ge "$n" ] || { echo "status_scale: $n locks not held in time" >&2; exit 1; }
    # shellcheck disable=SC2086 # HF_ARGS is a list of words
    hyperfine -N $HF_ARGS --export-json "$T/s.json" \
        "$PGLOCK status -d '$DSN'" \
        "psql -X -q -A -t -d '$DSN' -c 'select count(*) from pg_locks'" >/dev/null 2>&1
    python3 - "$T/s.json" "$n" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))["results"]
s, c = r[0]["median"] * 1000, r[1]["median"] * 1000
print("| %s | %.1f | %.1f | %.2f × |" % (f"{int(sys.argv[2]):,}", s, c, s / c))
EOF
    release
done
echo
