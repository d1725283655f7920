#!/usr/bin/env bats
# pglock run when heartbeats fail on a session that goes on: a failed
# statement is no lost lock.  pg_cancel_backend() on the lock's backend ends a heartbeat,
# not the session: a session advisory lock stays, so pglock must not close
# its connection (which would free the lock) while the job still runs.
# Only the client deadline T_c may declare the lock lost, and then the job
# is stopped before the connection closes.  Lease 6 s: T_h 1 s, T_c 4 s,
# kill-after 1 s.  Jobs ignore SIGTERM, so a lock freed early shows as
# the waiter's job starting before the holder's last step.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    q "grant execute on function pg_backend_pid() to public" >/dev/null 2>&1 || true
    teardown_run
}

# stubborn_job NAME: a job that ignores SIGTERM, records its backend pid
# (NAME.backend) and its own (NAME.jobpid), and works in 20 ms steps, each
# step's time in NAME.alive, until NAME.release exists (at most 60 s).
stubborn_job() {
    local n=$1
    printf '%s' "trap '' TERM; echo \$PGLOCK_BACKEND_PID > $out/$n.backend
      echo \$\$ > $out/$n.jobpid; date +%s%N > $out/$n.start
      end=\$((\$(date +%s) + 60))
      while [ ! -e $out/$n.release ] && [ \$(date +%s) -lt \$end ]; do
        date +%s%N > $out/$n.alive.tmp && mv $out/$n.alive.tmp $out/$n.alive
        sleep 0.02
      done"
}

# storm PID MS: pg_cancel_backend(PID) as fast as the server can, for MS
# (or until PID is no backend any more).
storm() {
    q "DO \$\$ BEGIN WHILE clock_timestamp() < statement_timestamp() + interval '$2 ms'
         LOOP EXIT WHEN NOT pg_cancel_backend($1); END LOOP; END \$\$" >/dev/null 2>&1 || true
}

# logged PID TEXT: lines of backend PID in the server's log that hold TEXT.
logged() {
    grep -c "\[$1\] .*$2" "$PGLOCK_TEST_DIR/primary.log" || true
}

@test "cancels storming the lock's backend: the lock is kept, a waiter never starts before the holder's job's last step" {
    need PGLOCK_TEST_DIR PGLOCK_TEST_ORDINARY
    # --lease=9s: T_h 1.5 s, T_c 6 s.  A cancel storm on this 2-core
    # machine hits only some heartbeats, so for 2.5 s every heartbeat
    # fails for sure too (pg_backend_pid() revoked from the holder's
    # ordinary role) while cancels storm the backend: well inside T_c.
    bg h run -d "$PGLOCK_TEST_ORDINARY" --lease=9s "$K" -c "$(stubborn_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=9s "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on "$K"
    local pid cancels denied
    pid=$(cat "$out/h.backend")
    cancels=$(logged "$pid" "canceling statement due to user request")
    denied=$(logged "$pid" "permission denied for function pg_backend_pid")
    date +%s%N >"$out/storm"
    q "revoke execute on function pg_backend_pid() from public"
    storm "$pid" 2500
    held "$K"
    q "grant execute on function pg_backend_pid() to public"
    cancels=$(($(logged "$pid" "canceling statement due to user request") - cancels))
    denied=$(($(logged "$pid" "permission denied for function pg_backend_pid") - denied))
    [ $((cancels + denied)) -ge 1 ]
    # Heartbeats confirm again: the holder goes on; then its job ends.
    held "$K"
    touch "$out/h.release"
    finish h 20
    finish w 20
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ]
    local stopped started
    stopped=$(ms_between "$out/storm" "$out/h.alive")
    started=$(ms_between "$out/storm" "$out/w.start")
    report "2.5 s of failing heartbeats ($cancels cancelled, $denied refused):" \
        "holder's job last ran at +${stopped} ms (exit $(status_of h))," \
        "waiter's job started at +${started} ms"
    [ "$started" -gt "$stopped" ]
    # No loss: the failures ended well inside T_c.
    [ "$(status_of h)" = 0 ]
}

@test "heartbeats failing past T_c on a live session: lost, the job is killed, then the waiter starts" {
    need PGLOCK_TEST_ORDINARY
    # Every heartbeat fails (permission denied) while the session and its
    # lock stay: T_c decides, and the connection closes only once the job
    # is gone.
    bg h run -d "$PGLOCK_TEST_ORDINARY" --lease=6s "$K" -c "$(stubborn_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=6s "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/revoked"
    q "revoke execute on function pg_backend_pid() from public"
    finish h 20
    q "grant execute on function pg_backend_pid() to public"
    [ "$(status_of h)" = 74 ]
    grep -q "lost" "$out/h.err"
    finish w 20
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ]
    local stopped started
    stopped=$(ms_between "$out/revoked" "$out/h.alive")
    started=$(ms_between "$out/revoked" "$out/w.start")
    report "heartbeats refused from +0 ms: holder's job last ran at +${stopped} ms" \
        "(exit 74, lease 6 s, T_c 4 s), waiter's job started at +${started} ms"
    [ "$started" -gt "$stopped" ]
}

@test "--mode=xact through the pooler: cancels aimed at the heartbeats are no loss, the waiter stays blocked" {
    need PGLOCK_TEST_DIR PGLOCK_TEST_POOLER
    # --lease=6s: T_h 1 s, T_c 4 s.  The heartbeat runs inside a savepoint
    # taken after the lock, so a cancel aborts only that savepoint.
    bg h run -d "$PGLOCK_TEST_POOLER" --mode=xact --lease=6s "$K" -c "$(stubborn_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=6s "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on "$K"
    # Two heartbeats in a row cancelled (2 s of failures, T_c 4 s), each
    # from inside the statement (cancel_statements.sh says why).
    local cancels
    cancels=$("$BATS_TEST_DIRNAME/../support/cancel_statements.sh" "$DB" "$(cat "$out/h.backend")" 2 30)
    [ "$cancels" -ge 2 ]
    # the lock is still the holder's, the waiter still waits, the job runs on
    held "$K"
    [ ! -e "$out/w.start" ]
    alive "$(cat "$out/h.jobpid")"
    touch "$out/h.release"
    finish h 20
    finish w 20
    report "--mode=xact through the pooler: $cancels heartbeats cancelled," \
        "holder exit $(status_of h), waiter exit $(status_of w)"
    [ "$(status_of h)" = 0 ]
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ]
}
