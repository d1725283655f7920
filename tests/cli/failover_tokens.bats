#!/usr/bin/env bats
# shellcheck disable=SC2154  # out, K: set by setup_run (helpers.bash)
# Fencing tokens across a promotion (servers of the test's own, see
# failover_helpers.bash), the standby's link cut at the test's proxy:
# with synchronous replication every token after the promotion is higher
# than every token before and no job gets a token the standby lacks; with
# asynchronous replication the transaction ids repeat, but the promotion's
# new timeline, the token's high bits, keeps every token after it higher.

load helpers
load failover_helpers
bats_require_minimum_version 1.5.0

@test "synchronous replication, link cut: no job gets an unreplicated token; every token after the promotion is higher than every token before" {
    route_standby_through_proxy
    "$PGLOCK_TEST_HARNESS" sync-standby on
    token_runs "$out/before" 5 "$MULTI"
    bg a lead -d "$MULTI" --lease=3s "$K" -c "$(leader_job a)"
    wait_until 10 leaders_at_least 1
    cut -d' ' -f3 "$out/leaders" >>"$out/before"
    proxy_cmd cut
    # The token's commit waits for the standby, which never answers: pglock
    # gives up within the lease (the lock goes with its connection) and
    # the job never starts with a token the standby may lack.
    bg u run --fencing-token --try -d "$MULTI" --lease=3s "tok-$K" -c "echo \$PGLOCK_FENCING_TOKEN >> $out/unacked"
    finish u 10
    [ "$(status_of u)" -eq 69 ]
    grep -q "^pglock: error: lock \"tok-$K\" acquired, but could not take a fencing token" "$out/u.err"
    [ ! -e "$out/unacked" ]
    "$PGLOCK_TEST_HARNESS" stop-primary immediate
    "$PGLOCK_TEST_HARNESS" promote-standby
    wait_until 30 leaders_at_least 2
    token_runs "$out/after" 5 "$MULTI"
    tail -1 "$out/leaders" | cut -d' ' -f3 >>"$out/after"
    local max_before min_after
    max_before=$(sort -n "$out/before" | tail -1)
    min_after=$(sort -n "$out/after" | head -1)
    report "sync: tokens before $(sort -n "$out/before" | tr '\n' ' ');" \
        "run during the cut exited $(status_of u) ($(head -c 160 "$out/u.err"));" \
        "after $(sort -n "$out/after" | tr '\n' ' ')"
    [ "$(wc -l <"$out/before")" -eq 6 ]
    [ "$(wc -l <"$out/after")" -eq 6 ]
    [ "$min_after" -gt "$max_before" ]
}

# lose_tokens FILE: the standby streams through the proxy and has replayed
# everything; the link is cut and 5 tokens are taken on the primary (into
# FILE), which the standby never receives.
lose_tokens() {
    route_standby_through_proxy
    token_runs "$out/replicated" 1 "$PRIMARY"
    standby_caught_up
    proxy_cmd cut
    token_runs "$1" 5 "$PRIMARY"
    local lsn
    lsn=$(q "select pg_current_wal_lsn()")
    [ "$(q "select pg_last_wal_receive_lsn() < '$lsn'" "$STANDBY")" = t ]
}

# higher_than_all BEFORE AFTER: every token in AFTER is above every token
# in BEFORE (one a line).
higher_than_all() {
    [ "$(sort -n "$2" | head -1)" -gt "$(sort -n "$1" | tail -1)" ]
}

# timeline_of CONNINFO: the server's current timeline, as the token reads it.
timeline_of() {
    q "select ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int" "$1"
}

@test "asynchronous replication, link cut: the token taken at once on the promoted standby, before any checkpoint, is higher than every token the old primary gave" {
    lose_tokens "$out/before"
    "$PGLOCK_TEST_HARNESS" stop-primary immediate
    "$PGLOCK_TEST_HARNESS" promote-standby
    # At once: the checkpoint the promotion requests may not have ended,
    # so pg_control_checkpoint() may still name the old timeline.
    token_runs "$out/first" 1 "$STANDBY"
    local ckpt_tl
    ckpt_tl=$(q "select timeline_id from pg_control_checkpoint()" "$STANDBY")
    token_runs "$out/after" 4 "$STANDBY"
    cat "$out/first" >>"$out/after"
    local before after
    before=$(sort -n "$out/before" | tr '\n' ' ')
    after=$(sort -n "$out/after" | tr '\n' ' ')
    report "async: replicated $(cat "$out/replicated"); lost $before;" \
        "after the promotion (timeline $(timeline_of "$STANDBY"), checkpoint's" \
        "timeline then $ckpt_tl): first $(cat "$out/first"), all $after"
    [ "$(wc -l <"$out/before")" -eq 5 ]
    [ "$(wc -l <"$out/after")" -eq 5 ]
    higher_than_all "$out/replicated" "$out/before"
    higher_than_all "$out/before" "$out/first"
    higher_than_all "$out/before" "$out/after"
    [ -z "$(sort -n "$out/before" "$out/after" | uniq -d)" ]
    # the token is the timeline and the transaction id (2^48 = 281474976710656)
    [ "$(timeline_of "$STANDBY")" -eq 2 ]
    [ $(($(cat "$out/first") / 281474976710656)) -eq 2 ]
    [ $(($(sort -n "$out/before" | tail -1) / 281474976710656)) -eq 1 ]
}

@test "asynchronous replication, old primary left running: its tokens after the promotion stay below every token of the new primary" {
    lose_tokens "$out/before"
    "$PGLOCK_TEST_HARNESS" promote-standby
    token_runs "$out/new" 3 "$STANDBY"
    # the old primary, cut off but alive, keeps handing out tokens (split
    # brain): a resource that has seen a new primary's token rejects them
    token_runs "$out/old" 3 "$PRIMARY"
    report "split: old primary before $(sort -n "$out/before" | tr '\n' ' ')," \
        "after $(sort -n "$out/old" | tr '\n' ' '); new primary $(sort -n "$out/new" | tr '\n' ' ')"
    [ "$(wc -l <"$out/old")" -eq 3 ]
    higher_than_all "$out/before" "$out/new"
    higher_than_all "$out/old" "$out/new"
}

# outcome_on CONNINFO KEY: the newest recorded run of KEY, as history
# reads it there ("none" when there is none).
outcome_on() {
    "$PGLOCK_BIN" history --json -d "$1" "$2" |
        python3 -c 'import json, sys; d = json.load(sys.stdin); print(d[0]["outcome"] if d else "none")'
}

@test "asynchronous replication: a recorded run whose end the promoted standby never got is shown as ended in a failover, never running nor succeeded; a run it never saw is not there" {
    route_standby_through_proxy
    "$PGLOCK_BIN" init -q -d "$PRIMARY"
    # started before the cut: the standby gets the start row only
    bg a run --record --fencing-token -d "$PRIMARY" "a-$K" \
        -c "echo \$PGLOCK_FENCING_TOKEN > $out/a.token; while [ ! -e $out/release ]; do sleep 0.05; done"
    wait_until 10 eval "[ -s $out/a.token ]"
    [ "$(outcome_on "$PRIMARY" "a-$K")" = running ]
    standby_caught_up
    # a standby, which has no current WAL file, reads it too (no timeline
    # compared there)
    run -0 "$PGLOCK_BIN" history --json -d "$STANDBY" "a-$K"
    proxy_cmd cut
    touch "$out/release"
    finish a 10
    [ "$(status_of a)" -eq 0 ]
    # after the cut: the standby gets nothing of it
    "$PGLOCK_BIN" run --record --fencing-token -d "$PRIMARY" "b-$K" -- true
    [ "$(outcome_on "$PRIMARY" "a-$K")" = succeeded ]
    [ "$(outcome_on "$PRIMARY" "b-$K")" = succeeded ]
    "$PGLOCK_TEST_HARNESS" stop-primary immediate
    "$PGLOCK_TEST_HARNESS" promote-standby
    local a b
    a=$(outcome_on "$STANDBY" "a-$K")
    b=$(outcome_on "$STANDBY" "b-$K")
    run -2 "$PGLOCK_BIN" check -d "$STANDBY" "a-$K" --within=1h
    local check_a=$output
    run -2 "$PGLOCK_BIN" check -d "$STANDBY" "b-$K" --within=1h
    local check_b=$output
    run -0 "$PGLOCK_BIN" metrics -d "$STANDBY"
    local metrics=$output
    report "on the promoted standby: run a (token $(cat "$out/a.token")) $a; run b $b;" \
        "check a: $check_a; check b: $check_b"
    [ "$a" = failover ]
    [ "$b" = none ]
    [[ "$check_a" == "PGLOCK CRITICAL - a-$K ran when the server failed over (its end is unknown) on "* ]]
    [[ "$check_b" == "PGLOCK CRITICAL - b-$K has no finished run recorded" ]]
    grep -q "^pglock_last_run_outcome{.*name=\"a-$K\",outcome=\"failover\"} 1$" <<<"$metrics"
    run ! grep -E "^pglock_runs_(running|undetermined)\{.*name=\"a-$K\"\}" <<<"$metrics"
    # the history's text says it too
    run -0 "$PGLOCK_BIN" history -d "$STANDBY" "a-$K"
    [[ "${lines[1]}" == *" failover "*" - "* ]]
}
