#!/usr/bin/env bats
# A wait cancelled on the server by someone else (pg_cancel_backend, as a
# DBA does) is not a Ctrl-C: `pglock run` says so in one line and exits 69
# without running the command; `pglock lead` keeps contending and leads
# once the leader goes.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# cancel_waiters: pg_cancel_backend of every backend waiting on K.
cancel_waiters() {
    q "select count(pg_cancel_backend(pid)) from pg_locks where locktype = 'advisory'
         and not granted and objsubid = 1
         and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")"
}

@test "run: a wait cancelled on the server exits 69 with one line; nothing runs or stays" {
    bg h run -d "$DB" "text:$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" "$K" -- touch "$out/w.ran"
    wait_until 10 waiting_on "$K"
    [ "$(cancel_waiters)" -eq 1 ]
    finish w 10
    cat "$out/w.err"
    [ "$(status_of w)" = 69 ]
    [ "$(grep -c '^pglock: error: ' "$out/w.err")" -eq 1 ]
    grep -q "cancelled on the server" "$out/w.err"
    [ ! -e "$out/w.ran" ]
    gone() { [ "$(q "select count(*) from pg_stat_activity where application_name = '$(run_app "$K")'")" -eq 0 ]; }
    wait_until 5 gone
    [ "$(advisory_count "$(name_sql "$K")" f)" -eq 0 ]
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
}

@test "lead: a follower whose wait is cancelled contends again and leads later" {
    bg h run -d "$DB" "text:$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg f lead -v -d "$DB" --lease=3s "$K" -c "touch $out/f.led; while :; do sleep 0.1; done"
    wait_until 10 waiting_on "$K"
    [ "$(cancel_waiters)" -eq 1 ]
    # It is still there, and queued again.
    wait_until 10 grep -q "cancelled on the server" "$out/f.err"
    wait_until 10 waiting_on "$K"
    alive "$(pid_of f)"
    [ ! -e "$out/f.led" ]
    touch "$out/h.release"
    finish h 10
    wait_until 10 file_exists "$out/f.led"
    kill -TERM "$(pid_of f)"
    finish f 10
    [ "$(status_of f)" = 143 ]
}
