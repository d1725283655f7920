#!/usr/bin/env bats
# Session defaults a DBA or a user may have set (here through PGOPTIONS:
# tiny statement_timeout, lock_timeout, idle_session_timeout and
# idle_in_transaction_session_timeout) never end a waiter or a holder:
# pglock sets its own values on the lock connection.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# Margins: pglock's first statement runs under the DBA's statement_timeout,
# and the session is idle under idle_session_timeout until that statement
# arrives; nothing can change that, so the values are small next to the
# wait (500 ms) and the hold (1 s) but large next to a connection's setup
# on a loaded machine (with 50 and 100 ms a CI run lost a waiter).
HOSTILE="-c statement_timeout=200 -c lock_timeout=10 -c idle_session_timeout=300 -c idle_in_transaction_session_timeout=300"

# waits_and_holds MODE: a waiter queued behind a holder for a while, then
# a command that runs well past every hostile timeout, keeping the lock.
waits_and_holds() {
    bg h run -d "$DB" "text:$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    PGOPTIONS=$HOSTILE bg w run --mode="$1" -d "$DB" "$K" -c "$(stamp_job w)"
    wait_until 10 waiting_on "$K"
    # Queued well past lock_timeout and statement_timeout: still waiting.
    local deadline
    deadline=$(($(now_ms) + 500))
    wait_until 5 eval "[ \$(now_ms) -ge $deadline ]"
    waiting_on "$K"
    alive "$(pid_of w)"
    touch "$out/h.release"
    finish h 10
    wait_until 10 file_exists "$out/w.start"
    # Held well past idle_session_timeout / idle_in_transaction_session_timeout.
    deadline=$(($(now_ms) + 1000))
    wait_until 5 eval "[ \$(now_ms) -ge $deadline ]"
    held "$K"
    alive "$(cat "$out/w.jobpid")"
    touch "$out/w.release"
    finish w 10
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    not_held "$K"
}

@test "session mode: hostile session defaults end neither the wait nor the hold" {
    waits_and_holds session
}

@test "xact mode: hostile session defaults end neither the wait nor the hold" {
    waits_and_holds xact
}
