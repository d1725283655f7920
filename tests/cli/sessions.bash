# shellcheck shell=bash
# Background psql sessions for the status tests: each named by its
# application_name, running some SQL and then sitting idle (holding what it
# took, or waiting) until teardown closes its input.  Load after helpers.

# sessions_setup: a temp dir and no sessions yet.
sessions_setup() {
    TMP=$(mktemp -d)
    FDS=()
    PIDS=()
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
# (application_name), that runs SQL and then sits idle until teardown
# closes its input.  A lock it waits for keeps it active.
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
    printf '%s\n' "$3" >&"$fd"
}

# backend APP: the server pid of the session named APP.
backend() {
    q "select pid from pg_stat_activity where application_name = '$1'"
}

granted_count() { # APP N: APP holds N advisory locks
    [ "$(q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
             where a.application_name = '$1' and l.locktype = 'advisory'
             and l.granted")" = "$2" ]
}

waiting() { # APP: APP waits for an advisory lock
    [ "$(q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
             where a.application_name = '$1' and l.locktype = 'advisory'
             and not l.granted")" = 1 ]
}
