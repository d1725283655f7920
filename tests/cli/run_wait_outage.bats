#!/usr/bin/env bats
# pglock run --wait=DURATION rides out a short outage: a connection lost
# while waiting reconnects with backoff and waits again within the same
# budget, saying so once on stderr.  The command never runs without the
# lock, the budget is never exceeded, and a standby with no primary is
# still 69 at once.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() {
    teardown_run
    # a test that stopped the primary starts it again
    if [ -e "$out/primary.stopped" ]; then "$PGLOCK_TEST_HARNESS" start-primary >/dev/null; fi
    # and one that froze a backend thaws it
    if [ -e "$out/frozen.backend" ]; then kill -CONT "$(cat "$out/frozen.backend")" 2>/dev/null || true; fi
}

# The job: checks that the holder's job is gone, then records how many
# advisory locks its own pglock backend holds granted on $K.
held_by_job() {
    printf '%s; %s' "$(check_job w "$out/h.jobpid")" \
        "psql -X -A -t -d \"\$PGLOCK_TEST_PRIMARY\" -c \"select count(*) from pg_locks where
           locktype = 'advisory' and granted and pid = \$PGLOCK_BACKEND_PID and
           ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")\" > $out/w.held"
}

# ran_after_reconnect: w exited 0, having run holding the lock on its new
# connection, after the holder's job, and said the reconnect once.
ran_after_reconnect() {
    finish w 30
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    [ "$(cat "$out/w.held")" = 1 ]
    [ ! -e "$out/w.overlap" ]
    [ "$(grep -c "^pglock: warning: connection lost while waiting for lock \"$K\": .*; reconnecting within --wait$" "$out/w.err")" = 1 ]
}

@test "a server restart while waiting: reconnects, says so once, waits again and runs with the lock" {
    need PGLOCK_TEST_HARNESS
    bg h run -d "$DB" --lease=3s "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=3s --wait=60s "$K" -c "$(held_by_job)"
    wait_until 10 waiting_on "$K"
    "$PGLOCK_TEST_HARNESS" restart-primary >/dev/null
    finish h 15
    [ "$(status_of h)" = 74 ]
    ran_after_reconnect
    # and said nothing else
    [ "$(wc -l <"$out/w.err")" = 1 ]
}

# A frozen server: its processes stopped, its kernel still answering TCP
# (a SIGSTOPped primary, or one stuck on its disk), so keepalives and
# ACKs keep coming and no socket error ends a wait on it.  Here only the
# waiter's backend is stopped: the library waits in slices of T_s, each
# ended by the server's lock_timeout, and a slice with no answer (then a
# cancel with none) is a lost connection, which --wait rides out.
@test "a frozen backend while waiting: the unanswered wait is a lost connection after about T_s; reconnects and runs with the lock" {
    bg h run -d "$DB" --lease=3s "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=3s --wait=60s "$K" -c "$(held_by_job)"
    wait_until 10 waiting_on "$K"
    local frozen t0
    frozen=$(q "select pid from pg_locks where locktype = 'advisory' and not granted
        and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")")
    echo "$frozen" >"$out/frozen.backend"
    t0=$(now_ms)
    kill -STOP "$frozen"
    # T_s 3 s + the client deadline's grace + the cancel's 2 s: about 5 s;
    # the wait itself (60 s) is not what ends it.
    lost() { grep -q 'connection lost while waiting' "$out/w.err"; }
    wait_until 30 lost
    report "frozen backend -> reconnect said after $(($(now_ms) - t0)) ms (T_s 3000 ms, --wait 60 s)"
    alive "$(pid_of w)"
    # Thawed, the old backend finds the cancel and its client gone, and
    # leaves the queue before the holder lets go.
    kill -CONT "$frozen"
    wait_until 20 gone "$frozen"
    touch "$out/h.release"
    finish h 15
    [ "$(status_of h)" = 0 ]
    ran_after_reconnect
}

@test "a server not up yet when run starts: --wait waits for it, says so once, and runs with the lock" {
    need PGLOCK_TEST_HARNESS
    touch "$out/primary.stopped"
    "$PGLOCK_TEST_HARNESS" stop-primary fast >/dev/null
    bg w run -d "$DB" --lease=3s --wait=60s "$K" -c "$(held_by_job)"
    said() { grep -q 'retrying within --wait' "$out/w.err"; }
    wait_until 20 said
    alive "$(pid_of w)"
    [ ! -e "$out/w.held" ]
    "$PGLOCK_TEST_HARNESS" start-primary >/dev/null
    rm "$out/primary.stopped"
    finish w 40
    cat "$out/w.err"
    [ "$(status_of w)" = 0 ]
    [ "$(cat "$out/w.held")" = 1 ]
    [ "$(grep -c '^pglock: warning: could not connect: .*; retrying within --wait$' "$out/w.err")" = 1 ]
    [ "$(wc -l <"$out/w.err")" = 1 ]
}

# The other ways a server is not there yet: nothing listens on the TCP
# port (connection refused); without --wait (or with --try) 69 at once.
@test "connection refused: --wait retries within its budget, said once, then 69; --try 69 at once, no retry" {
    need PGLOCK_TEST_DOWN
    run -69 --separate-stderr timeout 30 "$PGLOCK_BIN" run --wait=3s -d "$PGLOCK_TEST_DOWN" "$K" -- touch "$out/ran"
    [ "$(grep -c '^pglock: warning: could not connect: .*refused.*; retrying within --wait$' <<<"$stderr")" = 1 ]
    [ "$(grep -c '^pglock: error: ' <<<"$stderr")" = 1 ]
    run -69 --separate-stderr timeout 30 "$PGLOCK_BIN" run --try -d "$PGLOCK_TEST_DOWN" "$K" -- touch "$out/ran"
    [[ "$stderr" != *retrying* ]]
    [ ! -e "$out/ran" ]
}

@test "what waiting cannot fix is 69 at once even with --wait: no database, no role, a refused password" {
    need PGLOCK_TEST_PW_CONNINFO
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=60s -d "$DB dbname=pglock_no_such_db" "$K" -- touch "$out/ran"
    [[ "$output" == *'database "pglock_no_such_db" does not exist'* ]]
    [[ "$output" != *retrying* ]]
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=60s -d "$DB user=pglock_no_such_role" "$K" -- touch "$out/ran"
    [[ "$output" == *'role "pglock_no_such_role" does not exist'* ]]
    [[ "$output" != *retrying* ]]
    PGPASSWORD=wrong run -69 timeout 30 "$PGLOCK_BIN" run --wait=60s -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
    [[ "$output" == *'password authentication failed'* ]]
    [[ "$output" != *retrying* ]]
    [ ! -e "$out/ran" ]
}

# PgBouncer says every refusal as 08P01, its own and the server's it
# relays: what it says is read.
@test "through PgBouncer too: no database, a role it refuses: 69 at once even with --wait" {
    need PGLOCK_TEST_POOLER
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=60s -d "$PGLOCK_TEST_POOLER dbname=pglock_no_such_db" "$K" -- touch "$out/ran"
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*database "pglock_no_such_db" does not exist$')" -eq 1 ]
    [[ "$output" != *retrying* ]]
    # a role not in its auth_file: refused as a password is
    run -69 timeout 30 "$PGLOCK_BIN" run --wait=60s -d "$PGLOCK_TEST_POOLER user=pglock_no_such_role" "$K" -- touch "$out/ran"
    [[ "$output" == *'authentication failed'* ]]
    [[ "$output" != *retrying* ]]
    [ ! -e "$out/ran" ]
}

@test "the server stays down past --wait: 69, the command not run, the budget not exceeded" {
    need PGLOCK_TEST_HARNESS
    bg h run -d "$DB" --lease=3s "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    local start
    start=$(now_ms)
    bg w run -d "$DB" --lease=3s --wait=5s "$K" -- touch "$out/w.ran"
    wait_until 10 waiting_on "$K"
    touch "$out/primary.stopped"
    "$PGLOCK_TEST_HARNESS" stop-primary fast >/dev/null
    finish w 20
    local elapsed=$(($(now_ms) - start))
    cat "$out/w.err"
    [ "$(status_of w)" = 69 ]
    [ ! -e "$out/w.ran" ]
    [ "$(grep -c '^pglock: warning: connection lost while waiting' "$out/w.err")" = 1 ]
    grep -q "^pglock: error: connection lost while waiting for lock \"$K\" and not regained within --wait; the command was not run" "$out/w.err"
    # The budget bounds pglock's own wait; 1 s of tolerance is for this
    # test's own polling on a loaded machine.
    [ "$elapsed" -le 6000 ]
    "$PGLOCK_TEST_HARNESS" start-primary >/dev/null
    rm "$out/primary.stopped"
    finish h 15
    [ "$(status_of h)" = 74 ]
}

@test "a wait without --wait does not reconnect: 69 at once" {
    need PGLOCK_TEST_HARNESS
    bg h run -d "$DB" --lease=3s "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --lease=3s "$K" -- touch "$out/w.ran"
    wait_until 10 waiting_on "$K"
    "$PGLOCK_TEST_HARNESS" restart-primary >/dev/null
    finish w 15
    [ "$(status_of w)" = 69 ]
    [ ! -e "$out/w.ran" ]
    run ! grep -q "reconnecting" "$out/w.err"
    finish h 15
}

@test "a standby with no primary among the hosts: 69 at once, even with --wait" {
    need PGLOCK_TEST_STANDBY
    local start
    start=$(now_ms)
    run -69 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_STANDBY" --wait=30s "$K" -- touch "$out/ran"
    [[ "${lines[0]}" == "pglock: error: "*"standby"* ]]
    [ ! -e "$out/ran" ]
    # at once: well before the 30 s budget
    [ $(($(now_ms) - start)) -lt 15000 ]
}
