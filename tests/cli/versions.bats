#!/usr/bin/env bats
# shellcheck disable=SC2154  # out, K, DB: set by setup_run (helpers.bash)
# What each server version allows, checked on whichever version the
# harness runs (PGLOCK_TEST_SERVER_VERSION_NUM; `make check-versions` runs
# this file on 13, 14, 16, 17 and 18, `make check` on 15).
#
# PostgreSQL 13 has no idle_session_timeout, so no session lease: run and
# lead refuse session locks there, in one line naming the version.  The
# xact hold's lease is idle_in_transaction_session_timeout (there since
# 9.6), so --mode=xact, and a run through PgBouncer, work on 13 as on 14+;
# status works without pg_locks.waitstart; doctor says what 13 lacks.
# Every test asserts on every version: none skips.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_SERVER_VERSION_NUM
    V=$PGLOCK_TEST_SERVER_VERSION_NUM
    # 130023 -> 13.23, as pglock prints it
    VTEXT="$((V / 10000)).$((V % 10000))"
}
teardown() { teardown_run; }

# backend_state PID: pg_stat_activity.state of a backend.
backend_state() { q "select state from pg_stat_activity where pid = $1"; }

@test "run and lead on a direct connection: a session lock from 14; on 13 one line naming the version, nothing run, nothing locked" {
    local cmd
    if [ "$V" -lt 140000 ]; then
        for cmd in "run" "run --mode=session" "lead" "lead --mode=session"; do
            # shellcheck disable=SC2086
            run -69 "$PGLOCK_BIN" $cmd -d "$DB" "$K" -- sh -c "echo ran >> $out/ran"
            [ "${#lines[@]}" -eq 1 ]
            [[ "${lines[0]}" == "pglock: error: a lease on session locks needs PostgreSQL 14 or newer (idle_session_timeout); the server is $VTEXT: hold the locks in a transaction instead (--mode=xact"* ]]
            [ ! -e "$out/ran" ]
            run -1 held "$K"
        done
        return
    fi
    for cmd in "run" "run --mode=session" "lead"; do
        # shellcheck disable=SC2086
        run -0 "$PGLOCK_BIN" $cmd -d "$DB" "$K" -- sh -c \
            "psql -X -A -t -c \"select state not like 'idle in transaction%' from pg_stat_activity where pid = \$PGLOCK_BACKEND_PID\" \"\$0\"" "$DB"
        # a session lock: the holder's backend is not in a transaction
        [ "$output" = t ]
        run -1 held "$K"
    done
}

@test "--mode=xact on a direct connection: held in a transaction whose lease frees a frozen holder's lock, on every version" {
    bg h run -d "$DB" --mode=xact --lease=3s "$K" -c "echo \$PGLOCK_BACKEND_PID > $out/backend; $(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    held "$K"
    [ "$(backend_state "$(cat "$out/backend")")" = "idle in transaction" ]
    bg w run -d "$DB" --mode=xact --lease=3s "$K" -c "$(check_job w "$out/h.jobpid")"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/frozen"
    kill -STOP "$(pid_of h)"
    # The server ends the silent transaction after the lease
    # (idle_in_transaction_session_timeout); the watchdog stopped the job
    # before: the waiter runs, with no overlap.
    finish w 15
    [ "$(status_of w)" -eq 0 ]
    [ ! -e "$out/w.overlap" ]
    run -1 alive "$(cat "$out/h.jobpid")"
    kill -CONT "$(pid_of h)"
    finish h 10
    [ "$(status_of h)" -eq 74 ]
    report "server $VTEXT, xact hold frozen -> waiter's job started at +$(ms_between "$out/frozen" "$out/w.start") ms (lease 3000 ms)"
}

@test "through PgBouncer run holds the lock in a transaction, on every version" {
    need PGLOCK_TEST_POOLER
    run -0 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_POOLER" "$K" -- sh -c \
        "psql -X -A -t -c \"select count(*) from pg_locks l join pg_stat_activity a using (pid) where l.locktype = 'advisory' and l.granted and a.state = 'idle in transaction' and ((l.classid::bigint << 32) | l.objid::bigint) = $(name_sql "$K")\" \"\$0\"" "$DB"
    [ "$output" = 1 ]
    run -1 held "$K"
}

@test "fencing tokens grow in xact mode, on every version" {
    "$PGLOCK_BIN" run --fencing-token -d "$DB" --mode=xact "$K" -c "echo \$PGLOCK_FENCING_TOKEN >> $out/tokens"
    "$PGLOCK_BIN" run --fencing-token -d "$DB" --mode=xact "$K" -c "echo \$PGLOCK_FENCING_TOKEN >> $out/tokens"
    [ "$(wc -l <"$out/tokens")" -eq 2 ]
    [ "$(sed -n 2p "$out/tokens")" -gt "$(sed -n 1p "$out/tokens")" ]
}

@test "status names holder and waiter; the wait's start is exact (waitstart) from 14, a bound (query_start) on 13" {
    bg h run -d "$DB" --mode=xact "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" --mode=xact "$K" -- true
    wait_until 10 waiting_on "$K"
    run -0 "$PGLOCK_BIN" status --json -d "$DB"
    [ "$(py '[l["name"] for l in d["locks"] if l["name"] == "'"$K"'"]')" = "['$K']" ]
    local src
    src=$(py '[l for l in d["locks"] if l["name"] == "'"$K"'"][0]["waiters"][0]["waiting_source"]')
    if [ "$V" -ge 140000 ]; then
        [ "$src" = waitstart ]
    else
        [ "$src" = query_start ]
    fi
    touch "$out/h.release"
    finish h 10
    finish w 10
    [ "$(status_of w)" -eq 0 ]
}

@test "doctor: ok from 14; on 13 a problem naming the version and --mode=xact" {
    if [ "$V" -ge 140000 ]; then
        run "$PGLOCK_BIN" doctor -d "$DB"
        grep -E "^ok +server_version: PostgreSQL ${VTEXT}[ :]" <<<"$output"
    else
        run -1 "$PGLOCK_BIN" doctor -d "$DB"
        grep -E "^problem +server_version: PostgreSQL $VTEXT: no idle_session_timeout" <<<"$output"
        grep -E "^ +fix: .*--mode=xact" <<<"$output"
    fi
}

# libpq gives no SQLSTATE for a refused connection: pglock reads the
# server's (PQERRORS_VERBOSE) to decide what waiting cannot fix.  The
# server's message text is the version's, so every version is asked.
@test "a refused connection's SQLSTATE on every version: no database or role is 69 at once for run --wait and lead; a refused password is 69 for run --wait, retried by lead" {
    need PGLOCK_TEST_PW_CONNINFO
    local cmd
    for cmd in "run --wait=60s" "lead --mode=xact"; do
        # shellcheck disable=SC2086
        run -69 timeout 30 "$PGLOCK_BIN" $cmd -d "$DB dbname=pglock_no_such_db" "$K" -- touch "$out/ran"
        [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*database "pglock_no_such_db" does not exist$')" -eq 1 ]
        [[ "$output" != *retrying* ]]
        # shellcheck disable=SC2086
        run -69 timeout 30 "$PGLOCK_BIN" $cmd -d "$DB user=pglock_no_such_role" "$K" -- touch "$out/ran"
        [ "$(printf '%s\n' "$output" | grep -c '^pglock: error: .*role "pglock_no_such_role" does not exist$')" -eq 1 ]
        [[ "$output" != *retrying* ]]
    done
    PGPASSWORD=wrong run -69 timeout 30 "$PGLOCK_BIN" run --wait=60s -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
    [[ "$output" == *'password authentication failed'* ]]
    [[ "$output" != *retrying* ]]
    PGPASSWORD=wrong bg p lead --mode=xact -d "$PGLOCK_TEST_PW_CONNINFO" "$K" -- touch "$out/ran"
    said() { grep -q '^pglock: warning: could not connect: .*password authentication failed.*; retrying$' "$out/p.err"; }
    wait_until 10 said
    ends_on_sigterm_unrun p
}
