#!/usr/bin/env bats
# pglock key: how keys map to bigint / pair, pg_locks and SQL; bad keys.
# PGLOCK_BIN is the binary (tests/run.sh sets it); tests that need a
# server use PGLOCK_TEST_PRIMARY (a conninfo) and skip without it.

load helpers
load sessions
bats_require_minimum_version 1.5.0

setup() {
    PGLOCK_BIN=${PGLOCK_BIN:-build/pglock}
    sessions_setup
}

teardown() {
    sessions_teardown
}

# The value of FIELD ("bigint", "pg_locks", "sql", ...) in pglock key output.
field() {
    sed -n "s/^$1 *//p" <<<"$output" | head -1
}

@test "an integer key shows its bigint and pg_locks coordinates" {
    run "$PGLOCK_BIN" key 72001
    [ "$status" -eq 0 ]
    [ "$(field key)" = "72001" ]
    [ "$(field bigint)" = "72001" ]
    [ "$(field pg_locks)" = "classid=0 objid=72001 objsubid=1" ]
}

@test "a negative integer needs int: or --" {
    run "$PGLOCK_BIN" key int:-5
    [ "$status" -eq 0 ]
    [ "$(field pg_locks)" = "classid=4294967295 objid=4294967291 objsubid=1" ]
    run "$PGLOCK_BIN" key -- -5
    [ "$status" -eq 0 ]
    [ "$(field bigint)" = "-5" ]
    run "$PGLOCK_BIN" key -5
    [ "$status" -eq 64 ]
    [[ "${lines[0]}" == *'write int:-N'* ]]
}

@test "a pair shows namespace and id" {
    run "$PGLOCK_BIN" key --sql 42:9
    [ "$status" -eq 0 ]
    [ "$(field pair)" = "42:9" ]
    [ "$(field pg_locks)" = "classid=42 objid=9 objsubid=2" ]
    [ "$(field sql)" = "SELECT pg_advisory_lock(42, 9);" ]
}

@test "a name maps by the published SHA-256 rule" {
    run "$PGLOCK_BIN" key --sql nightly-billing
    [ "$status" -eq 0 ]
    [ "$(field bigint)" = "-3003901418071974465" ]
    [ "$(field pg_locks)" = "classid=3595566995 objid=1535581631 objsubid=1" ]
    [ "$(field sql)" = "SELECT pg_advisory_lock(('x' || substr(encode(sha256(convert_to('nightly-billing', 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint);" ]
}

@test "--shared and --xact pick the SQL function" {
    run "$PGLOCK_BIN" key --sql --shared --xact 1
    [ "$status" -eq 0 ]
    [ "$(field sql)" = "SELECT pg_advisory_xact_lock_shared(1);" ]
    run "$PGLOCK_BIN" key --sql --shared 1
    [ "$(field sql)" = "SELECT pg_advisory_lock_shared(1);" ]
    run "$PGLOCK_BIN" key --sql --xact 1
    [ "$(field sql)" = "SELECT pg_advisory_xact_lock(1);" ]
}

@test "several keys print one block each" {
    run "$PGLOCK_BIN" key 1 2:3 text:4
    [ "$status" -eq 0 ]
    [ "$(grep -c '^key ' <<<"$output")" -eq 3 ]
    [ "$(grep -c '^$' <<<"$output")" -eq 2 ]
}

@test "bad keys exit 64 with one line and print nothing on stdout" {
    for k in 42:x 1e3 0x10 - " 42" "42:" ":9" 1:2:3 007 +5 \
             99999999999999999999 2147483648:1 "" INT:5 text: @nothere; do
        run --separate-stderr "$PGLOCK_BIN" key -- "$k"
        [ "$status" -eq 64 ] || { echo "key '$k' exited $status"; false; }
        [ -z "$output" ]
        [ "$(wc -l <<<"$stderr")" -eq 1 ] || { echo "$stderr"; false; }
        [[ "$stderr" == "pglock: error: "* ]]
    done
    run --separate-stderr "$PGLOCK_BIN" key 42:x
    [ "$stderr" = "pglock: error: invalid key \"42:x\": the id after ':' is not an integer; for a name write text:42:x" ]
}

@test "one bad key among good ones: nothing printed, exit 64" {
    run --separate-stderr "$PGLOCK_BIN" key 1 42:x 2
    [ "$status" -eq 64 ]
    [ -z "$output" ]
}

@test "@NAME comes from the registry, and a missing entry fails loudly" {
    printf '# constants\nnightly-billing = 72001\nreports\n' > "$TMP/keys"
    run "$PGLOCK_BIN" key --keys "$TMP/keys" @nightly-billing
    [ "$status" -eq 0 ]
    [ "$(field bigint)" = "72001" ]
    [ "$(field registry)" = "nightly-billing ($TMP/keys)" ]
    PGLOCK_KEYS="$TMP/keys" run "$PGLOCK_BIN" key @reports
    [ "$status" -eq 0 ]
    [ "$(field bigint)" = "$("$PGLOCK_BIN" key reports | sed -n 's/^bigint *//p')" ]
    run --separate-stderr "$PGLOCK_BIN" key --keys "$TMP/keys" @missing
    [ "$status" -eq 64 ]
    [ "$stderr" = "pglock: error: unknown key \"@missing\": not in registry \"$TMP/keys\"" ]
    PGLOCK_KEYS='' run --separate-stderr "$PGLOCK_BIN" key @missing
    [ "$status" -eq 64 ]
    [[ "$stderr" == *"no registry given"* ]]
}

@test "a broken registry is a usage error naming FILE:LINE" {
    printf 'a = 1\na = 2\n' > "$TMP/keys"
    run --separate-stderr "$PGLOCK_BIN" key --keys "$TMP/keys" 1
    [ "$status" -eq 64 ]
    [ "$stderr" = "pglock: error: $TMP/keys:2: duplicate name \"a\" (first on line 1)" ]
}

@test "--help goes to stdout and exits 0" {
    run --separate-stderr "$PGLOCK_BIN" key --help
    [ "$status" -eq 0 ]
    [[ "${lines[0]}" == "pglock key shows"* ]]
    [[ "$output" == *"  pglock key [OPTION]... KEY..."* ]]
    [ -z "$stderr" ]
}

@test "hashtext keys need a server: 69 when it is unreachable" {
    run --separate-stderr "$PGLOCK_BIN" key -h "$TMP/no-such-dir" -p 1 hashtext:x
    [ "$status" -eq 69 ]
    [ -z "$output" ]
    # one error line, and libpq's hint as ours
    [ "$(grep -c '^pglock: error: hashtext keys need the server: ' <<<"$stderr")" -eq 1 ]
    [ "$(wc -l <<<"$stderr")" -eq 2 ]
    [[ "${stderr##*$'\n'}" == "pglock: hint: Is the server running locally and accepting connections on that socket?" ]]
    # Keys the client computes never connect.
    run "$PGLOCK_BIN" key -h "$TMP/no-such-dir" -p 1 nightly-billing
    [ "$status" -eq 0 ]
}

@test "hashtext keys are computed by the server" {
    need PGLOCK_TEST_PRIMARY
    run "$PGLOCK_BIN" key -d "$PGLOCK_TEST_PRIMARY" --sql hashtext:nightly-billing
    [ "$status" -eq 0 ]
    want=$(psql "$PGLOCK_TEST_PRIMARY" -XAtc "select hashtext('nightly-billing')")
    [ "$(field bigint)" = "$want" ]
    [ "$(field sql)" = "SELECT pg_advisory_lock(hashtext('nightly-billing'));" ]
}

# wait_for_lock WHERE APP: polls pg_locks (bounded) until an advisory lock
# at WHERE (classid/objid/objsubid) is granted to someone other than the
# observer; else shows what session APP said.
wait_for_lock() {
    wait_until 10 granted_at "$1" && return 0
    echo "no lock at $1"; cat "$TMP/$2.out"; return 1
}
granted_at() {
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and granted and $1")" = 1 ]
}

@test "--sql output run by psql collides with another session at the shown coordinates" {
    need PGLOCK_TEST_PRIMARY
    n=0
    for k in "text:bats-é'\\x" 7:-9 int:-42 hashtextextended:5:bats; do
        n=$((n + 1))
        run "$PGLOCK_BIN" key -d "$PGLOCK_TEST_PRIMARY" --sql -- "$k"
        [ "$status" -eq 0 ]
        sql=$(field sql)
        coords=$(field pg_locks)
        where=$(sed 's/ / and /g' <<<"$coords")
        session "key_holder_$n" "$PGLOCK_TEST_PRIMARY" "$sql"
        wait_for_lock "$where" "key_holder_$n"
        if [ "$(field pair)" ]; then
            try="select pg_try_advisory_lock($(field pair | sed 's/:/, /'))"
        else
            try="select pg_try_advisory_lock($(field bigint))"
        fi
        [ "$(psql "$PGLOCK_TEST_PRIMARY" -XAtc "$try")" = f ]
        session_end "key_holder_$n"
        # Released with the session: now another session gets it.
        [ "$(psql "$PGLOCK_TEST_PRIMARY" -XAtc "$try")" = t ]
    done
}

@test "--json prints an array that JSON readers accept, bigints as strings" {
    command -v python3 >/dev/null || skip "python3 is not installed"
    run "$PGLOCK_BIN" key --json --sql 'text:q"\é' 42:9 int:-9223372036854775808
    [ "$status" -eq 0 ]
    python3 -c '
import json, sys, hashlib
keys = json.loads(sys.argv[1])
assert len(keys) == 3
name = "q\"\\é"
assert keys[0]["name"] == name, keys[0]
want = int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)
assert keys[0]["bigint"] == str(want)
u = want & (2**64 - 1)
assert (keys[0]["classid"], keys[0]["objid"], keys[0]["objsubid"]) == (u >> 32, u & 0xFFFFFFFF, 1)
assert keys[1]["pair"] == [42, 9] and keys[1]["objsubid"] == 2
assert keys[2]["bigint"] == "-9223372036854775808" and keys[2]["classid"] == 2**31
assert keys[2]["sql"] == "SELECT pg_advisory_lock(-9223372036854775808);"
' "$output"
}
