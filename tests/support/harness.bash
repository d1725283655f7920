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

# qpoll SQL: q, for the questions wait_until polls: a count from pg_locks
# or pg_stat_activity, whose answer is the same whoever asks and which
# changes nothing.  A psql and a new backend per poll cost about 100 ms of
# CPU on a 2-core VM (50 ms each side), twice what the 50 ms between polls
# leave: a waiting test kept more than a core busy.  So the questions go to
# one psql session that wait_until opens (qpoll_open) and that ends with
# the test.  Where that session is not there (it never was, or a restart
# ended it), qpoll asks as q does.  Never for a statement with an effect
# on its session (a lock, a SET): it would outlive the call.
qpoll() {
    local line out='' answer
    if ! qpoll_up; then
        q "$1"
        return
    fi
    # With SIGPIPE ignored: a session that has just died must fail this
    # write, not kill the test's shell.  (Not in a ( ) subshell: bash
    # closes a coprocess's pipes there.)
    local pipe_trap sent=0
    pipe_trap=$(trap -p PIPE)
    trap '' PIPE
    printf '%s;\n\\if :ERROR\n\\echo __qpoll 1\n\\else\n\\echo __qpoll 0\n\\endif\n' \
        "$1" 1>&"${QPOLL[1]}" 2>/dev/null && sent=1
    eval "${pipe_trap:-trap - PIPE}"
    if [ "$sent" = 0 ]; then
        q "$1"
        return
    fi
    while IFS= read -r -t 10 line <&"${QPOLL[0]}"; do
        case $line in
        "__qpoll "*)
            answer=${line#__qpoll }
            printf '%s' "$out"
            return "$answer" ;;
        esac
        out+=$line$'\n'
    done
    # No answer: the session died or hangs; the next wait_until opens
    # another.
    kill "$QPOLL_PID" 2>/dev/null
    q "$1"
}

# qpoll_up: qpoll's session runs and this shell has its pipes.
qpoll_up() {
    [ -n "${QPOLL_PID:-}" ] && [ -n "${QPOLL[1]:-}" ] && kill -0 "$QPOLL_PID" 2>/dev/null
}

# qpoll_open: the session qpoll asks through, in this shell (the polls run
# in $(...) subshells, which share it).
qpoll_open() {
    [ -n "${PGLOCK_TEST_PRIMARY:-}" ] || return 0
    ! qpoll_up || return 0
    # It holds none of the shell's other descriptors: a session's fifo
    # (sessions.bash) must see its last writer go when the test closes it.
    coproc QPOLL {
        local f
        for f in /proc/"$BASHPID"/fd/*; do
            f=${f##*/}
            [ "$f" -le 2 ] || exec {f}>&-
        done 2>/dev/null
        exec psql -X -q -A -t "$PGLOCK_TEST_PRIMARY" 2>/dev/null
    }
}

# wait_until SECONDS COMMAND...: bounded polling (every 50 ms).  From the
# second poll on, qpoll's session is open (the first poll often succeeds,
# and most conditions look at files, not at the server).
wait_until() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 20; i++)); do
        "$@" && return 0
        [ "$i" -ne 0 ] || qpoll_open
        nap 0.05
    done
    return 1
}

# alive PID: true while PID runs (a zombie does not run).
alive() { local s; proc_state "$1" s && [ "$s" != Z ]; }

# proc_state PID VAR: VAR is set to PID's state (R, S, D, T, Z...); false
# if PID is not there.  Read by the shell itself, without a process: the
# tests poll it.
proc_state() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    printf -v "$2" '%s' "${stat%% *}"
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
