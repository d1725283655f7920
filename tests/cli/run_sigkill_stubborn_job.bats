#!/usr/bin/env bats
# pglock SIGKILLed while its job ignores SIGTERM, and so does a background
# grandchild (in its own session, so no process-group signal reaches it):
# both are still gone — per /proc, zombies do not count — before a waiting
# pglock run starts its command; the job's last sign of life comes before
# the waiter's start (timestamps from both).

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    local f
    for f in "$out"/*.jobpid "$out"/*.bgpid; do
        [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    teardown_run
}

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
