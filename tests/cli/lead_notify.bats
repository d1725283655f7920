#!/usr/bin/env bats
# pglock lead under a service manager: systemd's notify protocol (READY=1,
# STATUS=, WATCHDOG=1 on $NOTIFY_SOCKET, received here by a socket of the
# test's own, as systemd would), --state-file for a readiness probe, and
# --lock-delay.  Leases are 3 s (T_c 2 s, T_h 500 ms, kill-after 500 ms).

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    if [ -n "${PGLOCK_TEST_PROXY_CTL:-}" ]; then
        proxy_cmd heal >/dev/null 2>&1 || true
    fi
    teardown_run
}

state_is() { [ "$(head -1 "$1" 2>/dev/null)" = "$2" ]; }

@test "READY=1 while another holds the key; STATUS names the holder, then the leader and its token; the state file says waiting, then leader, and is gone at exit" {
    bg a run -d "$DB" "$K" -c "$(stamp_job a)"
    wait_until 10 file_exists "$out/a.start"
    receiver n "@pglock-test-$K"
    NOTIFY_SOCKET="@pglock-test-$K" bg b lead -d "$DB" --lease=3s --state-file="$out/state" "$K" \
        -c "echo \"\$PGLOCK_FENCING_TOKEN \${NOTIFY_SOCKET-unset}\" >$out/b.token; exec sleep 60"
    wait_until 10 said n 'READY=1$'
    # ready while waiting: a holds the key, b queues behind it
    waiting_on "$K"
    [ ! -e "$out/b.token" ]
    said n 'STATUS=waiting; held by (.* \()?backend pid [0-9]+.*pglock run'
    state_is "$out/state" waiting
    grep -qE '^since=[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z$' "$out/state"
    run ! grep -q '^token=' "$out/state"
    [ "$(said_count n 'READY=1$')" = 1 ]
    # a goes: b leads
    touch "$out/a.release"
    finish a 10
    wait_until 10 file_exists "$out/b.token"
    local token sock
    read -r token sock <"$out/b.token"
    # the command does not see pglock's socket
    [ "$sock" = unset ]
    wait_until 5 said n "STATUS=leader since [0-9-]+T[0-9:]+Z, token $token\$"
    wait_until 5 state_is "$out/state" leader
    grep -qx "token=$token" "$out/state"
    # no WATCHDOG_USEC: no pings
    [ "$(said_count n 'WATCHDOG=1')" = 0 ]
    # no temporary file is left beside it
    [ "$(find "$out" -maxdepth 1 -name 'state*' | wc -l)" = 1 ]
    kill -TERM "$(pid_of b)"
    finish b 10
    [ "$(status_of b)" = 143 ]
    [ ! -e "$out/state" ]
    wait_until 5 not_held "$K"
}

@test "WATCHDOG=1 comes only when WATCHDOG_USEC asks and WATCHDOG_PID is pglock's or unset: while waiting (the server's answers) and while leader (the heartbeats)" {
    receiver w "$out/notify.sock"
    bg a run -d "$DB" "$K" -c "$(stamp_job a)"
    wait_until 10 file_exists "$out/a.start"
    # pings every 1 s while waiting (half of 2 s), from the server's answers
    NOTIFY_SOCKET=$out/notify.sock WATCHDOG_USEC=2000000 bg b lead -d "$DB" --lease=3s "$K" \
        -c "echo \"\${WATCHDOG_USEC-unset} \${WATCHDOG_PID-unset}\" >$out/b.env; exec sleep 60"
    wait_until 10 eval '[ "$(said_count w WATCHDOG=1)" -ge 2 ]'
    waiting_on "$K"
    [ ! -e "$out/b.env" ]
    touch "$out/a.release"
    finish a 10
    wait_until 10 file_exists "$out/b.env"
    [ "$(cat "$out/b.env")" = "unset unset" ]
    wait_until 10 said w 'STATUS=leader since'
    local n
    n=$(said_count w WATCHDOG=1)
    # heartbeats every 500 ms ping on
    wait_until 10 eval "[ \"\$(said_count w WATCHDOG=1)\" -ge $((n + 3)) ]"
    kill -TERM "$(pid_of b)"
    finish b 10

    # WATCHDOG_PID naming another process (inherited): no pings, through
    # a command that leads for 2 s (four heartbeats), then ends lead
    receiver x "$out/other.sock"
    NOTIFY_SOCKET=$out/other.sock WATCHDOG_USEC=2000000 WATCHDOG_PID=1 \
        bg c lead -d "$DB" --lease=3s "$K" -c "sleep 2"
    finish c 15
    [ "$(status_of c)" = 0 ]
    said x 'STATUS=leader since'
    [ "$(said_count x 'READY=1$')" = 1 ]
    [ "$(said_count x WATCHDOG=1)" = 0 ]
}

@test "WATCHDOG=1 stops while the lease is not confirmed (a cut network), the state file says waiting, and both come back once lead leads again" {
    need PGLOCK_TEST_PROXY
    receiver w "$out/notify.sock"
    NOTIFY_SOCKET=$out/notify.sock WATCHDOG_USEC=2000000 \
        bg a lead -d "$PGLOCK_TEST_PROXY" --lease=3s --state-file="$out/state" "$K" \
        -c "exec sleep 60"
    wait_until 10 said w 'STATUS=leader since'
    wait_until 5 state_is "$out/state" leader
    wait_until 10 eval '[ "$(said_count w WATCHDOG=1)" -ge 2 ]'
    proxy_cmd cut
    # the loss is declared at T_c; the reconnect through the cut proxy
    # then fails (its connect_timeout, 2 s) and says so
    wait_until 15 said w 'STATUS=leadership lost'
    # a probe sees no leader from the loss on (the file is rewritten
    # before the STATUS is sent; the failed reconnect's comes seconds later)
    state_is "$out/state" waiting
    wait_until 15 said w 'STATUS=could not connect'
    local lost retry
    lost=$(first_ms w 'STATUS=leadership lost')
    retry=$(first_ms w 'STATUS=could not connect')
    # not one ping from the loss to the failed reconnect
    [ "$(awk -v a="$lost" -v b="$retry" '$1 >= a && $1 <= b && $2 == "WATCHDOG=1"' "$out/w.log" | wc -l)" = 0 ]
    proxy_cmd heal
    wait_until 20 eval '[ "$(said_count w "STATUS=leader since")" -ge 2 ]'
    wait_until 5 state_is "$out/state" leader
    local n
    n=$(said_count w WATCHDOG=1)
    wait_until 10 eval "[ \"\$(said_count w WATCHDOG=1)\" -gt $n ]"
}

@test "--lock-delay: the new leader holds the lock, says so, and starts its command only after the delay" {
    receiver n "$out/notify.sock"
    bg a run -d "$DB" "$K" -c "$(stamp_job a)"
    wait_until 10 file_exists "$out/a.start"
    NOTIFY_SOCKET=$out/notify.sock bg b lead -v -d "$DB" --lease=3s --lock-delay=2s \
        --state-file="$out/state" "$K" -c "date +%s%N >$out/b.start; exec sleep 60"
    wait_until 10 said n 'READY=1$'
    touch "$out/a.release"
    finish a 10
    wait_until 10 said n 'STATUS=lock taken, token [0-9]+; the command starts after --lock-delay=2s$'
    local taken
    taken=$(first_ms n 'STATUS=lock taken')
    # b holds the key meanwhile, still "waiting" to a probe
    held "$K"
    state_is "$out/state" waiting
    wait_until 10 file_exists "$out/b.start"
    local started=$(($(cat "$out/b.start") / 1000000))
    [ $((started - taken)) -ge 2000 ]
    wait_until 5 state_is "$out/state" leader
    report "--lock-delay=2s: the command started $((started - taken)) ms after the lock"
    kill -TERM "$(pid_of b)"
    finish b 10
    [ "$(status_of b)" = 143 ]
}

@test "--lock-delay: a SIGTERM during the delay leaves nothing running and nothing locked" {
    receiver n "$out/notify.sock"
    NOTIFY_SOCKET=$out/notify.sock bg b lead -d "$DB" --lease=3s --lock-delay=1h \
        --state-file="$out/state" "$K" -c "touch $out/b.start; exec sleep 60"
    wait_until 10 said n 'STATUS=lock taken'
    held "$K"
    kill -TERM "$(pid_of b)"
    finish b 10
    [ "$(status_of b)" = 143 ]
    not_held "$K"
    [ ! -e "$out/b.start" ]
    [ ! -e "$out/state" ]
}

@test "--lock-delay: leadership lost during the delay (the backend terminated): the command never starts there, the next leader's does" {
    receiver n "$out/notify.sock"
    NOTIFY_SOCKET=$out/notify.sock bg b lead -v -d "$DB" --lease=3s --lock-delay=1h "$K" \
        -c "touch $out/b.start; exec sleep 60"
    wait_until 10 said n 'STATUS=lock taken'
    bg c lead -d "$DB" --lease=3s "$K" -c "touch $out/c.start; exec sleep 60"
    wait_until 10 waiting_on "$K"
    # end b's lock session, as pglock terminate would
    q "select pg_terminate_backend(pid) from pg_locks where locktype = 'advisory'
         and granted and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")" >/dev/null
    wait_until 10 file_exists "$out/c.start"
    wait_until 10 said n 'STATUS=leadership lost'
    [ ! -e "$out/b.start" ]
    wait_until 10 grep -q 'leadership lost during --lock-delay' "$out/b.err"
    # b contends again behind c
    alive "$(pid_of b)"
    wait_until 10 waiting_on "$K"
    [ ! -e "$out/b.start" ]
}

@test "--state-file that cannot be written and a bad --lock-delay: one line, 64, nothing locked" {
    run -64 "$PGLOCK_BIN" lead -d "$DB" --state-file="$out/no/such/dir/state" "$K" -- true
    [ "$output" = "pglock: error: could not write state file \"$out/no/such/dir/state\": No such file or directory" ]
    run -64 "$PGLOCK_BIN" lead -d "$DB" --lock-delay=soon "$K" -- true
    [[ "${lines[0]}" == "pglock: error: invalid value for --lock-delay: "* ]]
    run -64 "$PGLOCK_BIN" lead -d "$DB" --state-file= "$K" -- true
    [[ "${lines[0]}" == "pglock: error: --state-file needs a path" ]]
    not_held "$K"
}

@test "through PgBouncer (the xact lifetime): the wait is taken in slices that ping the watchdog, and the waiter leads when the holder goes" {
    need PGLOCK_TEST_POOLER
    receiver w "$out/notify.sock"
    bg a run -d "$PGLOCK_TEST_POOLER" "$K" -c "$(stamp_job a)"
    wait_until 10 file_exists "$out/a.start"
    NOTIFY_SOCKET=$out/notify.sock WATCHDOG_USEC=1000000 bg b lead -d "$PGLOCK_TEST_POOLER" \
        --lease=3s --state-file="$out/state" "$K" -c "touch $out/b.start; exec sleep 60"
    wait_until 10 eval '[ "$(said_count w WATCHDOG=1)" -ge 3 ]'
    [ ! -e "$out/b.start" ]
    state_is "$out/state" waiting
    touch "$out/a.release"
    finish a 10
    wait_until 10 file_exists "$out/b.start"
    wait_until 5 state_is "$out/state" leader
    # one holder (b), nobody waiting: every slice's wait went with it
    [ "$(advisory_count "$(name_sql "$K")" t)" = 1 ]
    [ "$(advisory_count "$(name_sql "$K")" f)" = 0 ]
    kill -TERM "$(pid_of b)"
    finish b 10
    [ "$(status_of b)" = 143 ]
}

@test "a server that is down: READY=1 all the same (systemctl start returns), STATUS says why, the state file says waiting" {
    receiver n "$out/notify.sock"
    NOTIFY_SOCKET=$out/notify.sock bg b lead -h /nonexistent-socket-dir -p 1 --lease=3s \
        --state-file="$out/state" "$K" -- true
    wait_until 10 said n 'READY=1$'
    said n 'STATUS=could not connect: .*; retrying$'
    state_is "$out/state" waiting
    # it keeps retrying: READY=1 is said once
    wait_until 10 eval '[ "$(said_count n "STATUS=could not connect")" -ge 2 ]'
    [ "$(said_count n 'READY=1$')" = 1 ]
    kill -TERM "$(pid_of b)"
    finish b 10
    [ ! -e "$out/state" ]
    said n 'STOPPING=1$'
}
