#!/usr/bin/env bats
# pglock run takes the same lock as SQL for every key form of docs/keys.md:
# hashtext:NAME and hashtextextended:SEED:NAME (computed by the server),
# text:123 (the name "123", not the integer), pair:NS:ID, int:-N, and a
# bare registry name (hashed by the published rule).  Each is checked from
# psql while the command holds the lock, and PGLOCK_KEY_ID is the value
# the server uses.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# holds KEY SQL_TRY [SQL_ID]: while `pglock run KEY` runs its command,
# SQL_TRY (a pg_try_advisory_lock call) is false; after, true.  If SQL_ID
# is given, the job's PGLOCK_KEY_ID equals its value.
holds() {
    local key=$1 try=$2 idsql=${3:-}
    rm -f "$out/started" "$out/release" "$out/id"
    bg h run -d "$DB" "$key" -c "echo \$PGLOCK_KEY_ID > $out/id; touch $out/started; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/started" || { cat "$out/h.err"; return 1; }
    [ "$(q "select $try")" = f ] || { echo "$key: $try was not blocked"; return 1; }
    if [ -n "$idsql" ]; then
        [ "$(cat "$out/id")" = "$(q "select $idsql")" ] ||
            { echo "$key: PGLOCK_KEY_ID $(cat "$out/id") != $(q "select $idsql")"; return 1; }
    fi
    touch "$out/release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    [ "$(q "select $try")" = t ]
    q "select pg_advisory_unlock_all()" >/dev/null
}

@test "hashtext:NAME is pg_advisory_lock(hashtext(NAME))" {
    holds "hashtext:$K" "pg_try_advisory_lock(hashtext('$K'))" "hashtext('$K')"
}

@test "hashtextextended:SEED:NAME is pg_advisory_lock(hashtextextended(NAME, SEED))" {
    holds "hashtextextended:42:$K" "pg_try_advisory_lock(hashtextextended('$K', 42))" \
        "hashtextextended('$K', 42)"
    # a name containing ':' keeps it
    holds "hashtextextended:-7:a:b:$K" "pg_try_advisory_lock(hashtextextended('a:b:$K', -7))"
}

@test "text:123 is the name \"123\", not the integer 123" {
    local n=$((RANDOM * 1000 + 7))
    holds "text:$n" "pg_try_advisory_lock($(name_sql "$n"))" "$(name_sql "$n")"
    # and the integer lock stayed free all along
    [ "$(q "select pg_try_advisory_lock($n::bigint)")" = t ]
}

@test "pair:NS:ID and int:-N are the pair and the bigint" {
    local ns=$((RANDOM + 2000))
    holds "pair:$ns:-5" "pg_try_advisory_lock($ns, -5)"
    holds "int:-$ns" "pg_try_advisory_lock(-$ns::bigint)" "-$ns"
}

@test "a bare name in the registry is hashed by the published rule" {
    printf '%s\n' "$K" >"$out/keys"
    PGLOCK_KEYS=$out/keys holds "@$K" "pg_try_advisory_lock($(name_sql "$K"))" "$(name_sql "$K")"
}
