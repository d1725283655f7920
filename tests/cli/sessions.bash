# shellcheck shell=bash
# Background psql sessions for the tests: each named by its
# application_name, running some SQL and then sitting idle (holding what it
# took, or waiting) until session_end or teardown closes its input.  Load
# after helpers.

# sessions_setup: a temp dir and no sessions yet.  FDS and PIDS are what
# teardown closes and waits for; SESSION_FD and SESSION_PID, by name, what
# session_end does.
sessions_setup() {
    TMP=$(mktemp -d)
    FDS=()
    PIDS=()
    declare -gA SESSION_FD=() SESSION_PID=()
}

# sessions_teardown: every session's input closed and the session gone.
sessions_teardown() {
    local fd pid
    for fd in "${FDS[@]}"; do exec {fd}>&- 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 10); do kill -0 "$pid" 2>/dev/null || break; sleep 0.05; done
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$TMP"
}

# session APP CONNINFO SQL: a psql session in the background, named APP
# (application_name), that runs SQL and then sits idle until session_end or
# teardown closes its input.  A lock it waits for keeps it active.  Its
# output goes to $TMP/APP.out; more SQL may be written to $TMP/APP.fifo.
session() {
    local app=$1 conn=$2 fifo="$TMP/$1.fifo" fd
    mkfifo "$fifo"
    exec {fd}<>"$fifo"
    FDS+=("$fd")
    # psql must hold no write end of any session's fifo (its own included),
    # or closing ours at teardown would not end it
    (
        for f in "${FDS[@]}"; do exec {f}>&-; done
        PGAPPNAME="$app" exec psql -X -q -v ON_ERROR_STOP=1 "$conn" -f "$fifo" \
            >"$TMP/$app.out" 2>&1
    ) &
    PIDS+=("$!")
    SESSION_FD[$app]=$fd
    SESSION_PID[$app]=$!
    printf '%s\n' "$3" >&"$fd"
}

# session_pid APP: the pid of the psql of session APP.
session_pid() {
    echo "${SESSION_PID[$1]}"
}

# session_end APP: closes the input of session APP and waits (bounded)
# until its psql has ended; fails if it still runs, else returns psql's
# exit status.
session_end() {
    local fd=${SESSION_FD[$1]:-} pid=${SESSION_PID[$1]:-} f keep=() st=0
    [ -n "$fd" ] || { echo "no session $1 to end" >&2; return 1; }
    exec {fd}>&-
    for f in "${FDS[@]}"; do [ "$f" = "$fd" ] || keep+=("$f"); done
    FDS=("${keep[@]}")
    unset "SESSION_FD[$1]"
    rm -f "$TMP/$1.fifo"
    wait_until 10 gone "$pid" || { echo "session $1 (psql $pid) still runs" >&2; return 1; }
    wait "$pid" || st=$?
    keep=()
    for f in "${PIDS[@]}"; do [ "$f" = "$pid" ] || keep+=("$f"); done
    PIDS=("${keep[@]}")
    unset "SESSION_PID[$1]"
    return "$st"
}

# backend APP: the server pid of the session named APP.
backend() {
    q "select pid from pg_stat_activity where application_name = '$1'"
}

granted_count() { # APP N: APP holds N advisory locks
    [ "$(qpoll "select count(*) from pg_locks l join pg_stat_activity a using (pid)
             where a.application_name = '$1' and l.locktype = 'advisory'
             and l.granted")" = "$2" ]
}

waiting() { # APP: APP waits for an advisory lock
    [ "$(qpoll "select count(*) from pg_locks l join pg_stat_activity a using (pid)
             where a.application_name = '$1' and l.locktype = 'advisory'
             and not l.granted")" = 1 ]
}
