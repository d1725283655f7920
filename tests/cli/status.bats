#!/usr/bin/env bats
# pglock status against live scenes built with background psql sessions:
# who holds, who waits, by name, as a table with a tree and as JSON.
# PGLOCK_BIN is the binary; the harness's PGLOCK_TEST_* variables point at
# the servers (tests/harness/README.md); tests skip without them.

bats_require_minimum_version 1.5.0

load helpers
load sessions

setup() {
    PGLOCK_BIN=${PGLOCK_BIN:-build/pglock}
    sessions_setup
}

teardown() {
    sessions_teardown
    # The role a test created, if any.
    [ -z "${ROLE:-}" ] || q "drop role if exists \"$ROLE\"" >/dev/null || true
}

# held_by_role: $ROLE holds an advisory lock.
held_by_role() {
    [ "$(q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
             where l.locktype = 'advisory' and l.granted
             and a.usename = '$ROLE'")" = 1 ]
}

@test "a holder and a chain of waiters: table, tree and JSON agree" {
    need PGLOCK_TEST_PRIMARY
    session st_holder "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(72001);"
    wait_until 10 granted_count st_holder 1
    session st_w1 "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(72001);"
    wait_until 10 waiting st_w1
    session st_w2 "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(72001);"
    wait_until 10 waiting st_w2
    h=$(backend st_holder) w1=$(backend st_w1) w2=$(backend st_w2)

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" 72001
    [ "$status" -eq 0 ]
    [[ "$output" == *"key 72001: exclusive, 2 waiting"* ]]
    # the tree: w1 under the holder, w2 under w1
    grep -E "^  holds $h +- +postgres +local " <<<"$output"
    grep -E "^  └─ waits $w1 \(exclusive\) " <<<"$output"
    grep -E "^     └─ waits $w2 \(exclusive\) " <<<"$output"
    # an idle holder: a range (state_change to backend_start), in words
    grep -E "^  holds $h .* [0-9]+s( to [0-9]+s)? +st_holder$" <<<"$output"
    # the headers say what the columns hold, not which server columns
    grep -E "^  BACKEND PID +HOST +USER +CLIENT +HOW LONG +APPLICATION$" <<<"$output"
    [[ "$output" != *state_change* && "$output" != *backend_start* ]]

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json 72001
    [ "$status" -eq 0 ]
    [ "$(py 'len(d["locks"])')" = 1 ]
    [ "$(py 'd["locks"][0]["key"]')" = 72001 ]
    [ "$(py 'd["locks"][0]["kind"]')" = int64 ]
    [ "$(py 'd["locks"][0]["classid"], d["locks"][0]["objid"], d["locks"][0]["objsubid"]')" = "0 72001 1" ]
    [ "$(py 'd["locks"][0]["mode"]')" = exclusive ]
    [ "$(py '[h["pid"] for h in d["locks"][0]["holders"]]')" = "[$h]" ]
    [ "$(py 'd["locks"][0]["holders"][0]["held_max_source"]')" = backend_start ]
    [ "$(py 'd["locks"][0]["holders"][0]["held_min_source"]')" = state_change ]
    [ "$(py 'd["locks"][0]["holders"][0]["held_min_s"] <= d["locks"][0]["holders"][0]["held_max_s"]')" = True ]
    [ "$(py '[w["pid"] for w in d["locks"][0]["waiters"]]')" = "[$w1, $w2]" ]
    [ "$(py '[w["parent_pid"] for w in d["locks"][0]["waiters"]]')" = "[$h, $w1]" ]
    [ "$(py 'd["locks"][0]["waiters"][0]["blocked_by"]')" = "[$h]" ]
    [ "$(py 'sorted(d["locks"][0]["waiters"][1]["blocked_by"])')" = "$(python3 -S -c "print(sorted([$h, $w1]))")" ]
    [ "$(py 'd["locks"][0]["waiters"][0]["waiting_source"]')" = waitstart ]
    [ "$(py 'd["locks"][0]["waiters"][0]["application_name"]')" = st_w1 ]
}

@test "shared holders of a pair key: mode, count, and an exclusive waiter" {
    need PGLOCK_TEST_PRIMARY
    session st_s1 "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock_shared(42, 9);"
    session st_s2 "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock_shared(42, 9);"
    wait_until 10 granted_count st_s1 1
    wait_until 10 granted_count st_s2 1
    session st_x "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(42, 9);"
    wait_until 10 waiting st_x

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" 42:9
    [ "$status" -eq 0 ]
    [[ "$output" == *"key 42:9: shared by 2, 1 waiting"* ]]
    grep -E "waits $(backend st_x) \(exclusive\)" <<<"$output"

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json 42:9
    [ "$(py 'd["locks"][0]["key"], d["locks"][0]["kind"], d["locks"][0]["mode"], d["locks"][0]["holder_count"]')" = "42:9 pair shared 2" ]
    [ "$(py 'sorted(h["pid"] for h in d["locks"][0]["holders"])')" = "$(python3 -S -c "print(sorted([$(backend st_s1), $(backend st_s2)]))")" ]
    [ "$(py 'd["locks"][0]["waiters"][0]["mode"]')" = exclusive ]
}

@test "negative keys and pairs decode with the right sign" {
    need PGLOCK_TEST_PRIMARY
    session st_neg "$PGLOCK_TEST_PRIMARY" \
        "select pg_advisory_lock(-5); select pg_advisory_lock(-1, -2); select pg_advisory_lock(4294967296);"
    wait_until 10 granted_count st_neg 3
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json int:-5 -- -1:-2 4294967296
    [ "$status" -eq 0 ]
    [ "$(py 'sorted(l["key"] for l in d["locks"])')" = "['-1:-2', '-5', '4294967296']" ]
}

@test "a text key is named from pglock's application_name, re-hashed first" {
    need PGLOCK_TEST_PRIMARY
    session "pglock run nightly-billing" "$PGLOCK_TEST_PRIMARY" \
        "select pg_advisory_lock($(name_sql nightly-billing));"
    wait_until 10 granted_count "pglock run nightly-billing" 1
    # a liar: claims a name whose hash is not the key it holds
    session "pglock run not-this-one" "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(77);"
    wait_until 10 granted_count "pglock run not-this-one" 1

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" nightly-billing 77
    [ "$status" -eq 0 ]
    [[ "$output" == *"nightly-billing (application_name) = key -3003901418071974465: exclusive"* ]]
    [[ "$output" == *"key 77: exclusive"* ]]
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json nightly-billing 77
    [ "$(py '[(l["key"], l["name"], l["name_source"]) for l in d["locks"]]')" = \
      "[('-3003901418071974465', 'nightly-billing', 'application_name'), ('77', None, None)]" ]
    # an older pglock's application_name names no host
    [ "$(py '[l["holders"][0]["host"] for l in d["locks"]]')" = "[None, None]" ]
}

@test "pglock run's own application_name names its key and its host (--host-label, else the host name)" {
    need PGLOCK_TEST_PRIMARY
    "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PRIMARY" --host-label cron-3 status-e2e-job -- sleep 600 &
    PIDS+=("$!")
    "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PRIMARY" --shared status-e2e-shared -- sleep 600 &
    PIDS+=("$!")
    wait_until 20 granted_count "pglock run status-e2e-job on cron-3" 1
    wait_until 20 granted_count "$(run_app status-e2e-shared)" 1
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json status-e2e-job status-e2e-shared
    [ "$status" -eq 0 ]
    [ "$(py 'sorted((l["name"], l["name_source"]) for l in d["locks"])')" = "[('status-e2e-job', 'application_name'), ('status-e2e-shared', 'application_name')]" ]
    [ "$(py '{l["name"]: (l["holders"][0]["host"], l["holders"][0]["application_name"]) for l in d["locks"]}["status-e2e-job"]')" = "('cron-3', 'pglock run status-e2e-job on cron-3')" ]
    [ "$(py '{l["name"]: l["holders"][0]["host"] for l in d["locks"]}["status-e2e-shared"]')" = "$(uname -n)" ]
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" status-e2e-job
    kill -TERM "${PIDS[@]: -2}"
    [ "$status" -eq 0 ]
    [[ "$output" == *"status-e2e-job (application_name) = key "* ]]
    grep -E "^  holds [0-9]+ +cron-3 +postgres +local +.* +pglock run status-e2e-job on cron-3$" <<<"$output"
}

@test "a non-ASCII --host-label: the host as the server shows it, the name still named" {
    need PGLOCK_TEST_PRIMARY
    "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PRIMARY" --host-label "król-1" status-e2e-pl -- sleep 600 &
    PIDS+=("$!")
    wait_until 20 eval '[ "$(q "select count(*) from pg_locks l join pg_stat_activity a using (pid)
                             where l.locktype = '"'advisory'"' and l.granted
                             and a.application_name like '"'pglock run status-e2e-pl on kr%'"'")" = 1 ]'
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json status-e2e-pl
    kill -TERM "${PIDS[-1]}"
    [ "$status" -eq 0 ]
    [ "$(py 'd["locks"][0]["name"]')" = status-e2e-pl ]
    # 15 and older show each non-ASCII byte as "?", 16 and newer as \xNN
    local host
    host=$(py 'd["locks"][0]["holders"][0]["host"]')
    [ "$host" = 'kr??l-1' ] || [ "$host" = 'kr\xc3\xb3l-1' ]
}

@test "a name with \" on \" in it, from an older pglock (no host) and from this one" {
    need PGLOCK_TEST_PRIMARY
    session "pglock run backup on sunday" "$PGLOCK_TEST_PRIMARY" \
        "select pg_advisory_lock($(name_sql "backup on sunday"));"
    session "pglock run nightly on monday on cron-9" "$PGLOCK_TEST_PRIMARY" \
        "select pg_advisory_lock($(name_sql "nightly on monday"));"
    wait_until 10 granted_count "pglock run backup on sunday" 1
    wait_until 10 granted_count "pglock run nightly on monday on cron-9" 1
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json "backup on sunday" "nightly on monday"
    [ "$status" -eq 0 ]
    [ "$(py 'sorted((l["name"], l["holders"][0]["host"]) for l in d["locks"])')" = \
      "[('backup on sunday', None), ('nightly on monday', 'cron-9')]" ]
}

@test "a registry names keys, bare names and pairs; @NAME selects" {
    need PGLOCK_TEST_PRIMARY
    printf '# lock constants\nreports = 72002\nnightly-billing\nimports = 7:8\n' >"$TMP/keys"
    session st_reg "$PGLOCK_TEST_PRIMARY" \
        "select pg_advisory_lock(72002); select pg_advisory_lock($(name_sql nightly-billing)); select pg_advisory_lock(7, 8);"
    wait_until 10 granted_count st_reg 3

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --keys "$TMP/keys" --json 72002 nightly-billing 7:8
    [ "$status" -eq 0 ]
    [ "$(py 'sorted((l["key"], l["name"], l["name_source"]) for l in d["locks"])')" = \
      "[('-3003901418071974465', 'nightly-billing', 'registry'), ('72002', 'reports', 'registry'), ('7:8', 'imports', 'registry')]" ]

    PGLOCK_KEYS="$TMP/keys" run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" @imports
    [ "$status" -eq 0 ]
    [[ "$output" == *"imports (registry) = key 7:8: exclusive"* ]]
    [[ "$output" != *"72002"* ]]

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --keys "$TMP/keys" @missing
    [ "$status" -eq 64 ]
}

@test "a registry with two names for one key is reported" {
    need PGLOCK_TEST_PRIMARY
    printf 'alpha = 5\nbeta = 5\n' >"$TMP/keys"
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --keys "$TMP/keys" --json
    [ "$status" -eq 0 ]
    [[ "$stderr" == *'registry names "alpha" and "beta" are the same key 5'* ]]
    [ "$(py 'd["registry_collisions"]')" = "[{'key': '5', 'names': ['alpha', 'beta']}]" ]
}

@test "a long non-ASCII name: application_name is not believed, the registry is" {
    need PGLOCK_TEST_PRIMARY
    name="überlange-sperre-für-den-nächtlichen-abrechnungslauf-der-filialen-süd"
    [ "$(printf %s "$name" | wc -c)" -gt 63 ]
    session "pglock run $name" "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock($(name_sql "$name"));"
    key=$(q "select $(name_sql "$name")")
    # the server cut and ASCII-fied the application_name
    app=
    wait_until 10 eval 'app=$(q "select application_name from pg_stat_activity
                             where application_name like '"'pglock run %berlange%'"'"); [ -n "$app" ]'
    wait_until 10 granted_count "$app" 1
    [ "${#app}" -le 63 ]
    [[ "$app" != *ü* ]]

    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json "$name"
    [ "$status" -eq 0 ]
    [ "$(py 'd["locks"][0]["key"]')" = "$key" ]
    [ "$(py 'd["locks"][0]["name"]')" = None ]

    printf '%s\n' "$name" >"$TMP/keys"
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --keys "$TMP/keys" --json "$name"
    [ "$(py 'd["locks"][0]["name"]')" = "$name" ]
    [ "$(py 'd["locks"][0]["name_source"]')" = registry ]
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --keys "$TMP/keys" "$name"
    [[ "$output" == *"$name (registry) = key $key: exclusive"* ]]
}

@test "an ordinary role sees who holds, and is told what is hidden" {
    need PGLOCK_TEST_PRIMARY PGLOCK_TEST_ORDINARY
    session st_super "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(72003);"
    wait_until 10 granted_count st_super 1
    session st_wait "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(72003);"
    wait_until 10 waiting st_wait
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_ORDINARY" 72003
    [ "$status" -eq 0 ]
    grep -E "^  holds $(backend st_super) +- +postgres +hidden +hidden +st_super$" <<<"$output"
    # pg_locks.waitstart is not hidden
    grep -E "waits $(backend st_wait) \(exclusive\) +- +postgres +hidden +[0-9]+s +st_wait$" <<<"$output"
    grep -Fx 'note: the client, state and times of 2 sessions of other roles are hidden from role "pglock_user" (grant it pg_read_all_stats)' <<<"$output"
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_ORDINARY" --json 72003
    [ "$(py 'd["locks"][0]["holders"][0]["visible"], d["locks"][0]["holders"][0]["user"], d["locks"][0]["holders"][0]["application_name"]')" = "False postgres st_super" ]
    [ "$(py 'd["locks"][0]["holders"][0]["held_max_s"]')" = None ]
    [ "$(py 'd["locks"][0]["waiters"][0]["parent_pid"]')" = "$(backend st_super)" ]
}

@test "locks are per database: --all-databases shows the others" {
    need PGLOCK_TEST_PRIMARY PGLOCK_TEST_OTHER_DB
    session st_other "$PGLOCK_TEST_OTHER_DB" "select pg_advisory_lock(72004);"
    wait_until 10 granted_count st_other 1
    # not held in this database: exit 1
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --json 72004
    [ "$status" -eq 1 ]
    [ "$(py 'len(d["locks"])')" = 0 ]
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --all-databases --json 72004
    [ "$status" -eq 0 ]
    [ "$(py 'd["locks"][0]["database"]')" = pglock_other ]
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --all-databases 72004
    [[ "$output" == *"key 72004, database pglock_other: exclusive"* ]]
}

@test "a KEY nobody holds: says so and exits 1" {
    need PGLOCK_TEST_PRIMARY
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" 987654321
    [ "$status" -eq 1 ]
    [[ "$output" == "none of the given keys is held or awaited in database "* ]]
}

@test "status works through a pooler (read-only inspection)" {
    need PGLOCK_TEST_PRIMARY PGLOCK_TEST_POOLER
    session st_pooled "$PGLOCK_TEST_PRIMARY" "select pg_advisory_lock(72005);"
    wait_until 10 granted_count st_pooled 1
    run "$PGLOCK_BIN" status -d "$PGLOCK_TEST_POOLER" --json 72005
    [ "$status" -eq 0 ]
    [ "$(py 'd["locks"][0]["holders"][0]["pid"]')" = "$(backend st_pooled)" ]
}

@test "--watch redraws until SIGINT, then exits 0" {
    need PGLOCK_TEST_PRIMARY
    "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" --watch=100ms >"$TMP/watch" 2>&1 &
    pid=$!
    wait_until 10 eval "[ \$(grep -c '^Every 0.1s: pglock status' '$TMP/watch') -ge 2 ]"
    kill -INT "$pid"
    status=0
    wait "$pid" || status=$?
    [ "$status" -eq 0 ]
    # not a tty: plain frames, no escape sequences
    run ! grep -q $'\033' "$TMP/watch"
}

@test "--watch on a tty homes the cursor, clears to end of line, restores the cursor" {
    need PGLOCK_TEST_PRIMARY
    command -v script >/dev/null || skip "script(1) is not installed"
    script -qfec "timeout -s INT 1 $PGLOCK_BIN status -d '$PGLOCK_TEST_PRIMARY' --watch=200ms" \
        "$TMP/tty" >/dev/null || true
    grep -q $'\033\\[H' "$TMP/tty"
    grep -q $'\033\\[K' "$TMP/tty"
    grep -q $'\033\\[?25h' "$TMP/tty"
}

@test "bad options and keys exit 64" {
    run "$PGLOCK_BIN" status --bogus
    [ "$status" -eq 64 ]
    run "$PGLOCK_BIN" status 42:x
    [ "$status" -eq 64 ]
    run "$PGLOCK_BIN" status --watch=0 1
    [ "$status" -eq 64 ]
    run "$PGLOCK_BIN" status --watch=soon 1
    [ "$status" -eq 64 ]
    run "$PGLOCK_BIN" status --keys /nonexistent/keys 1
    [ "$status" -eq 64 ]
    run "$PGLOCK_BIN" status --help
    [ "$status" -eq 0 ]
    [[ "$output" == *"--all-databases"* ]]
}

@test "an unreachable server exits 69" {
    unreachable_exits_69 status
}

# Names pglock does not control (role names here) printed to a terminal:
# C1 control characters (U+0080..U+009F; U+009B is read as CSI, like
# ESC [) are replaced with '?', as C0 controls (ESC, BEL) are.
@test "a role name with U+009B (CSI) is shown with '?' in its place" {
    need PGLOCK_TEST_PRIMARY
    CSI=$(printf '\302\233')     # U+009B in UTF-8
    ROLE="pglock_c1_${CSI}31m_$$"
    KEY=$((7300000000 + $$))
    q "create role \"$ROLE\" login" >/dev/null
    session c1_holder "$PGLOCK_TEST_PRIMARY user='$ROLE'" "select pg_advisory_lock($KEY);"
    wait_until 10 held_by_role
    run --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_PRIMARY" "$KEY"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == *"pglock_c1_?31m_$$"* ]]
    [[ "$output" != *"$CSI"* ]]
}

# Many locks and a crowded key: the table is written in chunks and its
# columns sized over every row first (status_text.c), and a session's locks
# arrive as one list (holders.c).  Every request shows once, in key order,
# the columns line up, and JSON agrees.
@test "3,000 locks of one session and a key shared by 10: every request once, in order, aligned" {
    need PGLOCK_TEST_PRIMARY PGLOCK_BIN
    # a range of keys of this test's own
    BASE=$((800000000 + (RANDOM % 1000) * 10000))
    NS=-$((1000 + RANDOM % 1000))
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
