#!/usr/bin/env bats
# pglock doctor against the harness's primary, standby and PgBouncer:
# a direct connection is clean, a pooler and a standby are problems.
# PGLOCK_BIN is the binary; PGLOCK_TEST_* come from the harness
# (tests/harness/README.md); tests skip without them.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    PGLOCK_BIN=${PGLOCK_BIN:-build/pglock}
}

# The role a test created, if any.
teardown() {
    [ -z "${ROLE:-}" ] || [ -z "${PGLOCK_TEST_OTHER_DB:-}" ] ||
        q "drop schema if exists pglock cascade" "$PGLOCK_TEST_OTHER_DB" >/dev/null 2>&1 || true
    [ -z "${ROLE:-}" ] || q "drop role if exists \"${ROLE//\"/\"\"}\"" >/dev/null || true
}

# fix_of CHECK: its fix in the JSON in $output.
fix_of() {
    py "[f['fix'] for f in d['findings'] if f['check'] == '$1'][0]"
}

# finding CHECK: its status in the JSON in $output.
finding() {
    py "[f['status'] for f in d['findings'] if f['check'] == '$1']"
}

@test "a direct connection to the primary is clean: exit 0" {
    need PGLOCK_TEST_PRIMARY
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY"
    [ "$status" -eq 0 ]
    grep -E "^ok +pooler: no pooler in the path" <<<"$output"
    grep -E "^ok +standby: " <<<"$output"
    grep -E "^ok +server_version: PostgreSQL 1[4-9]" <<<"$output"
    grep -E "^ok +lock_table: room for at least [0-9]+ locks" <<<"$output"
    [[ "$output" == *"0 problems"* ]]

    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY" --json
    [ "$status" -eq 0 ]
    [ "$(py 'd["problems"]')" = 0 ]
    [ "$(finding pooler)" = "['ok']" ]
    [ "$(finding standby)" = "['ok']" ]
    [ "$(finding see_sessions)" = "['ok']" ]
    # every finding has a status among the three, a reason, and a fix
    # exactly when it is not ok
    [ "$(py 'all(f["status"] in ("ok","warning","problem") and f["reason"] and
                 (f["fix"] is None) == (f["status"] == "ok") for f in d["findings"])')" = True ]
}

@test "the lock table's floor and the advisory locks held now are reported" {
    need PGLOCK_TEST_PRIMARY
    read -r per conns prepared < <(psql -X -A -t -F ' ' "$PGLOCK_TEST_PRIMARY" -c \
        "select current_setting('max_locks_per_transaction'), current_setting('max_connections'),
                current_setting('max_prepared_transactions')")
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY"
    [[ "$output" == *"room for at least $((per * (conns + prepared))) locks (max_locks_per_transaction $per x (max_connections $conns + max_prepared_transactions $prepared)"* ]]
    [[ "$output" == *"advisory locks held now"* ]]
}

@test "through PgBouncer in transaction mode, the setup of docs/deployment.md: exit 0, a sizing warning" {
    need PGLOCK_TEST_POOLER
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_POOLER"
    [ "$status" -eq 0 ]
    # PgBouncer's backend pid is a random 32-bit key: unsigned, never "-".
    grep -E "^ok +pooler: a pooler is in the path \(PQbackendPID\(\) [0-9]+ is not the server's pg_backend_pid\(\) [0-9]+\): pglock run and lead hold their locks in a transaction" <<<"$output"
    grep -E "^ok +pool_mode: transaction pooling" <<<"$output"
    grep -E "^warning +pooled_waiters: each client waiting for a lock holds a pooled server connection" <<<"$output"
    grep -E "^ +fix: wait with a timeout" <<<"$output"
    run grep -E "^problem" <<<"$output"
    [ "$status" -eq 1 ]
    # The health-check use works.
    run sh -c '"$0" doctor -d "$1" >/dev/null && echo deploy' "$PGLOCK_BIN" "$PGLOCK_TEST_POOLER"
    [ "$output" = deploy ]

    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_POOLER" --json
    [ "$status" -eq 0 ]
    [ "$(finding pooler)" = "['ok']" ]
    [ "$(finding pool_mode)" = "['ok']" ]
    [ "$(finding pooled_waiters)" = "['warning']" ]
    [ "$(py 'd["problems"]')" = 0 ]
}

@test "a standby is a problem: advisory locks are not replicated" {
    need PGLOCK_TEST_STANDBY
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_STANDBY"
    [ "$status" -eq 1 ]
    grep -E "^problem +standby: the server is a standby \(in recovery\)" <<<"$output"
    grep -E "fix: connect to the primary" <<<"$output"
}

@test "an ordinary role is warned about what it cannot see or signal" {
    need PGLOCK_TEST_ORDINARY
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_ORDINARY" --json
    [ "$status" -eq 0 ]
    [ "$(finding see_sessions)" = "['warning']" ]
    [ "$(finding signal_backends)" = "['warning']" ]
    [[ "$(py '[f["fix"] for f in d["findings"] if f["check"] == "see_sessions"][0]')" == "GRANT pg_read_all_stats TO"* ]]
}

@test "a role's timeout defaults are reported as warnings" {
    need PGLOCK_TEST_PRIMARY
    # PGOPTIONS stands in for ALTER ROLE ... SET (no server change)
    PGOPTIONS="-c statement_timeout=5min -c idle_session_timeout=1h" \
        run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY"
    [ "$status" -eq 0 ]
    grep -E "^warning +statement_timeout: statement_timeout is 5min for this role" <<<"$output"
    grep -E "^warning +idle_session_timeout: idle_session_timeout is 1h for this role" <<<"$output"
    grep -E "^ok +lock_timeout: lock_timeout is 0" <<<"$output"
}

@test "over TCP the server's keepalives are judged" {
    need PGLOCK_TEST_PRIMARY_TCP
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY_TCP" --json
    [ "$status" -eq 0 ]
    [[ "$(py '[f["reason"] for f in d["findings"] if f["check"] == "keepalives"][0]')" == *"tcp_keepalives_idle"* ]]
}

@test "bad options exit 64" {
    run "$PGLOCK_BIN" doctor --bogus
    [ "$status" -eq 64 ]
    run "$PGLOCK_BIN" doctor extra-argument
    [ "$status" -eq 64 ]
    # each misuse is named for what it is
    run "$PGLOCK_BIN" doctor -x
    [ "$status" -eq 64 ]
    [[ "$output" == *'unrecognized option "-x"'* ]]
    run "$PGLOCK_BIN" doctor -d
    [[ "$output" == *'option "-d" needs a value'* ]]
    run "$PGLOCK_BIN" doctor --json=yes
    [[ "$output" == *'option "--json=yes" takes no value'* ]]
    run "$PGLOCK_BIN" doctor --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"Exit status"* ]]
}

@test "an unreachable server exits 69" {
    unreachable_exits_69 doctor
}

# The fix for a role that lacks pg_read_all_stats or pg_signal_backend is a
# GRANT that can be pasted as it is: the role name is an SQL identifier, a
# '"' in it doubled.
@test "the GRANT hint doubles a '\"' in the role name, and runs as printed" {
    need PGLOCK_TEST_PRIMARY
    ROLE="pglock \"q\" $$"
    q "create role \"pglock \"\"q\"\" $$\" login" >/dev/null
    run --separate-stderr "$PGLOCK_BIN" doctor --json -d "$PGLOCK_TEST_PRIMARY user='$ROLE'"
    [ "$status" -eq 0 ]
    [ "$(fix_of see_sessions)" = "GRANT pg_read_all_stats TO \"pglock \"\"q\"\" $$\"" ]
    [ "$(fix_of signal_backends)" = "GRANT pg_signal_backend TO \"pglock \"\"q\"\" $$\"" ]
    # pasted into psql, each hint grants the role what it lacked
    q "$(fix_of see_sessions)"
    q "$(fix_of signal_backends)"
    run --separate-stderr "$PGLOCK_BIN" doctor --json -d "$PGLOCK_TEST_PRIMARY user='$ROLE'"
    [ "$(py "[f['status'] for f in d['findings'] if f['check'] in ('see_sessions', 'signal_backends')]")" = "['ok', 'ok']" ]
}

@test "doctor checks the run history: with --record a missing table is a problem; when it exists, its version and the caller's grants" {
    need PGLOCK_TEST_OTHER_DB
    local other=$PGLOCK_TEST_OTHER_DB
    q "drop schema if exists pglock cascade" "$other"
    # no table, not asked: nothing said about it
    run -0 "$PGLOCK_BIN" doctor -d "$other" --json
    [ "$(finding run_history)" = "[]" ]
    run -1 "$PGLOCK_BIN" doctor -d "$other" --record --json
    [ "$(finding run_history)" = "['problem']" ]
    [[ "$(fix_of run_history)" == "pglock init"* ]]
    "$PGLOCK_BIN" init -q -d "$other"
    run -0 "$PGLOCK_BIN" doctor -d "$other" --json
    [ "$(finding run_history)" = "['ok']" ]
    [ "$(finding history_grants)" = "['ok']" ]
    # an ordinary role without the GRANTs: a warning, a problem with --record
    run -0 "$PGLOCK_BIN" doctor -d "$other user=pglock_user" --json
    [ "$(finding history_grants)" = "['warning']" ]
    [[ "$(fix_of history_grants)" == "pglock init --recorder='pglock_user'"* ]]
    run -1 "$PGLOCK_BIN" doctor -d "$other user=pglock_user" --record
    grep -E "^problem +history_grants: role \"pglock_user\" may not record runs" <<<"$output"
    # another schema version
    q "comment on table pglock.runs is 'pglock run history, schema version 99'" "$other"
    run -1 "$PGLOCK_BIN" doctor -d "$other" --json
    [ "$(finding run_history)" = "['problem']" ]
    q "drop schema pglock cascade" "$other"
}

# Through PgBouncer the server's view (inet_server_addr(), tcp_keepalives_*)
# is the pooler's link to the server; this client's link ends at the
# pooler.  Each line says whose link it is about.
@test "through PgBouncer, the keepalives line says whose link it is about: the pooler's to the server, this client's to the pooler" {
    need PGLOCK_TEST_POOLER
    run -0 "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_POOLER" --json
    local reason host
    reason=$(py '[f["reason"] for f in d["findings"] if f["check"] == "keepalives"][0]')
    host=$(py 'd["host"]')
    [[ "$reason" != "connected over"* ]]
    [[ "$reason" == "the pooler's "* ]]
    if [[ "$host" == /* ]]; then
        [[ "$reason" == *"this client's link to the pooler is a Unix-domain socket"* ]]
    else
        [[ "$reason" == *"this client's link to the pooler is TCP"* ]]
    fi
    # directly over the socket, the line is about this client's own link
    need PGLOCK_TEST_PRIMARY
    run -0 "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY" --json
    reason=$(py '[f["reason"] for f in d["findings"] if f["check"] == "keepalives"][0]')
    [[ "$reason" == "this client's link to the server is a Unix-domain socket"* ]]
}

# The least-privilege recorder of docs/operations.md (pglock init
# --recorder=ROLE --apply) needs no pg_read_all_stats, no
# pg_signal_backend and no right to prune: doctor --record says so
# without a warning.  A role that may do nothing with the history is
# still warned, and one that may not record is a problem with --record.
@test "doctor --record as a recorder set up as the docs say: clean (0 problems, 0 warnings)" {
    need PGLOCK_TEST_PRIMARY PGLOCK_TEST_OTHER_DB
    local other=$PGLOCK_TEST_OTHER_DB
    ROLE="pglock_recorder_$$"
    q "create role $ROLE login" >/dev/null
    q "drop schema if exists pglock cascade" "$other"
    run -0 --separate-stderr "$PGLOCK_BIN" init -q -d "$other" --recorder="$ROLE" --apply
    run -0 --separate-stderr "$PGLOCK_BIN" doctor --record --json -d "$other user=$ROLE"
    [ "$(py 'd["problems"] + d["warnings"]')" = 0 ] ||
        { py '[f for f in d["findings"] if f["status"] != "ok"]'; false; }
    [ "$(finding history_grants)" = "['ok']" ]
    [ "$(finding see_sessions)" = "['ok']" ]
    [ "$(finding signal_backends)" = "['ok']" ]
    [[ "$(py '[f["reason"] for f in d["findings"] if f["check"] == "see_sessions"][0]')" == *"(recording runs does not need it)" ]]
    # it records, as the docs say it may
    run -0 "$PGLOCK_BIN" run --record -d "$other user=$ROLE" "recorder-$$" -- true
    # without --record its job is not known: what status and terminate
    # need is still a warning
    run -0 --separate-stderr "$PGLOCK_BIN" doctor --json -d "$other user=$ROLE"
    [ "$(finding see_sessions)" = "['warning']" ]
    [ "$(finding history_grants)" = "['ok']" ]
    q "drop schema pglock cascade" "$other"
}

# The lease against promotion (docs/guarantees.md): after a silent primary
# death the command runs until T_c + kill-after after the last confirmed
# heartbeat; with the margin that must fit within the earliest promotion.

# promo ARGS...: doctor --json with ARGS; sets $output, $status, and
# $verdict / $fix to the promotion finding's status and fix.
promo() {
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY" --json "$@"
    verdict=$(py "[f['status'] for f in d['findings'] if f['check'] == 'promotion'][0]")
    fix=$(py "[f['fix'] for f in d['findings'] if f['check'] == 'promotion'][0]")
}

# fix_lease: the options the fix in $fix names ("--lease=D [--kill-after=D]").
fix_lease() { sed -n 's/^run and lead with \(--lease=[^ ]*\( --kill-after=[^ ]*\)\{0,1\}\) or shorter.*/\1/p' <<<"$fix"; }

@test "--promotion-after: a lease fits a promotion no sooner than the lease itself (default kill-after); one sooner is a problem that names the lease that fits" {
    need PGLOCK_TEST_PRIMARY
    promo --promotion-after=30s --lease=30s
    [ "$status" -eq 0 ]
    [ "$verdict" = ok ]
    [ "$(py 'd["problems"]')" = 0 ]
    promo --promotion-after=29s --lease=30s
    [ "$status" -eq 1 ]
    [ "$verdict" = problem ]
    [ "$(fix_lease)" = "--lease=29s" ]
    # The text output: one line that says so, one that names the lease.
    run "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_PRIMARY" --promotion-after=20s --lease=30s
    [ "$status" -eq 1 ]
    grep -E "^problem +promotion: --lease=30s does not fit a promotion after 20s: .* T_c 20s \+ kill-after 5s .* margin of 5s, so 30s" <<<"$output"
    grep -E "^ +fix: run and lead with --lease=20s or shorter" <<<"$output"
}

@test "--promotion-after without --lease checks run's and lead's default lease (20s, Patroni's ttl - loop_wait by default): it fits a promotion after 20s, not one after 19s" {
    need PGLOCK_TEST_PRIMARY
    promo --promotion-after=20s
    [ "$status" -eq 0 ]
    [ "$verdict" = ok ]
    [[ "$(py "[f['reason'] for f in d['findings'] if f['check'] == 'promotion'][0]")" == "--lease=20s fits a promotion after 20s:"* ]]
    promo --promotion-after=19s
    [ "$status" -eq 1 ]
    [ "$(fix_lease)" = "--lease=19s" ]
}

@test "--promotion-after with a short --kill-after: a longer lease fits, and the lease the fix names fits, run takes it, and one second more does not fit" {
    need PGLOCK_TEST_PRIMARY
    # T_c 2/3 of the lease, kill-after 1s, margin 1/6: 22s gives 19.3s.
    promo --promotion-after=20s --lease=60s --kill-after=1s
    [ "$status" -eq 1 ]
    [ "$(fix_lease)" = "--lease=22s --kill-after=1s" ]
    promo --promotion-after=20s --lease=22s --kill-after=1s
    [ "$verdict" = ok ]
    promo --promotion-after=20s --lease=23s --kill-after=1s
    [ "$verdict" = problem ]
    # Every fix doctor gives fits when checked again, and run accepts it.
    local p l
    for p in 1s 7s 20s 45s 2m 1h; do
        for l in 30s 90s; do
            promo --promotion-after=$p --lease=$l
            [ "$verdict" = problem ] || continue
            # shellcheck disable=SC2046 # the fix's options, split
            promo --promotion-after=$p $(fix_lease)
            [ "$verdict" = ok ]
            # shellcheck disable=SC2046
            run -0 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PRIMARY" $(fix_lease) "doctor-fix-$$" -- true
        done
    done
}

@test "--promotion-after: no lease fits a kill-after longer than half the promotion; the fix says so" {
    need PGLOCK_TEST_PRIMARY
    promo --promotion-after=20s --kill-after=11s --lease=30s
    [ "$status" -eq 1 ]
    [[ "$fix" == "no lease fits a promotion after 20s with --kill-after=11s: a shorter --kill-after, or promote later"* ]]
}

@test "--promotion-after, --lease and --kill-after: bad input is one line and exit 64, before any connection" {
    local a
    for a in "--promotion-after=x" "--promotion-after=-1s" "--promotion-after=" \
        "--lease=20s" "--kill-after=1s" "--promotion-after=20s --lease=500ms" \
        "--promotion-after=20s --lease=10s --kill-after=6s" "--promotion-after=20s --lease=soon"; do
        # PGLOCK_TEST_DOWN: a connection would fail (69), not 64.
        # shellcheck disable=SC2086 # the options, split
        run "$PGLOCK_BIN" doctor -d "${PGLOCK_TEST_DOWN:-host=127.0.0.1 port=1}" $a
        [ "$status" -eq 64 ] || { echo "$a: exit $status: $output"; return 1; }
        [ "$(grep -c 'error:' <<<"$output")" = 1 ]
        [[ "${lines[0]}" == "pglock: error: "* ]]
    done
    run "$PGLOCK_BIN" doctor -d "${PGLOCK_TEST_DOWN:-host=127.0.0.1 port=1}" --promotion-after=20s --lease=10s --kill-after=6s
    [ "${lines[0]}" = "pglock: error: --kill-after=6s breaks the lease: more than half of --lease=10s" ]
}

@test "docs/deployment.md's doctor line for Patroni's defaults runs as written: --lease=20s fits a promotion after 20s (ok, exit 0)" {
    need PGLOCK_TEST_PRIMARY
    local block
    block=$(doc_block docs/deployment.md deploy-patroni-doctor)
    [[ "$block" == *'pglock doctor -d app --promotion-after=20s --lease=20s' ]]
    block=${block//-d app/-d \"\$PGLOCK_TEST_PRIMARY\"}
    PATH=$(dirname "$(readlink -f "$PGLOCK_BIN")"):$PATH run -0 sh -ec "$block"
    grep -E "^ok +promotion: --lease=20s fits a promotion after 20s" <<<"$output"
}
