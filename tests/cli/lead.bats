#!/usr/bin/env bats
# pglock lead: three contenders for one key.  Exactly one runs its job; a
# leader that dies, loses its network or its server is replaced, and its
# job is gone before the next leader's starts (checked on /proc, and by
# timestamps from both jobs); fencing tokens grow with each leadership.
# Leases are 3 s (T_c 2 s, T_h 500 ms, kill-after 500 ms).

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    if [ -n "${PGLOCK_TEST_PROXY_CTL:-}" ]; then
        proxy_cmd heal >/dev/null 2>&1 || true
    fi
    # a test that froze a backend thaws it
    if [ -e "$out/frozen.backend" ]; then kill -CONT "$(cat "$out/frozen.backend")" 2>/dev/null || true; fi
    teardown_run
}

# leader_job NAME: a job that records, when it starts, its pid, the time
# and its fencing token (in $out/leaders, one line per leadership), and
# whether any other leader's job was still running then (a zombie does not
# run); then it runs, stamping $out/NAME.alive every 20 ms.
leader_job() {
    local n=$1
    printf '%s' "now=\$(date +%s%N)
      for f in $out/*.jobpid; do
        [ -e \"\$f\" ] || continue
        p=\$(cat \$f); s=\$(cat /proc/\$p/stat 2>/dev/null) || continue
        s=\${s##*) }
        [ \"\${s%% *}\" = Z ] || echo \"$n saw \$p running\" >> $out/overlap
      done
      echo \$\$ > $out/$n.jobpid
      echo \"\$now $n \$PGLOCK_FENCING_TOKEN \$PGLOCK_LEADER\" >> $out/leaders
      echo \$now > $out/$n.start
      while :; do
        date +%s%N > $out/$n.alive.tmp && mv $out/$n.alive.tmp $out/$n.alive
        sleep 0.02
      done"
}

# Tokens of successive leaderships strictly increase; every job saw
# PGLOCK_LEADER=1.
tokens_increase() {
    awk '$4 != 1 { exit 1 } NR > 1 && $3 <= prev { exit 1 } { prev = $3 }' \
        "$out/leaders"
}
exactly_one_job() { [ "$(running_jobs)" -eq 1 ]; }
# advisory locks on K: granted (t) or waiting (f)
on_key() { advisory_count "$(name_sql "$K")" "$1"; }
one_holder_two_waiters() { [ "$(on_key t)" -eq 1 ] && [ "$(on_key f)" -eq 2 ]; }
one_holder_one_waiter() { [ "$(on_key t)" -eq 1 ] && [ "$(on_key f)" -eq 1 ]; }

start_three() {
    local n
    for n in a b c; do
        bg "$n" lead -v -d "$DB" --lease=3s "$K" -c "$(leader_job "$n")"
    done
}

@test "one leader of three; its pglock SIGKILLed: its job is gone before the next leader's starts" {
    start_three
    wait_until 10 leaders_at_least 1
    wait_until 10 one_holder_two_waiters
    [ "$(running_jobs)" -eq 1 ]
    local first job
    first=$(last_leader)
    job=$(cat "$out/$first.jobpid")
    date +%s%N >"$out/kill"
    kill -KILL "$(pid_of "$first")"
    wait_until 10 leaders_at_least 2
    gone "$job"
    [ ! -e "$out/overlap" ]
    [ "$(last_leader)" != "$first" ]
    tokens_increase
    # Two contenders are left: one leads, the other waits.
    wait_until 10 one_holder_one_waiter
    [ "$(running_jobs)" -eq 1 ]
    local second
    second=$(last_leader)
    report "SIGKILL -> new leader's job started after $(ms_between "$out/kill" "$out/$second.start") ms;" \
        "old job last ran $(ms_between "$out/$first.alive" "$out/$second.start") ms before"
}

@test "a server restart: afterwards exactly one leader, with a higher token" {
    need PGLOCK_TEST_HARNESS
    start_three
    wait_until 10 leaders_at_least 1
    wait_until 10 one_holder_two_waiters
    local first
    first=$(last_leader)
    date +%s%N >"$out/restart"
    "$PGLOCK_TEST_HARNESS" restart-primary
    # The leader's session is gone with the server: it stops its job and
    # all three contend again; one of them leads.
    wait_until 20 leaders_at_least 2
    wait_until 20 one_holder_two_waiters
    exactly_one_job
    [ ! -e "$out/overlap" ]
    tokens_increase
    local second
    second=$(last_leader)
    report "restart -> a leader's job (${second}, was ${first}) started after" \
        "$(ms_between "$out/restart" "$out/$second.start") ms"
}

@test "a cut network to the leader: its job stops before the new leader's starts" {
    need PGLOCK_TEST_PROXY
    bg a lead -v -d "$PGLOCK_TEST_PROXY" --lease=3s "$K" -c "$(leader_job a)"
    wait_until 10 leaders_at_least 1
    bg b lead -v -d "$DB" --lease=3s "$K" -c "$(leader_job b)"
    bg c lead -v -d "$DB" --lease=3s "$K" -c "$(leader_job c)"
    wait_until 10 one_holder_two_waiters
    [ "$(last_leader)" = a ]
    local job
    job=$(cat "$out/a.jobpid")
    date +%s%N >"$out/cut"
    proxy_cmd cut
    wait_until 15 leaders_at_least 2
    gone "$job"
    [ ! -e "$out/overlap" ]
    local second
    second=$(last_leader)
    [ "$second" != a ]
    # a's job last ran before the new leader's started
    [ "$(cat "$out/a.alive")" -lt "$(cat "$out/$second.start")" ]
    tokens_increase
    grep -q "leadership lost" "$out/a.err"
    report "cut -> old job last ran at +$(ms_between "$out/cut" "$out/a.alive") ms;" \
        "new leader's job started at +$(ms_between "$out/cut" "$out/$second.start") ms (lease 3000 ms)"
    # a keeps contending (it never exits because the server went away)
    alive "$(pid_of a)"
}

# A frozen server (run_wait_outage.bats says more): the follower's
# backend is stopped while it waits; the wait in slices of T_s ends, and
# lead contends again on a new connection.
@test "a follower whose backend freezes while waiting contends again, and leads once the leader goes" {
    bg h run -d "$DB" --lease=3s "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg f lead -v -d "$DB" --lease=3s "$K" -c "$(leader_job f)"
    wait_until 10 waiting_on "$K"
    local frozen
    frozen=$(q "select pid from pg_locks where locktype = 'advisory' and not granted
        and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")")
    echo "$frozen" >"$out/frozen.backend"
    kill -STOP "$frozen"
    lost() { grep -q 'lost the connection while waiting' "$out/f.err"; }
    wait_until 30 lost
    kill -CONT "$frozen"
    wait_until 20 gone "$frozen"
    touch "$out/h.release"
    finish h 15
    [ "$(status_of h)" = 0 ]
    wait_until 30 file_exists "$out/f.start"
    [ ! -e "$out/overlap" ]
    kill -TERM "$(pid_of f)"
    finish f 10
}

@test "--restart runs the command again while leader; without it lead exits with the command's status" {
    bg r lead --lease=3s --restart=50ms "$K" -c "echo \$PGLOCK_FENCING_TOKEN >> $out/runs; exit 3"
    wait_until 10 eval '[ -e "$out/runs" ] && [ "$(wc -l < "$out/runs")" -ge 3 ]'
    # every run under the same leadership: the same token
    [ "$(sort -u "$out/runs" | wc -l)" -eq 1 ]
    held "$K"
    kill -TERM "$(pid_of r)"
    finish r 10
    [ "$(status_of r)" = 143 ]
    wait_until 5 not_held "$K"

    bg once lead --lease=3s "$K" -c 'test "$PGLOCK_LEADER" = 1 && exit 7'
    finish once 10
    [ "$(status_of once)" = 7 ]
    not_held "$K"
}

@test "lead refuses --try, --wait and --min-hold, and bad options, with 64" {
    run -64 "$PGLOCK_BIN" lead --try "$K" -- true
    [[ "$output" == *"--try"* ]]
    run -64 "$PGLOCK_BIN" lead --restart=soon "$K" -- true
    run -64 "$PGLOCK_BIN" lead "$K"
    run -0 "$PGLOCK_BIN" lead --help
    [[ "$output" == *"--restart"* ]]
}

@test "a leader stopped by SIGTERM stops its job and frees the lock" {
    bg a lead --lease=3s "$K" -c "$(leader_job a)"
    wait_until 10 leaders_at_least 1
    local job
    job=$(cat "$out/a.jobpid")
    kill -TERM "$(pid_of a)"
    finish a 10
    [ "$(status_of a)" = 143 ]
    gone "$job"
    not_held "$K"
}
