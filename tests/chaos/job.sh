#!/usr/bin/env bash
# job.sh HOST MODE BEATS IGNORE_TERM [SUDO] — the command every chaos host
# runs under pglock.  It appends to $CHAOS_DIR/jobs.log one line per event:
#
#   TIME_US HOST MODE TOKEN PID EVENT [DETAIL...]
#
# EVENT is start, beat (every 50 ms) or end.  A start line names the
# pglock that runs it (pglock=PID: token reuse by lead) and every earlier
# job still alive in /proc at this moment (alive=PID,...); later beats
# repeat alive= until those are gone.  That is how the checker sees a job
# that outlived its lock even while it writes nothing (stopped, killed
# late).  No forks in the loop: timestamps come from $EPOCHREALTIME and
# the 50 ms pause is a read with a timeout on a FIFO nobody writes.
#
# SUDO (a setuid root program, tests/tools/become_root.c): a job of an
# ordinary user that runs the rest of itself through it, as root, as a
# job that calls sudo does.  pglock's job runs with no_new_privs, so the
# step is refused (become_root exits 1): the job says sudo=refused and
# goes on as itself.  Had it become root (sudo=root), pglock could not
# signal it, and the checker would see it outlive the lock.
set -u
host=$1 mode=$2 beats=$3 ignore_term=$4 sudo_via=${5:-}
log=$CHAOS_DIR/jobs.log
token=${PGLOCK_FENCING_TOKEN:--}

line() {
    printf '%s %s %s %s %s %s\n' "${EPOCHREALTIME/./}" "$host" "$mode" "$token" "$$" "$*" >>"$log"
}

# Prints "STATE STARTTIME" of a pid from /proc/PID/stat (fails if gone).
proc_stat() {
    local s
    read -r s 2>/dev/null <"/proc/$1/stat" || return 1
    s=${s##*) }
    local -a f
    read -r -a f <<<"$s"
    # After "comm) ": f[0] is the state, f[19] the start time (field 22).
    echo "${f[0]} ${f[19]}"
}

# Earlier jobs that still exist (not zombies).  $CHAOS_DIR/live/PID holds
# each job's start time, so a reused pid is not mistaken for it.
still_alive() {
    local f p want st out=
    for f in "$@"; do
        p=${f##*/}
        [ -f "$CHAOS_DIR/live/$p" ] || continue
        read -r want <"$CHAOS_DIR/live/$p" || continue
        if ! st=$(proc_stat "$p") || [ "${st%% *}" = Z ] || [ "${st#* }" != "$want" ]; then
            rm -f "$CHAOS_DIR/live/$p"      # gone: nobody need look again
            continue
        fi
        out+=${out:+,}$p
    done
    echo "$out"
}

# Our parent is pglock's watchdog, whose parent is pglock (a sudo job's
# root half is told by its first half).
pglock=${CHAOS_PGLOCK:--}
[ "$pglock" != - ] || { read -r s 2>/dev/null <"/proc/$PPID/stat" && s=${s##*) } && read -r _ pglock _ <<<"$s"; }
sudo=
if [ -n "$sudo_via" ]; then
    if [ "$EUID" = 0 ]; then
        sudo=" sudo=root"
    else
        CHAOS_PGLOCK=$pglock "$sudo_via" "$0" "$@"
        rc=$?
        [ "$rc" = 1 ] || exit "$rc"     # it ran as root (to its end)
        sudo=" sudo=refused"
    fi
fi
me=$(proc_stat $$) || exit 70
alive=$(still_alive "$CHAOS_DIR"/live/*)
# shellcheck disable=SC2086  # $sudo: one word or none
line start "pglock=$pglock" "ignore_term=$ignore_term" $sudo "alive=${alive:--}"
echo "${me#* }" >"$CHAOS_DIR/live/$$"
# The faults' usual target (renamed into place: another user's file may
# be there).
echo "$host $pglock" >"$CHAOS_DIR/holder.$$" && mv -f "$CHAOS_DIR/holder.$$" "$CHAOS_DIR/holder"

if [ "$ignore_term" = 1 ]; then
    trap '' TERM            # pglock must SIGKILL us after kill-after
else
    trap 'line end term; exit 143' TERM
fi
exec 9<>"$CHAOS_DIR/sleep.fifo"
for ((i = 0; i < beats; i++)); do
    read -r -t 0.05 -u 9 _
    if [ -n "$alive" ]; then
        IFS=, read -r -a was <<<"$alive"
        alive=$(for p in "${was[@]}"; do echo "$CHAOS_DIR/live/$p"; done | { mapfile -t a; still_alive "${a[@]}"; })
    fi
    line beat "alive=${alive:--}"
done
line end ok
