#!/usr/bin/env bats
# The lease against promotion (docs/guarantees.md), shown both ways by one
# freeze of tests/harness/ha.sh's primary, under Patroni's defaults (ttl
# 30, loop_wait 10: the earliest promotion after a silent primary death is
# ttl - loop_wait = 20 s after it).  A standby never had the primary's
# advisory locks, so the lock passes at the promotion, whatever the old
# server's lease: the old job must be gone before it, and the rule is a
# lease no longer than the earliest promotion (doctor --promotion-after).
#
# Two holders, each with a key of its own, run in the hub over the
# multi-host conninfo (target_session_attrs=read-write, straight to the
# nodes: no HAProxy to cut their connections sooner); one has the rule's
# lease (20s), the other a longer one (120s).  Their jobs tick timestamps
# and ignore SIGTERM, so that they live until pglock's SIGKILL at T_c +
# kill-after (the worst case).  Each has a contender beside a standby: a
# `run --wait` over the same conninfo, started after the freeze and
# started again while it exits 69 (no primary answers), so that it takes
# the lock as soon as a primary grants it (the worst case for the holder).
# Tagged async-only: tests/ha/check.sh runs it in the asynchronous variant
# (one freeze and its heal are check-ha's time).  The figures printed are
# measurements; what is asserted is the order of the jobs' timestamps.
# bats file_tags=async-only

load ../support/harness
bats_require_minimum_version 1.5.0

now_ns() { date +%s%N; }
ms_after() { echo $((($2 - $1) / 1000000)); }

# hq CONNINFO SQL: one value, from the hub; nothing if no answer in 3 s.
hq() {
    timeout 3 "$PGLOCK_HA" exec -- psql -X -q -A -t "$1 connect_timeout=1" -c "$2" 2>/dev/null || true
}
node_conn() { local v=PGLOCK_HA_NODE$1; echo "${!v}"; }

# The old job: a tick every 100 ms into $1, SIGTERM ignored.
old_job() { printf 'trap "" TERM; while :; do date +%%s%%N >> %s; sleep 0.1; done' "$1"; }

# holder NAME LEASE: `run --lease=LEASE` of the old job in the hub, in
# the background; its pid (pglock's own: ip netns exec execs) in NAME.pid.
holder() {
    "$PGLOCK_HA" exec -- "$PGLOCK_BIN" run --lease="$2" -d "$PGLOCK_HA_MULTI" "$K-$1" \
        -c "$(old_job "$d/$1.ticks")" >"$d/$1.out" 2>"$d/$1.err" &
    echo $! >"$d/$1.pid"
}

# contender NAME NODE: beside node NODE, `run --wait` of a job that writes
# its start into NAME.start, tried again while it exits 69 (a try meets
# the frozen host, which never answers the startup, and standbys only).
contender() {
    # shellcheck disable=SC2016 # expanded by the inner bash
    "$PGLOCK_HA" exec --node "$2" -- bash -c 'end=$((SECONDS + 120)) st=69
        while [ "$st" = 69 ] && [ "$SECONDS" -lt "$end" ]; do
            st=0
            "$0" run --wait=60s -d "$1" "$2" -c "date +%s%N > $3" || st=$?
            sleep 0.1
        done
        exit "$st"' "$PGLOCK_BIN" "$PGLOCK_HA_MULTI" "$K-$1" "$d/$1.start" \
        >"$d/$1.contender.out" 2>"$d/$1.contender.err" &
    echo $! >"$d/$1.contender.pid"
}

file_exists() { [ -s "$1" ]; }
gone() { ! alive "$(cat "$1")"; }
# ticked_after FILE NS: FILE's last tick is later than NS.
ticked_after() { [ "$(tail -n 1 "$1")" -gt "$2" ]; }

# A node other than $1 answers as a primary, polled straight (not through
# HAProxy), at most $2 s; sets t_promo.
wait_promotion() {
    local old=$1 end=$((SECONDS + $2)) n
    while [ "$SECONDS" -lt "$end" ]; do
        for n in 1 2 3; do
            [ "$n" != "$old" ] || continue
            if [ "$(hq "$(node_conn "$n")" 'select pg_is_in_recovery()')" = f ]; then
                t_promo=$(now_ns)
                return 0
            fi
        done
        sleep 0.2
    done
    return 1
}

# etcd ARGS...: etcdctl against the cluster's store (from node 1's
# patroni.yml), in the hub.
etcd() {
    local host
    host=$(sed -n '/^etcd3:/,/^[^ ]/s/^  host: //p' "$PGLOCK_HA_DIR/node1/patroni.yml")
    "$PGLOCK_HA" exec -- env ETCDCTL_API=3 etcdctl --endpoints "https://$host" \
        --cacert "$PGLOCK_HA_CA" --dial-timeout 1s --command-timeout 2s "$@"
}
json() { python3 -c "import json,sys; d = json.load(sys.stdin); print($1)"; }

# leader_ttl_at_most LEASE S: the leader key's etcd lease LEASE (hex)
# expires within S s.
leader_ttl_at_most() {
    local ttl
    ttl=$(etcd lease timetolive "$1" -w json | json 'd["ttl"]') || return 1
    [ "$ttl" -le "$2" ]
}

# doctor's verdict on LEASE against Patroni's default earliest promotion.
verdict() {
    "$PGLOCK_HA" exec -- "$PGLOCK_BIN" doctor -d "$PGLOCK_HA_PRIMARY" --json \
        --promotion-after=20s --lease="$1" |
        python3 -c 'import json,sys; print([f["status"] for f in json.load(sys.stdin)["findings"] if f["check"] == "promotion"][0])'
}

# The scene, once for both tests: holders rule (20s) and long (120s), the
# primary frozen, the contenders; figures and outcomes in $d.
setup_file() {
    need PGLOCK_HA PGLOCK_HA_DIR PGLOCK_BIN PGLOCK_HA_MULTI
    d=$BATS_FILE_TMPDIR
    K="lease-rule-$$-$RANDOM"
    verdict 20s >"$d/rule.verdict"
    verdict 120s >"$d/long.verdict"
    local p s t0 t_asked st=0 n left
    p=$("$PGLOCK_HA" primary)
    s=$((p % 3 + 1))
    holder rule 20s
    holder long 120s
    wait_until 20 file_exists "$d/rule.ticks"
    wait_until 20 file_exists "$d/long.ticks"
    # The earliest promotion: the leader refreshes its key every loop_wait
    # (10 s), the key expires ttl (30 s) after the last refresh, so the
    # freeze comes shortly before a refresh is due, when the key has 22 s
    # left (etcd counts whole seconds; 21 was too close on a loaded
    # machine: once the refresh came first, and the key had 29 s left).
    local lease scope
    scope=$(sed -n 's/^scope: //p' "$PGLOCK_HA_DIR/node1/patroni.yml")
    lease=$(etcd get "/service/$scope/leader" -w json | json 'd["kvs"][0]["lease"]')
    lease=$(printf %x "$lease")
    wait_until 15 leader_ttl_at_most "$lease" 22
    # The figures count from ha.sh freeze's return: the primary is silent
    # from then at the latest (its own time is printed too).
    t_asked=$(now_ns)
    "$PGLOCK_HA" freeze >"$d/frozen"
    [ "$(cat "$d/frozen")" = "$p" ]
    t0=$(now_ns)
    left=$(etcd lease timetolive "$lease" -w json | json 'd["ttl"]')
    contender rule "$s"
    contender long "$s"
    wait_promotion "$p" 90
    for n in rule long; do
        wait_until 90 file_exists "$d/$n.start"
    done
    # The rule's holder gives up (74) once its job is gone; the long one's
    # job still ticks after its contender's started.
    wait_until 60 gone "$d/rule.pid"
    wait "$(cat "$d/rule.pid")" || st=$?
    echo "$st" >"$d/rule.status"
    wait_until 20 ticked_after "$d/long.ticks" "$(cat "$d/long.start")" || true
    local rule_last long_seen rule_new long_new
    rule_last=$(tail -n 1 "$d/rule.ticks")
    long_seen=$(tail -n 1 "$d/long.ticks")
    rule_new=$(cat "$d/rule.start")
    long_new=$(cat "$d/long.start")
    echo "# one freeze (ha.sh freeze took $(ms_after "$t_asked" "$t0") ms; the leader key then had $left s left): -> promotion $(ms_after "$t0" "$t_promo") ms;" \
        "--lease=20s: -> old job's last tick $(ms_after "$t0" "$rule_last") ms," \
        "-> new job's start $(ms_after "$t0" "$rule_new") ms (gap $(ms_after "$rule_last" "$rule_new") ms);" \
        "--lease=120s: -> new job's start $(ms_after "$t0" "$long_new") ms, the old job still ticked" \
        "at $(ms_after "$t0" "$long_seen") ms (its end would come at T_c 80s + kill-after 10s)" >&3
}

teardown_file() {
    local f
    for f in "$BATS_FILE_TMPDIR"/*.pid; do
        [ -e "$f" ] || continue
        kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
    [ -n "${PGLOCK_HA:-}" ] || return 0
    # What Patroni's watchdog does to the frozen node (deployment.md: it
    # must be on): a reset, never a thaw into a second primary.
    [ ! -s "$BATS_FILE_TMPDIR/frozen" ] || "$PGLOCK_HA" watchdog-reset
    "$PGLOCK_HA" heal
}

@test "the lease the rule gives (20s, for a promotion after ttl - loop_wait = 20s): after a freeze the old job is gone before the new holder's starts" {
    d=$BATS_FILE_TMPDIR
    [ "$(cat "$d/rule.verdict")" = ok ]
    [ "$(cat "$d/rule.status")" = 74 ] || { cat "$d/rule.err"; return 1; }
    [ "$(cat "$d/rule.start")" -gt "$(tail -n 1 "$d/rule.ticks")" ]
}

@test "a lease longer than the rule allows (120s against a promotion after ttl - loop_wait = 20s): after the same freeze the new holder's job starts while the old one still runs" {
    d=$BATS_FILE_TMPDIR
    [ "$(cat "$d/long.verdict")" = problem ]
    [ "$(tail -n 1 "$d/long.ticks")" -gt "$(cat "$d/long.start")" ]
}
