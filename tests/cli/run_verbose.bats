#!/usr/bin/env bats
# pglock run -v: each step on stderr with a timestamp — connect, database,
# backend pid, acquired, command, released — and a loss says why.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# in_order FILE PATTERN...: each extended regex matches a later line.
in_order() {
    local f=$1 line=0 p n
    shift
    for p in "$@"; do
        n=$(tail -n +$((line + 1)) "$f" | grep -n -m1 -E "$p" | cut -d: -f1)
        [ -n "$n" ] || { echo "no line matching /$p/ after line $line of:"; cat "$f"; return 1; }
        line=$((line + n))
    done
}

@test "-v: every step, timestamped, in order; the backend pid is the job's" {
    "$PGLOCK_BIN" run -v -d "$DB" "$K" -- sh -c 'echo $PGLOCK_BACKEND_PID' >"$out/stdout" 2>"$out/stderr"
    # Every line of stderr is "pglock: HH:MM:SS.mmm step".
    run ! grep -vE '^pglock: [0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3} ' "$out/stderr"
    local pid
    pid=$(cat "$out/stdout")
    in_order "$out/stderr" ' connecting$' 'connected: database "postgres"' \
        "acquired \"$K\" .*backend pid $pid\$" 'command started' \
        'command exited \(status 0\)' ' released$'
}

@test "-q: nothing on stderr when all is well; -v: a loss is reported with its reason" {
    run "$PGLOCK_BIN" run -q -d "$DB" "$K" -- true
    [ "$status" -eq 0 ]
    [ -z "$output" ]
    bg h run -v -d "$DB" --lease=3s "$K" -c "echo \$PGLOCK_BACKEND_PID > $out/backend; $(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    q "select pg_terminate_backend($(cat "$out/backend"))" >/dev/null
    finish h 10
    [ "$(status_of h)" = 74 ]
    in_order "$out/h.err" "acquired \"$K\"" 'command started' ' lost: ' \
        "^pglock: error: lock \"$K\" lost: " ' released$'
}
