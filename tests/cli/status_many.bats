#!/usr/bin/env bats
# pglock status with many locks and a crowded key: the table is written
# in chunks and its columns sized over every row first (status_text.c),
# and a session's locks arrive as one list (holders.c).  Every request
# shows once, in key order, the columns line up, and JSON agrees.

bats_require_minimum_version 1.5.0

load helpers
load sessions

setup() {
    need PGLOCK_TEST_PRIMARY PGLOCK_BIN
    sessions_setup
    # a range of keys of this test's own
    BASE=$((800000000 + (RANDOM % 1000) * 10000))
    NS=-$((1000 + RANDOM % 1000))
}

teardown() {
    sessions_teardown
}

@test "3,000 locks of one session and a key shared by 10: every request once, in order, aligned" {
    # one session: 2,990 bigints, 5 negative bigints, 5 pairs; its
    # application_name is as long as the server keeps (63 bytes)
    long_app=st_many_$(printf 'x%.0s' $(seq 55))
    session "$long_app" "$PGLOCK_TEST_PRIMARY" "select count(pg_advisory_lock($BASE + g)) from generate_series(1, 2990) g;
select count(pg_advisory_lock(-$BASE - g)) from generate_series(1, 5) g;
select count(pg_advisory_lock($NS, g - 3)) from generate_series(1, 5) g;"
    crowded=$((BASE + 5000))
    for i in $(seq 10); do
        session "st_sh$i" "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock_shared($crowded);"
    done
    wait_until 30 granted_count "$long_app" 3000
    for i in $(seq 10); do wait_until 10 granted_count "st_sh$i" 1; done
    session st_x "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock($crowded);"
    wait_until 10 waiting st_x

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY"
    [ "$status" -eq 0 ]
    # more than one 64 KiB chunk of output
    [ "$(printf '%s\n' "$output" | wc -c)" -gt 65536 ]
    printf '%s\n' "$output" >"$TMP/table"
    # each bigint once, in key order, each with its one holder
    awk -v lo=$((BASE + 1)) -v hi=$((BASE + 2990)) \
        '$1 == "key" && $2 + 0 >= lo && $2 + 0 <= hi' "$TMP/table" >"$TMP/titles"
    seq $((BASE + 1)) $((BASE + 2990)) | sed 's/^/key /; s/$/: exclusive/' >"$TMP/want"
    diff "$TMP/want" "$TMP/titles"
    [ "$(grep -c "^  holds $(backend "$long_app") " "$TMP/table")" -eq 3000 ]
    awk -v lo=$((-BASE - 5)) -v hi=$((-BASE - 1)) \
        '$1 == "key" && $2 + 0 >= lo && $2 + 0 <= hi' "$TMP/table" >"$TMP/negatives"
    seq -5 -1 | awk -v b="$BASE" '{printf "key %d: exclusive\n", $1 - b}' >"$TMP/want"
    diff "$TMP/want" "$TMP/negatives"
    grep -E "^key $NS:-?[0-9]+: exclusive$" "$TMP/table" >"$TMP/pairs"
    printf "key $NS:%d: exclusive\n" -2 -1 0 1 2 | diff - "$TMP/pairs"
    # the crowded key: ten holders, the waiter under the first of them
    grep -Fx "key $crowded: shared by 10, 1 waiting" <<<"$output"
    grep -E "^  └─ waits $(backend st_x) \(exclusive\) " <<<"$output"
    # every session row's columns start where the header's do
    python3 - "$long_app" "$TMP/table" <<'EOF'
import sys
lines = open(sys.argv[2]).read().split("\n")
head = lines[1]
starts = [head.index(h) for h in ("USER", "CLIENT", "HOW LONG", "APPLICATION")]
rows = [l for l in lines[2:] if l.startswith("  ")]
assert len(rows) >= 3011, len(rows)
for l in rows:
    for s in starts:
        assert l[s - 2:s] == "  " and l[s] != " ", (s, l)
assert any(l.endswith("  " + sys.argv[1]) for l in rows)
EOF

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json
    [ "$status" -eq 0 ]
    [ "$(py "sum(1 for l in d['locks'] if l['kind'] == 'int64' and $BASE < int(l['key']) <= $BASE + 2990)")" = 2990 ]
    [ "$(py "[(l['holder_count'], l['waiter_count']) for l in d['locks'] if l['key'] == '$crowded']")" = "[(10, 1)]" ]
    [ "$(py "[l['key'] for l in d['locks'] if l['key'].startswith('$NS:')]")" = "['$NS:-2', '$NS:-1', '$NS:0', '$NS:1', '$NS:2']" ]
}
