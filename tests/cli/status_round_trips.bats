#!/usr/bin/env bats
# pglock status: one query per refresh, counted at the harness's proxy
# (round trips = Query + Sync messages), whatever the output form, and one
# per frame under --watch.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_PROXY PGLOCK_TEST_PROXY_CTL
}
teardown() { teardown_run; }

roundtrips() { proxy_cmd count | sed -n 's/.*roundtrips=\([0-9]*\).*/\1/p'; }

@test "one round trip per status, in every form" {
    # Something to show: a holder and a waiter.
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    bg w run -d "$DB" "$K" -- true
    wait_until 10 waiting_on "$K"
    printf 'named = 5\n' >"$out/keys"
    local -a forms=("" "--json" "--all-databases" "$K" "--json $K 1:2 77"
        "--keys $out/keys" "--keys $out/keys @named $K")
    local f
    for f in "${forms[@]}"; do
        proxy_cmd reset >/dev/null
        run $PGLOCK_BIN status -d "$PGLOCK_TEST_PROXY" $f
        # 1: a KEY given is free (1:2, 77)
        [ "$status" -le 1 ]
        [ "$(roundtrips)" -eq 1 ] || { echo "status $f: $(proxy_cmd count)"; false; }
    done
    touch "$out/h.release"
    finish h 10
    finish w 10
}

@test "--watch: one round trip per frame" {
    proxy_cmd reset >/dev/null
    bg s status -d "$PGLOCK_TEST_PROXY" --watch=100ms
    frames() { grep -c '^Every 0.1s: pglock status' "$out/s.out"; }
    wait_until 10 eval '[ "$(frames)" -ge 4 ]'
    kill -INT "$(pid_of s)"
    finish s 10
    [ "$(status_of s)" = 0 ]
    # Each frame was drawn after its own query; a query may have been sent
    # for a frame the interrupt cut short.
    local rt n
    rt=$(roundtrips)
    n=$(frames)
    echo "frames $n, round trips $rt"
    [ "$rt" -ge "$n" ]
    [ "$rt" -le $((n + 1)) ]
}
