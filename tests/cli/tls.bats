#!/usr/bin/env bats
# The lock connection over verified TLS: only tests/run.sh's TLS pass runs
# this file (tls:BUILD), in a harness started with --tls, where
# PGLOCK_TEST_PRIMARY is TCP with sslmode=verify-full.  The other suites
# of the lock connection run in that pass too (tests/run.sh, TLS_SUITES).

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_TLS_CA
}
teardown() { teardown_run; }

@test "the TLS pass's lock connection is TLS, its server verified: pg_stat_ssl shows the holder's backend on TLS, and doctor says verify-full" {
    run -0 "$PGLOCK_BIN" run -d "$DB" "$K" -- \
        psql -X -q -A -t "$DB" -c "select s.ssl from pg_stat_ssl s join pg_locks l on l.pid = s.pid where l.locktype = 'advisory' and l.granted"
    [ "$output" = t ]
    run -0 "$PGLOCK_BIN" doctor -d "$DB"
    [[ $output == *"tls: TLSv1."*"(sslmode verify-full): the server's certificate verified against the CA and its name against the host"* ]]
}

@test "doctor says when TLS is not used or the server not verified" {
    run -0 "$PGLOCK_BIN" doctor -d "$DB sslmode=require"
    [[ $output == *"(sslmode require): the server's certificate not verified"* ]]
    run -0 "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY_TCP sslmode=disable"
    [[ $output == *"tls: not used (sslmode disable)"* ]]
}

@test "run's release over TLS is confirmed when the server's notices split its answer into several records (session and xact lifetime)" {
    # debug5: the commit at the release's Sync raises a DEBUG notice,
    # flushed alone, so ReadyForQuery comes in a record of its own
    # (tests/live/test_answer_in_pieces.c says more).  The old code took
    # that for no answer and exited 74.
    local chatty="$DB options='-c client_min_messages=debug5'"
    run -0 "$PGLOCK_BIN" run --lease=3s -d "$chatty" "$K" -- sleep 1
    run -0 "$PGLOCK_BIN" run --mode=xact --lease=3s -d "$chatty" "$K" -- sleep 1
    run -0 "$PGLOCK_BIN" run --try -d "$DB" "$K" -- true
}

@test "the partition suites' lock connection is TLS too: the partition server, reached from its namespace, shows it on TLS, verified" {
    need PGLOCK_TEST_PARTITION_TCP
    [[ $PGLOCK_TEST_PARTITION_TCP == *"sslmode=verify-full"* ]]
    run -0 "$PGLOCK_TEST_HARNESS" partition-exec psql -X -q -A -t "$PGLOCK_TEST_PARTITION_TCP" \
        -c "select ssl from pg_stat_ssl where pid = pg_backend_pid()"
    [ "$output" = t ]
}
