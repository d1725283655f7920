#!/usr/bin/env bats
# pglock through pgpool-II (Debian's pgpool2) in streaming-replication
# mode with load balancing on, over the lane's primary and standby: every
# read that pgpool may balance goes to the standby (weight 0 on the
# primary), so a lock statement or a heartbeat balanced there would show.
# Each test starts a pgpool of its own: a random free port, a directory
# under the harness's, run as the harness's owner (not root), stopped in
# teardown.  Its log (log_per_node_statement) says which node ran each
# statement.

load helpers
bats_require_minimum_version 1.5.0

PGPOOL=${PGLOCK_PGPOOL:-/usr/sbin/pgpool}

port_of() { local p=${1#*port=}; echo "${p%% *}"; }
free_port() {
    local p
    while :; do
        p=$((20000 + RANDOM % 12000))
        [ -n "$(ss -Hltn "sport = :$p")" ] || { echo "$p"; return; }
    done
}
pool_answers() { psql -X -A -t "$POOL" -c 'select 1' >/dev/null 2>&1; }

setup() {
    setup_run
    need PGLOCK_TEST_DIR PGLOCK_TEST_PRIMARY_TCP PGLOCK_TEST_STANDBY_TCP
    [ -x "$PGPOOL" ] || skip "no $PGPOOL"
    POOLDIR=$(mktemp -d "$PGLOCK_TEST_DIR/pgpool.XXXXXX")
    local port pcp
    port=$(free_port)
    pcp=$(free_port)
    # Not Debian's default port (5433) nor its sockets: a system pgpool
    # may run beside.  No health or replication checks: the test's own
    # statements are what the log shows.
    cat >"$POOLDIR/pgpool.conf" <<EOF
backend_clustering_mode = 'streaming_replication'
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$POOLDIR'
pcp_listen_addresses = ''
pcp_port = $pcp
pcp_socket_dir = '$POOLDIR'
pid_file_name = '$POOLDIR/pgpool.pid'
logdir = '$POOLDIR'
log_destination = 'stderr'
log_per_node_statement = on
backend_hostname0 = '127.0.0.1'
backend_port0 = $(port_of "$PGLOCK_TEST_PRIMARY_TCP")
backend_weight0 = 0
backend_hostname1 = '127.0.0.1'
backend_port1 = $(port_of "$PGLOCK_TEST_STANDBY_TCP")
backend_weight1 = 1
load_balance_mode = on
sr_check_period = 0
sr_check_user = 'postgres'
health_check_period = 0
failover_on_backend_error = off
enable_pool_hba = off
num_init_children = 8
max_pool = 1
EOF
    : >"$POOLDIR/pcp.conf"
    chown -R "$(stat -c %U "$PGLOCK_TEST_DIR")" "$POOLDIR"
    (cd "$POOLDIR" && exec runuser -u "$(stat -c %U "$PGLOCK_TEST_DIR")" -- \
        setsid "$PGPOOL" -n -f "$POOLDIR/pgpool.conf" -F "$POOLDIR/pcp.conf" \
        >"$POOLDIR/pgpool.log" 2>&1 </dev/null) 3>&- &
    POOL="host=127.0.0.1 port=$port user=postgres dbname=postgres connect_timeout=5"
    wait_until 30 pool_answers || { tail -20 "$POOLDIR/pgpool.log"; return 1; }
    # pgpool found which node is the primary
    [ "$(psql -X -A -t "$POOL" -c 'show pool_nodes' | tr -d '\000' | cut -d'|' -f7 | head -1)" = primary ]
}

# pgpool's main process, by its pid file; its children are in its session.
pool_gone() { [ -z "$(pgrep -s "$1")" ]; }
teardown() {
    teardown_run
    [ -n "${POOLDIR:-}" ] || return 0
    local pid
    pid=$(cat "$POOLDIR/pgpool.pid" 2>/dev/null) || return 0
    kill -INT "$pid" 2>/dev/null || true # fast shutdown
    wait_until 20 pool_gone "$pid"
}

# node_lines NODE: the log's statements of pglock run's lock connection
# that node NODE ran.
node_lines() { grep "pglock run .*: LOG:  DB node id: $1 " "$POOLDIR/pgpool.log" || true; }
beats_on_primary() { [ "$(node_lines 0 | grep -c 'SELECT pg_backend_pid(), current_setting')" -ge 2 ]; }

@test "through pgpool-II with load balancing, the lock, its heartbeats and its release run on the primary, never on the standby" {
    # The job: the lock held on the primary and not on the standby, then
    # two heartbeats on the primary before it ends.
    run -0 "$PGLOCK_BIN" run --lease=3s -d "$POOL" "$K" -- bash -c "
        [ \$(psql -X -A -t '$PGLOCK_TEST_PRIMARY_TCP' -c \"select count(*) from pg_locks where locktype = 'advisory' and granted and ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")\") = 1 ] || exit 10
        [ \$(psql -X -A -t '$PGLOCK_TEST_STANDBY_TCP' -c \"select count(*) from pg_locks where locktype = 'advisory'\") = 0 ] || exit 11
        for i in \$(seq 100); do
            [ \$(grep -c 'pglock run .*DB node id: 0 .*SELECT pg_backend_pid(), current_setting' '$POOLDIR/pgpool.log') -ge 2 ] && exit 0
            sleep 0.1
        done
        exit 12"
    # pglock took pgpool for a pooler (it reports the balanced node's pid)
    # and held the lock in a transaction (--mode=auto).
    node_lines 0 | grep -q 'pg_advisory_xact_lock'
    beats_on_primary
    run -0 node_lines 1
    [[ $output != *pg_advisory* ]]
    [[ $output != *pg_backend_pid* ]]
    [[ $output != *ROLLBACK* ]]
    run -0 "$PGLOCK_BIN" run --try -d "$DB" "$K" -- true # released
}

# three_out_one_in: three contenders ended, one job started.
three_out_one_in() {
    local i ended=0 started
    for i in 1 2 3 4; do alive "$(pid_of "c$i")" || ended=$((ended + 1)); done
    started=$(find "$out" -name 'c?.start' | wc -l)
    [ "$ended" -eq 3 ] && [ "$started" -eq 1 ]
}

@test "a run --try race through pgpool-II has one winner; the others exit 75" {
    local i
    for i in 1 2 3 4; do
        bg "c$i" run --try -d "$POOL" --lease=3s "$K" -c "$(stamp_job "c$i")"
    done
    wait_until 30 three_out_one_in
    for i in 1 2 3 4; do
        [ -e "$out/c$i.start" ] && continue
        finish "c$i" 5
        [ "$(status_of "c$i")" -eq 75 ]
    done
    i=$(basename "$out"/c?.start .start)
    touch "$out/$i.release"
    finish "$i" 30
    [ "$(status_of "$i")" -eq 0 ]
}
