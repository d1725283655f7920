# tests/support/harness.bash — helpers for bats tests run by tests/run.sh.
#   load ../support/harness      (from a file in tests/cli/)

# need VAR...: skip the test, saying why, unless every VAR is set.
need() {
    local v
    for v in "$@"; do
        [ -n "${!v:-}" ] || skip "$v is unset (run through tests/run.sh; PGLOCK_TEST_SERVER mode lacks it)"
    done
}

# proxy_cmd cut|heal|count|reset: talk to the harness's proxy; prints the
# reply line ("ok", "messages=N roundtrips=M").
proxy_cmd() {
    need PGLOCK_TEST_PROXY_CTL PGLOCK_TEST_PROXY_BIN
    "$PGLOCK_TEST_PROXY_BIN" --control "$PGLOCK_TEST_PROXY_CTL" --send "$1"
}

# q SQL [CONNINFO]: one value from the primary (or CONNINFO), unaligned.
q() {
    psql -X -q -A -t -v ON_ERROR_STOP=1 "${2:-$PGLOCK_TEST_PRIMARY}" -c "$1"
}

# nap SECONDS: sleep without a process.  Tests spend most of their time
# polling, and a sleep(1) per poll cost more CPU than the test itself
# (a fork and an exec every 50 ms, ~15 ms of CPU each on a loaded 2-core
# machine: make check was CPU-bound).  read -t on a pipe that this shell
# holds open at both ends times out without ever reading anything.
nap() {
    [ -n "${NAP_FD:-}" ] || exec {NAP_FD}<> <(:)
    read -r -t "$1" -u "$NAP_FD" || true
}

# wait_until SECONDS COMMAND...: bounded polling (every 50 ms).
wait_until() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 20; i++)); do
        "$@" && return 0
        nap 0.05
    done
    return 1
}

# alive PID: true while PID runs (a zombie does not run).
alive() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# partition_cmd cut|heal: the partition server's TCP port goes dark (every
# packet dropped in the namespace, both ways) or comes back.
partition_cmd() {
    need PGLOCK_TEST_PARTITION_NETNS
    "$PGLOCK_TEST_HARNESS" "partition-$1"
}

# in_partition COMMAND...: runs COMMAND inside the partition's network
# namespace (it reaches the server by $PGLOCK_TEST_PARTITION_TCP).
in_partition() {
    need PGLOCK_TEST_PARTITION_NETNS
    "$PGLOCK_TEST_HARNESS" partition-exec "$@"
}
