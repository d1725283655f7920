#!/usr/bin/env bats
# pglock run: a signal to pglock's whole process group or session — the
# forms a user reaches for (timeout(1), kill -9 -PGID, kill -STOP -PGID, a
# shell's kill %1, a systemd-style stop) — never leaves the job running
# without the lock.  Each scene has a second holder waiting; its job
# checks in /proc that none of the first job's processes still runs when
# it starts, and the timestamps of both must not overlap.
# Leases are 3-4 s (T_c = 2/3 of the lease).

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    local f
    for f in "$out"/*.timeout; do
        [ -e "$f" ] && kill -ALRM "$(cat "$f")" 2>/dev/null
    done
    for f in "$out"/*.jobpid "$out"/*.gpid; do
        [ -e "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    for f in "$out"/*.pgid; do
        [ -e "$f" ] && kill -CONT -- "-$(cat "$f")" 2>/dev/null
        [ -e "$f" ] && kill -KILL -- "-$(cat "$f")" 2>/dev/null
    done
    teardown_run
}

# descendants PID: every process below PID (by parent pids in /proc).
descendants() {
    local c
    for c in $(cat /proc/"$1"/task/*/children 2>/dev/null); do
        echo "$c"
        descendants "$c"
    done
}

# A job that ignores SIGTERM and starts a grandchild in a session of its
# own (no group signal reaches it) that ignores SIGTERM too; both stamp
# $out/NAME.alive / $out/NAME.galive every 20 ms.  With a second argument
# "dies-on-term", only the grandchild ignores SIGTERM.
stubborn_job() {
    local n=$1
    [ "${2:-}" = dies-on-term ] || printf '%s\n' "trap '' TERM"
    printf '%s' "setsid sh -c 'trap \"\" TERM; echo \$\$ > $out/$n.gpid; while :; do date +%s%N > $out/$n.galive.tmp && mv $out/$n.galive.tmp $out/$n.galive; sleep 0.02; done' &
      $(stamp_job "$n")"
}

# waiter NAME: a second pglock run waiting for $K whose job records any
# still-running process of h's job (h.jobpid, h.gpid) when it starts.
waiter() {
    bg "$1" run -d "$DB" --lease=4s "$K" -c "$(check_job "$1" "$out/h.jobpid" "$out/h.gpid")"
    wait_until 10 waiting_on "$K"
}

# no_overlap WAITER: the waiter ran, found nothing of h's job running, and
# h's job (and grandchild, if any) last ran before the waiter started.
no_overlap() {
    finish "$1" 20
    [ "$(status_of "$1")" = 0 ]
    [ ! -e "$out/$1.overlap" ] || { echo "still running at the waiter's start: $(cat "$out/$1.overlap")"; return 1; }
    gone "$(cat "$out/h.jobpid")"
    [ "$(cat "$out/h.alive")" -lt "$(cat "$out/$1.start")" ]
    if [ -e "$out/h.gpid" ]; then
        gone "$(cat "$out/h.gpid")"
        [ "$(cat "$out/h.galive")" -lt "$(cat "$out/$1.start")" ]
    fi
}

# started_setsid NAME ARGS...: pglock ARGS in a session (and process group)
# of its own, as under `setsid`; its pid is the group's id.
started_setsid() {
    local name=$1
    shift
    setsid env --default-signal=INT,QUIT "$PGLOCK_BIN" "$@" >"$out/$name.out" 2>"$out/$name.err" &
    echo $! >"$out/$name.pid"
    echo $! >"$out/$name.pgid"
}

# timed_out NAME [TIMEOUT-OPTION...] COMMAND...: COMMAND under timeout(1)
# in the background, its output in $out/NAME.out / .err, timeout's pid in
# $out/NAME.timeout; timeout's exit status goes to $out/NAME.status.  (60 s
# bounds a test that fails before time_out; teardown times it out too.)
# time_out NAME: runs that timeout out now, the very path its timer takes
# (GNU timeout's timer signal is SIGALRM), then waits for the status.  So
# the test waits for its scene to be set (the waiter queued), not for a
# fixed 3 s that, on a loaded machine, may come before it.
timed_out() {
    local name=$1
    shift
    local -a opts=()
    while [ "${1:0:1}" = - ]; do opts+=("$1" "$2"); shift 2; done
    (st=0
     timeout "${opts[@]}" 60 "$@" >"$out/$name.out" 2>"$out/$name.err" &
     echo $! >"$out/$name.timeout"
     wait $! || st=$?
     echo $st >"$out/$name.status") &
    wait_until 10 file_exists "$out/$name.timeout"
}
time_out() {
    kill -ALRM "$(cat "$out/$1.timeout")"
    wait_until 10 file_exists "$out/$1.status"
    rm "$out/$1.timeout" # its pid may serve another process now
}

@test "timeout -s KILL: the job and its setsid grandchild die with pglock's group, before the next holder starts" {
    timed_out h -s KILL "$PGLOCK_BIN" run -d "$DB" --lease=4s --kill-after=300ms "$K" -c "$(stubborn_job h)"
    wait_until 10 file_exists "$out/h.galive"
    waiter w
    time_out h
    [ "$(cat "$out/h.status")" = 137 ]
    no_overlap w
    report "timeout -s KILL -> waiter started $(ms_between "$out/h.alive" "$out/w.start") ms after the job last ran"
}

@test "plain timeout (SIGTERM to the group): the job is stopped, the lock released, then the next holder starts" {
    timed_out h "$PGLOCK_BIN" run -d "$DB" --lease=4s --kill-after=300ms "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.alive"
    waiter w
    time_out h
    # timeout's own status for a command it had to stop
    [ "$(cat "$out/h.status")" = 124 ]
    no_overlap w
}

@test "kill -9 -PGID: the job and its setsid grandchild are gone before the next holder starts" {
    started_setsid h run -d "$DB" --lease=4s --kill-after=300ms "$K" -c "$(stubborn_job h)"
    wait_until 10 file_exists "$out/h.galive"
    waiter w
    date +%s%N >"$out/killed"
    kill -KILL -- "-$(cat "$out/h.pgid")"
    no_overlap w
    report "kill -9 -PGID -> waiter's job started at +$(ms_between "$out/killed" "$out/w.start") ms"
}

@test "kill -STOP -PGID past the lease: the job is stopped before the server frees the lock; SIGCONT then exits 74" {
    started_setsid h run -d "$DB" --lease=3s --kill-after=300ms "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.alive"
    waiter w
    date +%s%N >"$out/stopped"
    kill -STOP -- "-$(cat "$out/h.pgid")"
    # The server frees the lock once the stopped pglock is silent for the
    # lease; the waiter then runs its job.
    no_overlap w
    kill -CONT -- "-$(cat "$out/h.pgid")"
    finish h 10
    [ "$(status_of h)" = 74 ]
    report "STOP -> job last ran at +$(ms_between "$out/stopped" "$out/h.alive") ms," \
        "the waiter's started at +$(ms_between "$out/stopped" "$out/w.start") ms (lease 3000 ms)"
}

@test "a shell with job control: kill -9 %1 and kill %1 end the job too" {
    local sig
    for sig in KILL TERM; do
        rm -f "$out"/h.* "$out"/w.* "$out/go"
        # a forwarded SIGTERM is the job's to obey: this one does, and its
        # grandchild, which the signal does not reach, is killed after it
        stubborn_job h "$([ $sig = TERM ] && echo dies-on-term)" >"$out/job.sh"
        bash -c "set -m
            '$PGLOCK_BIN' run -d '$DB' --lease=4s --kill-after=300ms '$K' -- sh '$out/job.sh' 2>'$out/h.err' &
            pid=\$!
            while [ ! -e '$out/go' ]; do sleep 0.05; done
            kill -$sig %1
            st=0
            wait \$pid || st=\$?
            echo \$st > '$out/h.status.tmp' && mv '$out/h.status.tmp' '$out/h.status'" 2>"$out/shell.err" &
        wait_until 10 file_exists "$out/h.galive"
        waiter w
        touch "$out/go"
        wait_until 10 file_exists "$out/h.status" || { cat "$out/shell.err"; false; }
        [ "$(cat "$out/h.status")" = "$([ $sig = KILL ] && echo 137 || echo 143)" ]
        no_overlap w
    done
}

@test "a systemd-style stop (SIGTERM to pglock, then SIGKILL to every process): nothing of the job survives" {
    started_setsid h run -d "$DB" --lease=4s --kill-after=600ms "$K" -c "$(stubborn_job h)"
    wait_until 10 file_exists "$out/h.galive"
    waiter w
    kill -TERM "$(pid_of h)"
    # every process of the unit: pglock, its watchdog, the job, the
    # grandchild (systemd would find them in the cgroup)
    local all
    all="$(pid_of h) $(descendants "$(pid_of h)") $(cat "$out/h.gpid")"
    # shellcheck disable=SC2086 # a list of pids
    kill -KILL $all 2>/dev/null || true
    no_overlap w
    local p
    for p in $all; do gone "$p"; done
}

@test "Ctrl-Z, then someone continues a grandchild: it is killed at the client deadline, before the lock can pass" {
    bg h run -v -d "$DB" --lease=3s --kill-after=300ms "$K" -c "
        sh -c 'echo \$\$ > $out/h.gpid; while :; do date +%s%N > $out/h.galive.tmp && mv $out/h.galive.tmp $out/h.galive; sleep 0.02; done' &
        $(stamp_job h)"
    wait_until 10 file_exists "$out/h.galive"
    waiter w
    kill -TSTP "$(pid_of h)"
    local g
    g=$(cat "$out/h.gpid")
    wait_until 5 stopped "$g"
    kill -CONT "$g"
    no_overlap w
    kill -CONT "$(pid_of h)"
    finish h 10
    [ "$(status_of h)" = 74 ]
}

@test "--foreground: a group SIGSTOP past the lease, then SIGCONT: the job is gone before the next holder starts" {
    local how
    for how in STOP TSTP; do
        rm -f "$out"/h.* "$out"/w.* "$out/go"
        # A job-control shell starts pglock in a process group of its own
        # and stays, as an interactive shell does (without it, the group
        # would be orphaned once the job is gone, and the kernel would
        # SIGHUP the stopped pglock).
        bash -c "set -m
            '$PGLOCK_BIN' run -d '$DB' --foreground --lease=3s --kill-after=300ms '$K' -c '$(stamp_job h)' 2>'$out/h.err' &
            pid=\$!
            echo \$pid > '$out/h.pgid'
            while [ ! -e '$out/go' ]; do sleep 0.05; done
            st=0
            wait \$pid || st=\$?
            echo \$st > '$out/h.status.tmp' && mv '$out/h.status.tmp' '$out/h.status'" 2>"$out/shell.err" &
        wait_until 10 file_exists "$out/h.alive"
        waiter w
        date +%s%N >"$out/h.stopped"
        # STOP: kill -STOP -PGID; TSTP: what a terminal's Ctrl-Z sends
        kill -$how -- "-$(cat "$out/h.pgid")"
        no_overlap w
        # fg: the shell continues the whole group at once
        kill -CONT -- "-$(cat "$out/h.pgid")"
        touch "$out/go"
        wait_until 10 file_exists "$out/h.status"
        [ "$(cat "$out/h.status")" = 74 ] ||
            { echo "SIG$how: exit status $(cat "$out/h.status"), not 74"; cat "$out/h.err" "$out/shell.err"; false; }
        report "--foreground, SIG$how for longer than the lease: the job last ran at" \
            "+$(ms_between "$out/h.stopped" "$out/h.alive") ms, the next holder's started" \
            "$(ms_between "$out/h.alive" "$out/w.start") ms after it"
    done
}
