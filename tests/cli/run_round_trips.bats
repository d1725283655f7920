#!/usr/bin/env bats
# pglock run's round trips, counted at the harness's proxy (round trips =
# Query + Sync messages): the setup, the acquire, and the release whose
# answer is also the last ownership check, one each; and a release that
# gets no answer still makes the lock lost (exit 74), not released.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    need PGLOCK_TEST_PROXY PGLOCK_TEST_PROXY_CTL PGLOCK_TEST_PROXY_BIN
}
teardown() {
    proxy_cmd heal >/dev/null 2>&1 || true
    teardown_run
}

roundtrips() { proxy_cmd count | sed -n 's/.*roundtrips=\([0-9]*\).*/\1/p'; }

@test "run --try: setup, acquire, and the release with the last check: 3 round trips" {
    local mode rt
    for mode in session xact; do
        proxy_cmd reset >/dev/null
        run "$PGLOCK_BIN" run --try -d "$PGLOCK_TEST_PROXY" --mode="$mode" "$K" -- true
        [ "$status" -eq 0 ] || { echo "$mode: $output"; false; }
        rt=$(roundtrips)
        echo "$mode: $(proxy_cmd count)"
        [ "$rt" -eq 3 ]
        # released when pglock returns, not when the backend notices
        run ! held "$K"
    done
}

# A losing --try names the holder at the price of one pg_locks read (one
# round trip more); under -q nobody reads the message, so it is not paid.
@test "a losing --try: one round trip more to name the holder, none under -q" {
    bg h run -d "$DB" "$K" -c "$(stamp_job h)"
    wait_until 10 file_exists "$out/h.start"
    proxy_cmd reset >/dev/null
    run -75 --separate-stderr "$PGLOCK_BIN" run --try -d "$PGLOCK_TEST_PROXY" "$K" -- true
    [[ "$stderr" == *"is held by $(uname -n) (backend pid "*"\"$(run_app "$K")\""* ]]
    proxy_cmd count
    [ "$(roundtrips)" -eq 4 ]
    proxy_cmd reset >/dev/null
    run -75 --separate-stderr "$PGLOCK_BIN" run -q --try -d "$PGLOCK_TEST_PROXY" "$K" -- true
    [ -z "$stderr" ]
    proxy_cmd count
    [ "$(roundtrips)" -eq 3 ]
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
}

# lead always takes a fencing token: one more round trip, on a
# connection of its own.
@test "lead: setup, acquire, token, and the release with the last check: 4 round trips" {
    proxy_cmd reset >/dev/null
    run "$PGLOCK_BIN" lead -d "$PGLOCK_TEST_PROXY" "$K" -- true
    [ "$status" -eq 0 ] || { echo "$output"; false; }
    proxy_cmd count
    [ "$(roundtrips)" -eq 4 ]
    run ! held "$K"
}

# The command cuts the network as it ends: the release (the last check)
# gets no answer by the client deadline, so ownership up to the end is
# not proved.
@test "a network cut as the command ends: the release unanswered, exit 74" {
    local mode
    for mode in session xact; do
        run -74 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_PROXY" --mode="$mode" --lease=3s "$K" -c \
            "\"\$PGLOCK_TEST_PROXY_BIN\" --control \"\$PGLOCK_TEST_PROXY_CTL\" --send cut >/dev/null; exit 0"
        [[ "$output" == *"lock \"$K\" lost while the command ran"* ]] || { echo "$mode: $output"; false; }
        proxy_cmd heal >/dev/null
        # the server frees it at the latest at the lease's end
        wait_until 10 not_held "$K"
    done
}

@test "xact hold: the holding transaction's backend terminated as the command ends: exit 74" {
    run -74 "$PGLOCK_BIN" run -d "$DB" --mode=xact --lease=3s "$K" -c \
        "psql -X -q -A -t -c \"select pg_terminate_backend(\$PGLOCK_BACKEND_PID)\" \"$DB\" >/dev/null; exit 0"
    [[ "$output" == *"lost"* ]]
}
