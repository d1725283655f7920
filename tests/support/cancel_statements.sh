#!/usr/bin/env bash
# tests/support/cancel_statements.sh CONNINFO PID COUNT BOUND_S
#
# Cancels the next COUNT statements that backend PID runs, each one for
# sure, with the signal pg_cancel_backend() sends (SIGINT), and prints how
# many statements of PID the server logged as cancelled meanwhile (fewer
# than COUNT only when BOUND_S seconds passed first, or PID ended).
#
# Why not pg_cancel_backend() at random times: a cancel counts only while
# a statement runs (the server drops one that reaches a backend reading
# its next command), and a heartbeat runs for microseconds.  Storms and
# freezes aimed at heartbeats caught one in 10 to 30 tries on a loaded
# 2-core machine, and CI once saw none in 90 s.  So the signal is sent
# from inside the statement: with log_statement = 'all' the backend
# writes each statement to the log once it has parsed it, before it runs
# it; strace injects SIGINT as that write(2) starts, and the executor's
# next CHECK_FOR_INTERRUPTS() raises the cancel.
#
# CONNINFO: a superuser's, for ALTER SYSTEM (reset when this ends, however
# it ends).  The server's log: $PGLOCK_TEST_DIR/primary.log (the harness's).
set -uo pipefail
[ $# -eq 4 ] || { echo "usage: cancel_statements.sh CONNINFO PID COUNT BOUND_S" >&2; exit 64; }
conninfo=$1 pid=$2 count=$3 bound=$4
log=${PGLOCK_TEST_DIR:?}/primary.log

cancelled() {
    grep -c "\[$pid\] .*canceling statement due to user request" "$log"
}
set_log_statement() {
    psql "$conninfo" -qAtX -c "ALTER SYSTEM $1" -c "SELECT pg_reload_conf()" >/dev/null
}

before=$(cancelled)
tracer=
# shellcheck disable=SC2317  # (called by the trap)
finish() {
    if [ -n "$tracer" ]; then kill "$tracer" 2>/dev/null; wait "$tracer" 2>/dev/null; fi
    set_log_statement "RESET log_statement"
}
trap finish EXIT
set_log_statement "SET log_statement = 'all'"
# (The backend reads the new setting before it runs its next command.)
strace -qq -p "$pid" -e trace=write -e inject=write:signal=INT -o /dev/null &
tracer=$!
end=$((SECONDS + bound))
while [ $(($(cancelled) - before)) -lt "$count" ] && [ "$SECONDS" -lt "$end" ] &&
    kill -0 "$tracer" 2>/dev/null; do
    sleep 0.02
done
kill "$tracer" 2>/dev/null
wait "$tracer" 2>/dev/null
tracer=
echo $(($(cancelled) - before))
