#!/usr/bin/env bats
# pglock run under query cancels (issue 25, hole 2).  pg_cancel_backend()
# on the lock's backend ends a heartbeat, not the session: a session
# advisory lock stays, so pglock must not close its connection (which
# would free the lock) while the job still runs.  Only the client deadline
# T_c may declare the lock lost, and then the job is stopped before the
# connection closes.  Lease 6 s: T_h 1 s, T_c 4 s, kill-after 1 s.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# stubborn_job NAME SECS: a job that ignores SIGTERM, records its backend
# pid (NAME.backend) and its own (NAME.jobpid), and works in 20 ms steps
# for SECS seconds, each step's time in NAME.alive.
stubborn_job() {
    local n=$1 secs=$2
    printf '%s' "trap '' TERM; echo \$PGLOCK_BACKEND_PID > $out/$n.backend
      echo \$\$ > $out/$n.jobpid; date +%s%N > $out/$n.start
      end=\$((\$(date +%s) + $secs))
      while [ \$(date +%s) -lt \$end ]; do
        date +%s%N > $out/$n.alive.tmp && mv $out/$n.alive.tmp $out/$n.alive
        sleep 0.02
      done"
}

# storm PID MS: pg_cancel_backend(PID) as fast as the server can, for MS
# (or until PID is no backend any more).
storm() {
    q "DO \$\$ BEGIN WHILE clock_timestamp() < statement_timestamp() + interval '$2 ms'
         LOOP EXIT WHEN NOT pg_cancel_backend($1); END LOOP; END \$\$" >/dev/null
}

@test "cancels storming the lock's backend: a waiter never starts before the holder's job's last step" {
    bg h run -d "$DB" --lease=6s "$K" -c "$(stubborn_job h 6)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=6s "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/storm"
    # Longer than a heartbeat period (so that heartbeats are cancelled),
    # shorter than T_c.
    storm "$(cat "$out/h.backend")" 2500
    held "$K"
    finish h 20
    finish w 20
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ]
    local stopped started
    stopped=$(ms_between "$out/storm" "$out/h.alive")
    started=$(ms_between "$out/storm" "$out/w.start")
    report "cancel storm of 2.5 s -> holder's job last ran at +${stopped} ms" \
        "(exit $(status_of h)), waiter's job started at +${started} ms"
    [ "$started" -gt "$stopped" ]
    # No loss either: the storm ended well inside T_c.
    [ "$(status_of h)" = 0 ]
}

@test "a storm past T_c: the lock is lost, the job is killed before the waiter starts" {
    bg h run -d "$DB" --lease=6s "$K" -c "$(stubborn_job h 30)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=6s "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/storm"
    storm "$(cat "$out/h.backend")" 7000
    finish h 20
    finish w 20
    [ "$(status_of h)" = 74 ]
    grep -q "lost" "$out/h.err"
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ]
    local stopped started
    stopped=$(ms_between "$out/storm" "$out/h.alive")
    started=$(ms_between "$out/storm" "$out/w.start")
    report "cancel storm of 7 s -> holder's job last ran at +${stopped} ms" \
        "(exit 74), waiter's job started at +${started} ms"
    [ "$started" -gt "$stopped" ]
}
