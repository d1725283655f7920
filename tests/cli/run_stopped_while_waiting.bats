#!/usr/bin/env bats
# pglock run stopped (Ctrl-Z) while it waits: the server grants the lock
# to the stopped waiter, then ends its silent session after the lease.  On
# resume the command must never run: one line, exit 69, nothing left.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

@test "stopped while waiting, granted, past the lease, continued: the command never runs" {
    bg h run -d "$DB" "text:$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    env --default-signal=TSTP "$PGLOCK_BIN" run -d "$DB" --lease=5s "$K" -- touch "$out/w.ran" \
        >"$out/w.out" 2>"$out/w.err" &
    echo $! >"$out/w.pid"
    wait_until 10 waiting_on "$K"
    kill -TSTP "$(pid_of w)"
    w_stopped() { [ "$(awk '{print $3}' "/proc/$(pid_of w)/stat")" = T ]; }
    wait_until 5 w_stopped
    # The holder goes; the server grants the lock to the stopped waiter,
    # then ends its session once the 5 s lease passes in silence (long
    # enough for a loaded machine to see the lock held first).
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    wait_until 10 held "$K"
    w_session_gone() { [ "$(q "select count(*) from pg_stat_activity where application_name = 'pglock run $K'")" -eq 0 ]; }
    wait_until 15 w_session_gone
    not_held "$K"
    kill -CONT "$(pid_of w)"
    finish w 10
    cat "$out/w.err"
    [ "$(status_of w)" = 69 ]
    [ ! -e "$out/w.ran" ]
    [ "$(grep -c '^pglock: error: ' "$out/w.err")" -eq 1 ]
    grep -q "lock \"$K\"; the command was not run" "$out/w.err"
    not_held "$K"
}
