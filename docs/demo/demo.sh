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

SECTIONS="section_library"

say() { printf '\n== %s\n\n' "$*"; }

# The library: the article's patterns with libpglock (docs/demo/nightly.c).
section_library() {
    say "The library: nightly job, per-customer mutex, string key, pg_locks"
    "$BUILD/pglock_demo" ${PGLOCK_DEMO_CONNINFO:+"$PGLOCK_DEMO_CONNINFO"}
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
