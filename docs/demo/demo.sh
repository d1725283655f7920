#!/bin/sh
# demo.sh BUILD — the story of pglock, run against real servers.
#
#   make demo                       # starts throwaway servers (the harness)
#   PGLOCK_DEMO_USE_ENV=1 make demo # uses your server, from libpq's PG*
#                                   # variables (PGHOST, PGDATABASE, ...)
#
# The story is told in sections, one function each; add a section by
# writing a function and listing it in SECTIONS.
set -eu

BUILD=${1:-build}
case $BUILD in /*) ;; *) BUILD=$(pwd)/$BUILD ;; esac
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)

SECTIONS="section_library section_cli_race section_cli_mutex section_cli_takeover"

say() { printf '\n== %s\n\n' "$*"; }

# The library: the article's patterns with libpglock (docs/demo/nightly.c).
section_library() {
    say "The library: nightly job, per-customer mutex, string key, pg_locks"
    "$BUILD/pglock_demo" ${PGLOCK_DEMO_CONNINFO:+"$PGLOCK_DEMO_CONNINFO"}
}

# ---- the command line: pglock run

PGLOCK="$BUILD/pglock"
stamp() { date +%H:%M:%S.%N | cut -c1-12; }
# Every pglock run below passes ${PGLOCK_DEMO_CONNINFO:+-d "$PGLOCK_DEMO_CONNINFO"}:
# -d CONNINFO when the demo has one, else libpq's PG* variables decide.

# Three cron hosts fire at 02:00; exactly one runs tonight's billing.
section_cli_race() {
    say "pglock run --try: three hosts race for the nightly job, one runs it"
    tmp=$(mktemp -d)
    for host in alpha bravo charlie; do
        (
            set +e
            "$PGLOCK" run --try --min-hold=2s ${PGLOCK_DEMO_CONNINFO:+-d "$PGLOCK_DEMO_CONNINFO"} nightly-billing -- \
                sh -c "echo \"  [$host] billing runs (lock \$PGLOCK_KEY = \$PGLOCK_KEY_ID)\"; sleep 1"
            echo "  [$host] pglock exited $?"
        ) 2>&1 | sed 's/^pglock:/  ['"$host"'] pglock:/' >"$tmp/$host" &
    done
    wait
    cat "$tmp/alpha" "$tmp/bravo" "$tmp/charlie"
    echo "  -> exactly one ran it (exit 0); the others exited 75 (EX_TEMPFAIL)."
    echo "     --min-hold=2s keeps a late host from running it again."
    rm -rf "$tmp"
}

# A per-customer mutex: pair keys (namespace 1, customer id).
section_cli_mutex() {
    say "pglock run 1:CUSTOMER: one report rebuild per customer at a time"
    tmp=$(mktemp -d)
    for w in "w1 7" "w2 7" "w3 8"; do
        name=${w% *} customer=${w#* }
        "$PGLOCK" run ${PGLOCK_DEMO_CONNINFO:+-d "$PGLOCK_DEMO_CONNINFO"} "1:$customer" -- sh -c \
            "echo \"  \$(date +%H:%M:%S.%N | cut -c1-12) [$name] rebuilding customer $customer\"; sleep 1; echo \"  \$(date +%H:%M:%S.%N | cut -c1-12) [$name] done\"" \
            >"$tmp/$name" 2>&1 &
    done
    wait
    sort "$tmp"/w* | sed 's/^/ /'
    echo "  -> customer 7's two rebuilds ran one after the other; customer 8's ran alongside."
    rm -rf "$tmp"
}

# The holder is SIGKILLed; its job, background child included, is gone
# before the waiting host's job starts.
section_cli_takeover() {
    say "pglock run: the holder is killed, the waiter takes over, the old job is gone first"
    tmp=$(mktemp -d)
    "$PGLOCK" run --lease=3s ${PGLOCK_DEMO_CONNINFO:+-d "$PGLOCK_DEMO_CONNINFO"} nightly-billing -- sh -c \
        "sleep 1000 & echo \$! > $tmp/bg; echo \$\$ > $tmp/job; while :; do sleep 0.05; done" \
        >/dev/null 2>&1 &
    holder=$!
    while [ ! -s "$tmp/bg" ]; do sleep 0.05; done
    "$PGLOCK" run --lease=3s ${PGLOCK_DEMO_CONNINFO:+-d "$PGLOCK_DEMO_CONNINFO"} nightly-billing -- sh -c \
        "t=\$(date +%H:%M:%S.%N | cut -c1-12); for p in \$(cat $tmp/job $tmp/bg); do if [ -e /proc/\$p ]; then s=\$(sed 's/.*) //' /proc/\$p/stat | cut -c1); else s=gone; fi; echo \"  \$t [bravo] starts; alpha's process \$p: \$s\"; done" &
    waiter=$!
    sleep 1
    echo "  $(stamp) [alpha] holds nightly-billing (job $(cat "$tmp/job"), background child $(cat "$tmp/bg")); bravo waits"
    echo "  $(stamp) kill -9 alpha's pglock (pid $holder)"
    kill -9 "$holder"
    wait "$waiter"
    wait "$holder" 2>/dev/null || true
    echo "  -> alpha's watchdog killed its job and background child before the lock was released."
    rm -rf "$tmp"
}

run_sections() {
    for s in $SECTIONS; do
        "$s"
    done
    printf '\ndemo finished\n'
}

if [ "${PGLOCK_DEMO_INSIDE:-}" = 1 ]; then
    # Inside the harness: its primary, through the Unix socket.
    PGLOCK_DEMO_CONNINFO=${PGLOCK_TEST_PRIMARY:-}
    run_sections
elif [ "${PGLOCK_DEMO_USE_ENV:-}" = 1 ]; then
    PGLOCK_DEMO_CONNINFO=""
    run_sections
elif [ -x "$ROOT/tests/harness/harness.sh" ]; then
    PGLOCK_DEMO_INSIDE=1 exec "$ROOT/tests/harness/harness.sh" run \
        --build "$BUILD" -- "$0" "$BUILD"
else
    echo "demo.sh: error: tests/harness/harness.sh not found;" \
         "set PGLOCK_DEMO_USE_ENV=1 to use your own server" >&2
    exit 69
fi
