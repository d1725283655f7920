#!/usr/bin/env bats
# pglock lead: a connection string libpq cannot parse never becomes valid,
# so lead exits 64 (a usage error) at once with libpq's reason instead of
# retrying it forever; a server that is merely down is retried (never an
# exit).

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

@test "an unparsable conninfo or URI: 64 at once, one line, no password" {
    run -64 timeout 10 "$PGLOCK_BIN" lead -d "password=s3cr3t bogus_option=1" "$K" -- touch "$out/ran"
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: ')" -eq 1 ]
    [[ "$output" == *'invalid connection option "bogus_option"'* ]]
    [[ "$output" != *s3cr3t* ]]
    run -64 timeout 10 "$PGLOCK_BIN" lead -d "postgresql://u:s3cr3t@/%zz" "$K" -- touch "$out/ran"
    [[ "$output" == *"%zz"* ]]
    [[ "$output" != *s3cr3t* ]]
    [ ! -e "$out/ran" ]
}

@test "a server that is down is retried, not an exit; a valid conninfo is not refused" {
    need PGLOCK_TEST_DOWN
    bg l lead -v -d "$PGLOCK_TEST_DOWN" "$K" -- touch "$out/ran"
    retried() { [ "$(grep -c 'contending again' "$out/l.err")" -ge 2 ]; }
    wait_until 10 retried
    alive "$(pid_of l)"
    kill -TERM "$(pid_of l)"
    finish l 10
    [ "$(status_of l)" = 143 ]
    [ ! -e "$out/ran" ]
    run "$PGLOCK_BIN" lead -d "$DB" "$K" -- sh -c 'echo leader=$PGLOCK_LEADER'
    [ "$status" -eq 0 ]
    [ "$output" = leader=1 ]
}

@test "a refused password or a standby is said at once, without -v, and retried" {
    need PGLOCK_TEST_PW_CONNINFO PGLOCK_TEST_STANDBY
    PGPASSWORD=wrong-secret bg p lead -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
    bg s lead -d "$PGLOCK_TEST_STANDBY" "$K" -- touch "$out/ran"
    said_p() { grep -q '^pglock: warning: could not connect: .*password authentication failed.*; retrying$' "$out/p.err"; }
    said_s() { grep -q '^pglock: warning: could not connect: .*standby.*; retrying$' "$out/s.err"; }
    wait_until 10 said_p
    wait_until 10 said_s
    alive "$(pid_of p)"
    alive "$(pid_of s)"
    # the same reason is not repeated at every retry
    [ "$(grep -c warning "$out/p.err")" -eq 1 ]
    run ! grep -q wrong-secret "$out/p.err"
    kill -TERM "$(pid_of p)" "$(pid_of s)"
    finish p 10
    finish s 10
    [ ! -e "$out/ran" ]
}

# A daemon that never leads says why again every minute, not once (in a
# terminal, or a journal scrolled past the first line, one line looks like a
# hang), and not at every retry.  Margin: the second line is due 60 s after
# the first, looked for up to 80 s.
@test "a refused password keeps lead retrying, said again every minute, not at every retry" {
    need PGLOCK_TEST_PW_CONNINFO
    PGPASSWORD=wrong-secret bg p lead -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
    said() { [ "$(grep -c '^pglock: warning: could not connect: .*password authentication failed.*; retrying$' "$out/p.err")" -ge "$1" ]; }
    wait_until 10 said 1
    wait_until 80 said 2
    # retried every few seconds all along, said twice
    [ "$(grep -c warning "$out/p.err")" -eq 2 ]
    ends_on_sigterm_unrun p
}

@test "a database or role that does not exist: 69 at once, one line, never a retry" {
    run -69 timeout 20 "$PGLOCK_BIN" lead -d "$DB dbname=pglock_no_such_db" "$K" -- touch "$out/ran"
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*database "pglock_no_such_db" does not exist$')" -eq 1 ]
    run -69 timeout 20 "$PGLOCK_BIN" lead -d "$DB user=pglock_no_such_role" "$K" -- touch "$out/ran"
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*role "pglock_no_such_role" does not exist$')" -eq 1 ]
    [[ "$output" != *retrying* ]]
    [ ! -e "$out/ran" ]
}

# PgBouncer says every refusal as 08P01 (its own, and the server's that
# it relays): a database that does not exist is still 69 at once; a role
# that PgBouncer refuses cannot be told from a refused password (PgBouncer
# does not say which), so it is retried as a password is.
@test "through PgBouncer: a database that does not exist is 69 at once; a role it refuses is retried as a password" {
    need PGLOCK_TEST_POOLER
    run -69 timeout 20 "$PGLOCK_BIN" lead -d "$PGLOCK_TEST_POOLER dbname=pglock_no_such_db" "$K" -- touch "$out/ran"
    [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*database "pglock_no_such_db" does not exist$')" -eq 1 ]
    [[ "$output" != *retrying* ]]
    bg r lead -d "$PGLOCK_TEST_POOLER user=pglock_no_such_role" "$K" -- touch "$out/ran"
    said() { grep -q '^pglock: warning: could not connect: .*authentication failed; retrying$' "$out/r.err"; }
    wait_until 10 said
    ends_on_sigterm_unrun r
}

@test "a --restart delay too large to add is a usage error" {
    run -64 "$PGLOCK_BIN" lead --restart=9223372036854775807ms "$K" -- true
    [[ "$output" == *"too large"* ]]
}
