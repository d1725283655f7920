#!/usr/bin/env bats
# pglock run: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pglock reach the
# whole job — the command and a grandchild it runs in the foreground —
# and pglock exits with the command's status; the lock is free afterwards.
# SIGKILL of pglock, Ctrl-Z while waiting, and pglock as PID 1.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
# Also the jobs and grandchildren a test recorded (.jobpid, .bgpid).
teardown() {
    local f
    for f in "$out"/*.jobpid "$out"/*.bgpid; do
        [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    teardown_run
}

# forwarded SIG: a job whose child and grandchild each record SIG and exit
# 0; pglock gets SIG; both recorded it, and pglock exits 0 (the job's own
# status, since it handled the signal).
forwarded() {
    local sig=$1
    rm -f "$out"/child.got "$out"/gc.got "$out"/started
    bg h run -d "$DB" "$K" -- sh -c "
        trap 'echo $sig > $out/child.got; exit 0' $sig
        sh -c 'trap \"echo $sig > $out/gc.got; exit 0\" $sig
               touch $out/started; while :; do sleep 0.1; done'
        wait"
    wait_until 10 file_exists "$out/started"
    held "$K"
    kill "-$sig" "$(pid_of h)"
    finish h 10
    echo "pglock exited $(status_of h); stderr: $(cat "$out/h.err")"
    [ "$(cat "$out/gc.got")" = "$sig" ]
    [ "$(cat "$out/child.got")" = "$sig" ]
    [ "$(status_of h)" = 0 ]
    wait_until 5 not_held "$K"
}

@test "SIGINT reaches the command and its grandchild" { forwarded INT; }
@test "SIGTERM reaches the command and its grandchild" { forwarded TERM; }
@test "SIGHUP reaches the command and its grandchild" { forwarded HUP; }
@test "SIGQUIT reaches the command and its grandchild" { forwarded QUIT; }

@test "a job killed by the forwarded signal: 128+N" {
    local sig n
    for sig in INT HUP QUIT TERM; do
        n=$(kill -l "$sig")
        rm -f "$out/started"
        bg h run -d "$DB" "$K" -- sh -c "touch $out/started; while :; do sleep 0.1; done"
        wait_until 10 file_exists "$out/started"
        kill "-$sig" "$(pid_of h)"
        finish h 10
        [ "$(status_of h)" = $((128 + n)) ]
    done
    wait_until 5 not_held "$K"
}

# pglock run as PID 1 of a PID namespace (a container's entry point): the
# orphans the job leaves behind are reaped — no zombie stays in the
# namespace — while the job still runs.
@test "as PID 1: orphans that exit are reaped while the job runs" {
    unshare --pid --fork --mount-proc true 2>/dev/null || skip "no PID namespaces here (unshare)"
    # The job orphans three short-lived processes (double fork), waits
    # until they have exited, then looks, inside the namespace, for
    # zombies (bounded polling), and reports what it found.
    local job="
        for i in 1 2 3; do (sh -c 'sleep 0.1; touch $out/orphan.\$\$' &); done
        i=0; while [ \$(ls $out/orphan.* 2>/dev/null | wc -l) -lt 3 ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i+1)); done
        i=0; z=1
        while [ \$i -lt 200 ]; do
          z=0
          for s in /proc/[0-9]*/stat; do
            st=\$(cat \$s 2>/dev/null) || continue
            st=\${st##*) }
            [ \"\${st%% *}\" = Z ] && z=\$((z+1))
          done
          [ \$z -eq 0 ] && break
          sleep 0.05; i=\$((i+1))
        done
        echo \$z > $out/zombies
        echo \$(cut -d' ' -f1 /proc/1/stat) > $out/pid1"
    run timeout 60 unshare --pid --fork --mount-proc "$PGLOCK_BIN" run -d "$DB" "$K" -c "$job"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(cat "$out/pid1")" = 1 ]
    [ "$(ls "$out"/orphan.* | wc -l)" -eq 3 ]
    [ "$(cat "$out/zombies")" -eq 0 ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
}

# pglock SIGKILLed while its job ignores SIGTERM, and so does a background
# grandchild (in its own session, so no process-group signal reaches it):
# both are still gone — per /proc, zombies do not count — before a waiting
# pglock run starts its command; the job's last sign of life comes before
# the waiter's start (timestamps from both).
@test "SIGKILL of pglock: a job and a setsid grandchild that ignore SIGTERM are gone before the waiter starts" {
    bg h run -d "$DB" --lease=4s --kill-after=300ms "$K" -c "
        trap '' TERM
        setsid sh -c 'trap \"\" TERM; echo \$\$ > $out/h.bgpid; while :; do date +%s%N > $out/bg.alive.tmp && mv $out/bg.alive.tmp $out/bg.alive; sleep 0.02; done' &
        $(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    wait_until 10 file_exists "$out/bg.alive"
    bg w run -d "$DB" --lease=4s "$K" -c "$(check_job w "$out/h.jobpid" "$out/h.bgpid")"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/killed"
    kill -KILL "$(pid_of h)"
    finish w 20
    [ "$(status_of w)" = 0 ]
    [ ! -e "$out/w.overlap" ] || { echo "still running at the waiter's start: $(cat "$out/w.overlap")"; false; }
    gone "$(cat "$out/h.jobpid")"
    gone "$(cat "$out/h.bgpid")"
    # Timestamps from both sides agree.
    [ "$(cat "$out/h.alive")" -lt "$(cat "$out/w.start")" ]
    [ "$(cat "$out/bg.alive")" -lt "$(cat "$out/w.start")" ]
    report "SIGKILL -> waiter's job started at +$(ms_between "$out/killed" "$out/w.start") ms;" \
        "job last ran $(ms_between "$out/h.alive" "$out/w.start") ms, grandchild" \
        "$(ms_between "$out/bg.alive" "$out/w.start") ms before"
}

# pglock run stopped (Ctrl-Z) while it waits: the server grants the lock
# to the stopped waiter, then ends its silent session after the lease.  On
# resume the command must never run: one line, exit 69, nothing left.
@test "stopped while waiting, granted, past the lease, continued: the command never runs" {
    bg h run -d "$DB" "text:$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    env --default-signal=TSTP "$PGLOCK_BIN" run -d "$DB" --lease=5s "$K" -- touch "$out/w.ran" \
        >"$out/w.out" 2>"$out/w.err" &
    echo $! >"$out/w.pid"
    wait_until 10 waiting_on "$K"
    kill -TSTP "$(pid_of w)"
    w_stopped() { local s; proc_state "$(pid_of w)" s && [ "$s" = T ]; }
    wait_until 5 w_stopped
    # The holder goes; the server grants the lock to the stopped waiter,
    # then ends its session once the 5 s lease passes in silence (long
    # enough for a loaded machine to see the lock held first).
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    wait_until 10 held "$K"
    w_session_gone() { [ "$(q "select count(*) from pg_stat_activity where application_name = '$(run_app "$K")'")" -eq 0 ]; }
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
