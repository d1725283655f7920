# tests/cli/failover_helpers.bash — what the failover*.bats files share:
# each test starts a primary and its streaming standby of its own (under
# the shared harness's directory: `harness.sh start --under`), because a
# promotion destroys the topology; the shared servers stay intact for the
# suites that follow.
#   load failover_helpers      (after `load helpers`)
# shellcheck disable=SC2154  # out, K: set by setup_run (helpers.bash)

setup() {
    setup_run
    need PGLOCK_TEST_HARNESS PGLOCK_TEST_DIR PGLOCK_BUILD
    OWN=
    local env
    env=$("$PGLOCK_TEST_HARNESS" start --build "$PGLOCK_BUILD" --under "$PGLOCK_TEST_DIR")
    # From here on PGLOCK_TEST_* (and the harness's actions) mean this
    # test's own servers.
    # shellcheck disable=SC1090
    . "$env"
    OWN=$PGLOCK_TEST_DIR
    PRIMARY=$PGLOCK_TEST_PRIMARY_TCP
    STANDBY=$PGLOCK_TEST_STANDBY_TCP
    PPORT=$(port_of "$PRIMARY")
    SPORT=$(port_of "$STANDBY")
    # the standby listed first: libpq must skip it
    MULTI="host=127.0.0.1,127.0.0.1 port=$SPORT,$PPORT user=postgres dbname=postgres target_session_attrs=read-write connect_timeout=2"
}

teardown() {
    if [ -n "${PGLOCK_TEST_PROXY_CTL:-}" ]; then
        proxy_cmd heal >/dev/null 2>&1 || true
    fi
    teardown_run
    [ -z "${OWN:-}" ] || "$PGLOCK_TEST_HARNESS" stop "$OWN"
}

port_of() { local p=${1#*port=}; echo "${p%% *}"; }

# count_on CONNINFO NAME GRANTED(t|f): advisory locks on text key NAME.
count_on() {
    q "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1
         and granted = '$3' and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$2")" "$1"
}
held_on() { [ "$(count_on "$1" "$2" t)" -ge 1 ]; }
one_holder_two_waiters_on() {
    [ "$(count_on "$1" "$2" t)" -eq 1 ] && [ "$(count_on "$1" "$2" f)" -eq 2 ]
}

# leader_job NAME: records its start (time, name, token) in $out/leaders,
# its pid in $out/NAME.jobpid, then runs until killed.
leader_job() {
    local n=$1
    printf '%s' "now=\$(date +%s%N); echo \$\$ > $out/$n.jobpid
      echo \"\$now $n \$PGLOCK_FENCING_TOKEN\" >> $out/leaders
      echo \$now > $out/$n.start
      while :; do sleep 0.05; done"
}

# token_runs FILE N CONNINFO: N runs of `run --try`, each appending its
# fencing token to FILE.
token_runs() {
    local i
    for ((i = 0; i < $2; i++)); do
        "$PGLOCK_BIN" run --fencing-token --try -d "$3" --lease=3s "tok-$K" \
            -c "echo \$PGLOCK_FENCING_TOKEN >> $1" || return 1
    done
}

# said_could_not_connect: a follower (a, b or c) said it could not connect.
said_could_not_connect() {
    cat "$out"/[abc].err 2>/dev/null | grep -q "pglock: warning: could not connect"
}

# The scene both stop modes share: a `run` holder and three `lead`
# contenders on the multi-host conninfo; the primary stopped ($1), the
# standby promoted.  Checks the holder's exit and job, the followers'
# retries, and exactly one leader afterwards, on the new primary.
failover_scene() {
    local mode=$1
    bg h run -d "$MULTI" --lease=3s "run-$K" -c "$(stamp_job h)"
    local n
    for n in a b c; do
        bg "$n" lead -v -d "$MULTI" --lease=3s "$K" -c "$(leader_job "$n")"
    done
    wait_until 10 file_exists "$out/h.jobpid"
    wait_until 10 leaders_at_least 1
    wait_until 10 one_holder_two_waiters_on "$PRIMARY" "$K"
    held_on "$PRIMARY" "run-$K"
    local first hjob ljob
    first=$(last_leader)
    hjob=$(cat "$out/h.jobpid")
    ljob=$(cat "$out/$first.jobpid")

    # Before the promotion the standby refuses a wait at once.
    run -69 "$PGLOCK_BIN" run --wait=5s -d "$STANDBY" "$K-standby" -- true
    [[ "$output" == *"pglock: error: "*"standby"* ]]
    [ "$(grep -c . <<<"$output")" -eq 1 ]

    date +%s%N >"$out/stop"
    "$PGLOCK_TEST_HARNESS" stop-primary "$mode"
    date +%s%N >"$out/stopped"
    # The followers retry through the outage, saying why: before the
    # promotion no host of the list takes a read-write session, so each
    # attempt fails (waited for here, not raced against the promotion).
    wait_until 20 said_could_not_connect
    "$PGLOCK_TEST_HARNESS" promote-standby
    date +%s%N >"$out/promoted"

    # The holder lost its lock with its server: job stopped, exit 74.
    finish h 20
    [ "$(status_of h)" -eq 74 ]
    wait_until 5 gone "$hjob"
    # The leader's job too; then exactly one leader, on the new primary.
    wait_until 10 gone "$ljob"
    wait_until 30 leaders_at_least 2
    wait_until 30 one_holder_two_waiters_on "$STANDBY" "$K"
    [ "$(running_jobs)" -eq 1 ]
    [ "$(leaders)" -eq 2 ]
    # The followers kept retrying through the outage.
    for n in a b c; do
        alive "$(pid_of "$n")"
    done
    local second
    second=$(last_leader)
    report "$mode stop: stopped after $(ms_between "$out/stop" "$out/stopped") ms," \
        "promoted at +$(ms_between "$out/stop" "$out/promoted") ms," \
        "new leader's job ($second, was $first) started at +$(ms_between "$out/stop" "$out/$second.start") ms"

    # The same wait at the old standby now succeeds: it is the primary.
    run -0 "$PGLOCK_BIN" run --wait=5s -d "$STANDBY" "$K-standby" -- true
}

# route_standby_through_proxy: the standby streams through this test's
# proxy, so that the replication link can be cut.
route_standby_through_proxy() {
    need PGLOCK_TEST_PROXY PGLOCK_TEST_PROXY_CTL
    q "ALTER SYSTEM SET primary_conninfo = 'host=127.0.0.1 port=$(port_of "$PGLOCK_TEST_PROXY") user=postgres application_name=standby'" "$STANDBY"
    q "select pg_reload_conf()" "$STANDBY"
    wait_until 20 eval '[ "$(q "select count(*) from pg_stat_replication where client_addr is not null and state = '"'streaming'"'")" -eq 1 ]'
}

# standby_caught_up: the standby has replayed everything the primary wrote.
standby_caught_up() {
    local lsn
    lsn=$(q "select pg_current_wal_lsn()")
    wait_until 10 eval '[ "$(q "select pg_last_wal_replay_lsn() >= '"'$lsn'"'" "$STANDBY")" = t ]'
}
