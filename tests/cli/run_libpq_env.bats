#!/usr/bin/env bats
# pglock run connects the way PostgreSQL's tools do: -h -p -U -d, libpq's
# PG* variables, a service file and a password file all apply (libpq
# handles them; pglock never parses conninfo itself).  Each test proves
# which database or role the lock really landed on.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGHOST PGPORT
}
teardown() { teardown_run; }

# job_sees: the command prints its database and the server's view of the
# session that holds its lock (database and role of PGLOCK_BACKEND_PID).
job_sees='echo "$PGLOCK_DATABASE|$(psql -X -A -t -c "select datname || chr(124) || usename from pg_stat_activity where pid = $PGLOCK_BACKEND_PID" "$0")"'

@test "PG* variables choose the server, database and role" {
    need PGLOCK_TEST_ORDINARY
    PGDATABASE=pglock_other PGUSER=pglock_user run "$PGLOCK_BIN" run "$K" -- sh -c "$job_sees" "$DB"
    [ "$status" -eq 0 ]
    [ "$output" = "pglock_other|pglock_other|pglock_user" ]
}

@test "-h -p -U -d choose them too, and win over PG* variables" {
    PGDATABASE=nonexistent_db PGUSER=nonexistent_role run "$PGLOCK_BIN" run \
        -h "$PGHOST" -p "$PGPORT" -U pglock_user -d pglock_other "$K" -- sh -c "$job_sees" "$DB"
    [ "$status" -eq 0 ]
    [ "$output" = "pglock_other|pglock_other|pglock_user" ]
}

@test "a service file: -d service=NAME" {
    cat >"$out/services" <<SVC
[pglock_test_svc]
host=$PGHOST
port=$PGPORT
user=pglock_user
dbname=pglock_other
SVC
    PGSERVICEFILE=$out/services run env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
        "$PGLOCK_BIN" run -d service=pglock_test_svc "$K" -- sh -c "$job_sees" "$DB"
    [ "$status" -eq 0 ]
    [ "$output" = "pglock_other|pglock_other|pglock_user" ]
    # PGSERVICE works as well.
    PGSERVICEFILE=$out/services PGSERVICE=pglock_test_svc run env -u PGHOST -u PGPORT -u PGUSER -u PGDATABASE \
        "$PGLOCK_BIN" run "$K" -- sh -c "$job_sees" "$DB"
    [ "$status" -eq 0 ]
    [ "$output" = "pglock_other|pglock_other|pglock_user" ]
}

@test "a password file supplies the password; without it, 69" {
    need PGLOCK_TEST_PW_CONNINFO PGLOCK_TEST_PW_PASSWORD
    printf '*:*:*:pglock_pw:%s\n' "$PGLOCK_TEST_PW_PASSWORD" >"$out/pgpass"
    chmod 600 "$out/pgpass"
    PGPASSFILE=$out/pgpass run "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- sh -c "$job_sees" "$DB"
    [ "$status" -eq 0 ]
    [[ "$output" == *"|pglock_pw" ]]
    PGPASSFILE=$out/nonexistent run -69 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- true
    [[ "$output" != *"$PGLOCK_TEST_PW_PASSWORD"* ]]
}

@test "a URI with -d works, and locks are per database" {
    need PGLOCK_TEST_ORDINARY
    local sock=${PGHOST//\//%2F}
    bg a run -d "postgresql://pglock_user@$sock:$PGPORT/pglock_other" "$K" -c "$(stamp_job a)"
    wait_until 10 file_exists "$out/a.start"
    # Same key, other database: not excluded.
    run "$PGLOCK_BIN" run --try -d "$DB" "$K" -- true
    [ "$status" -eq 0 ]
    # Same key, same database: excluded.
    run "$PGLOCK_BIN" run --try -d "dbname=pglock_other" "$K" -- true
    [ "$status" -eq 75 ]
    touch "$out/a.release"
    finish a 10
    [ "$(status_of a)" = 0 ]
}
