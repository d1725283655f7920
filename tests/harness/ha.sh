#!/usr/bin/env bash
# ha.sh — a throwaway high-availability cluster for pglock's tests: three
# PostgreSQL 15 nodes under Patroni, one etcd node as Patroni's store,
# HAProxy in front, TLS on every server.  See tests/harness/README.md.
#
#   ha.sh run [--sync] [--] COMMAND [ARG...]
#       start the cluster, run COMMAND with the PGLOCK_HA_* variables
#       exported, stop everything and exit with COMMAND's status.
#   ha.sh start [--sync]      start, print the env file's path
#   ha.sh stop [DIR]          stop everything, remove DIR
#   ha.sh exec [--node N | --primary] [--] COMMAND...
#       COMMAND in the hub's network namespace (HAProxy and etcd are
#       there, every node is reachable), or beside node N or beside the
#       current primary (in its namespace: it shares that node's fate in
#       a partition).
#   ha.sh primary | wait-primary [SECS] | switchover | failover | freeze |
#         watchdog-reset | partition | heal | dcs-stop | pids | env |
#         patronictl ARG...
#       actions on a running cluster, found by $PGLOCK_HA_DIR.
#
# Root only: every server runs in a network namespace of the cluster's own
# (ip netns, nft), as the `postgres` user.
set -euo pipefail

# harness.sh's helpers (as_owner, alive, wait_for, wait_gone, emit, ...).
# shellcheck source=tests/harness/harness.sh
. "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/harness.sh"
HA=$(readlink -f "${BASH_SOURCE[0]}")
PG15=/usr/lib/postgresql/15/bin
PGCLIENT=$PG15
NODES=(1 2 3)
HUB_ADDR=10.0.0.1       # etcd and HAProxy, on the hub's loopback
ETCD_PORT=2379
PRIMARY_PORT=5000       # HAProxy: the node whose Patroni answers /primary
REPLICA_PORT=5001       # HAProxy: the nodes that answer /replica
# Every namespace is the cluster's own, so fixed ports never collide with
# anything else on the machine, and every node uses PostgreSQL's own.
NODE_PG_PORT=5432
NODE_API_PORT=8008

say() { echo "ha: $*" >&2; }

# Polls a command until it succeeds, for at most $1 seconds of wall time
# (harness.sh's wait_for counts tries, and a try here can take seconds).
wait_secs() {
    local end=$((SECONDS + $1))
    shift
    while [ "$SECONDS" -lt "$end" ]; do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.2
    done
    return 1
}
fail() { say "error: $*"; exit 1; }

node_addr() { echo "10.0.$1.2"; }
ns_of() { cat "$T/ns.$1"; }           # 1..3, or hub

# ---- TLS: a CA made at start; a certificate for each server, whose names
# are its own address and HAProxy's (a client through HAProxy checks the
# node's certificate against the address it dialled).
make_tls() {
    local d=$T/tls n
    mkdir -p "$d"
    openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj /CN=pglock-ha-ca \
        -keyout "$d/ca.key" -out "$d/ca.crt" >/dev/null 2>&1 || fail "openssl: no CA"
    for n in "${NODES[@]}" hub; do
        local addr=$HUB_ADDR
        [ "$n" = hub ] || addr=$(node_addr "$n")
        openssl req -newkey rsa:2048 -nodes -subj "/CN=$n" \
            -keyout "$d/$n.key" -out "$d/$n.csr" >/dev/null 2>&1 || fail "openssl: no key for $n"
        printf 'subjectAltName=IP:%s,IP:%s,DNS:%s\n' "$addr" "$HUB_ADDR" "$n" >"$d/$n.ext"
        openssl x509 -req -in "$d/$n.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" \
            -CAcreateserial -days 2 -extfile "$d/$n.ext" -out "$d/$n.crt" >/dev/null 2>&1 ||
            fail "openssl: no certificate for $n"
        # HAProxy wants certificate and key in one file.
        cat "$d/$n.crt" "$d/$n.key" >"$d/$n.pem"
    done
    rm -f "$d/ca.key" "$d"/*.csr "$d"/*.ext
    chown -R "$PG_USER:" "$d"
    chmod 600 "$d"/*.key "$d"/*.pem
}

# ---- the network: a hub namespace (etcd, HAProxy, the clients) routing
# between three node namespaces, each joined to it by a veth pair
# (node N: 10.0.N.2, the hub's end 10.0.N.1).  Nothing touches the
# machine's own namespace.
make_netns() {
    local base=pglock-ha-${T##*.} n ns hub
    hub=$base-hub
    ip netns add "$hub" || fail "ip netns add failed (root only)"
    echo "$hub" >"$T/ns.hub"
    ip -n "$hub" link set lo up
    ip -n "$hub" addr add "$HUB_ADDR/32" dev lo
    ip netns exec "$hub" sysctl -q -w net.ipv4.ip_forward=1
    for n in "${NODES[@]}"; do
        ns=$base-n$n
        ip netns add "$ns"
        echo "$ns" >"$T/ns.$n"
        ip link add "n$n" netns "$hub" type veth peer name eth0 netns "$ns"
        ip -n "$hub" addr add "10.0.$n.1/24" dev "n$n"
        ip -n "$hub" link set "n$n" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$(node_addr "$n")/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" route add default via "10.0.$n.1"
    done
}

delete_netns() {
    local f
    for f in "$T"/ns.*; do
        [ -f "$f" ] || continue
        ip netns delete "$(cat "$f")" 2>/dev/null || true
    done
}

# Starts "$@" as the servers' owner in namespace $1, in a session of its
# own, output to $2; writes its pid to $3.  setpriv execs, where runuser
# would stay as the server's parent and mirror its stops: a frozen server
# would leave a stopped runuser behind that SIGCONT to the server misses.
spawn_in() {
    local ns=$1 log=$2 pidfile=$3
    shift 3
    (close_inherited_fds
     cd "$T"
     exec setsid ip netns exec "$ns" setpriv --reuid="$PG_USER" --regid="$PG_USER" --init-groups \
        env HOME="$T" sh -c 'echo $$ >"$0"; exec "$@"' "$pidfile" "$@" </dev/null >>"$log" 2>&1) &
}

start_etcd() {
    local d=$T/etcd
    as_owner mkdir -p "$d"
    spawn_in "$(ns_of hub)" "$T/etcd.log" "$T/etcd.pid" /usr/bin/etcd \
        --name etcd --data-dir "$d/data" \
        --listen-client-urls "https://$HUB_ADDR:$ETCD_PORT" \
        --advertise-client-urls "https://$HUB_ADDR:$ETCD_PORT" \
        --listen-peer-urls http://127.0.0.1:2380 \
        --initial-advertise-peer-urls http://127.0.0.1:2380 \
        --initial-cluster etcd=http://127.0.0.1:2380 \
        --cert-file "$T/tls/hub.crt" --key-file "$T/tls/hub.key"
}

etcd_healthy() {
    ip netns exec "$(ns_of hub)" env ETCDCTL_API=3 /usr/bin/etcdctl \
        --endpoints "https://$HUB_ADDR:$ETCD_PORT" --cacert "$T/tls/ca.crt" \
        --dial-timeout 1s --command-timeout 2s endpoint health
}

# Patroni's configuration of node $1.  ttl, loop_wait and retry_timeout
# are Patroni's defaults (30, 10, 10): they are left out on purpose.
write_patroni_config() {
    local n=$1 addr d=$T/node$1 sync=$2
    addr=$(node_addr "$n")
    as_owner mkdir -p "$d"
    cat >"$d/patroni.yml" <<EOF
scope: pglock-ha
name: node$n
log:
  level: INFO
restapi:
  listen: $addr:$NODE_API_PORT
  connect_address: $addr:$NODE_API_PORT
  certfile: $T/tls/$n.crt
  keyfile: $T/tls/$n.key
ctl:
  cacert: $T/tls/ca.crt
etcd3:
  host: $HUB_ADDR:$ETCD_PORT
  protocol: https
  cacert: $T/tls/ca.crt
bootstrap:
  dcs:
    synchronous_mode: $sync
    postgresql:
      use_pg_rewind: true
      parameters:
        max_connections: 100
  initdb:
    - encoding: UTF8
    - locale: C.UTF-8
    - no-sync
  pg_hba:
    - local all all trust
    - local replication all trust
    - hostssl all all 0.0.0.0/0 trust
    - hostssl replication all 0.0.0.0/0 trust
postgresql:
  listen: $addr:$NODE_PG_PORT
  connect_address: $addr:$NODE_PG_PORT
  data_dir: $d/data
  bin_dir: $PG15
  pgpass: $d/pgpass
  use_unix_socket: true
  authentication:
    superuser:
      username: postgres
    replication:
      username: postgres
      sslmode: verify-full
      sslrootcert: $T/tls/ca.crt
    rewind:
      username: postgres
  basebackup:
    - checkpoint: fast
  parameters:
    unix_socket_directories: $d
    fsync: 'off'
    shared_buffers: 32MB
    ssl: 'on'
    ssl_cert_file: $T/tls/$n.crt
    ssl_key_file: $T/tls/$n.key
    ssl_ca_file: $T/tls/ca.crt
    log_line_prefix: '%m [%p] %q%u@%d '
EOF
    chown "$PG_USER:" "$d/patroni.yml"
}

start_patroni() {
    spawn_in "$(ns_of "$1")" "$T/node$1/patroni.log" "$T/node$1/patroni.pid" \
        /usr/bin/patroni "$T/node$1/patroni.yml"
}

# HAProxy as Patroni's documentation configures it: a health check on each
# node's REST API (over TLS, the certificate verified), and
# on-marked-down shutdown-sessions, so that a client of a node that stops
# answering /primary loses its connection.
start_haproxy() {
    local n srv=
    for n in "${NODES[@]}"; do
        srv+="    server node$n $(node_addr "$n"):$NODE_PG_PORT maxconn 100 check port $NODE_API_PORT check-ssl verify required ca-file $T/tls/ca.crt"$'\n'
    done
    cat >"$T/haproxy.cfg" <<EOF
global
    maxconn 200
defaults
    mode tcp
    retries 2
    timeout client 30m
    timeout connect 4s
    timeout server 30m
    timeout check 5s
listen primary
    bind $HUB_ADDR:$PRIMARY_PORT
    option httpchk OPTIONS /primary
    http-check expect status 200
    default-server inter 3s fall 3 rise 2 on-marked-down shutdown-sessions
$srv
listen replica
    bind $HUB_ADDR:$REPLICA_PORT
    balance roundrobin
    option httpchk OPTIONS /replica
    http-check expect status 200
    default-server inter 3s fall 3 rise 2 on-marked-down shutdown-sessions
$srv
EOF
    chown "$PG_USER:" "$T/haproxy.cfg"
    spawn_in "$(ns_of hub)" "$T/haproxy.log" "$T/haproxy.pid" /usr/sbin/haproxy -db -f "$T/haproxy.cfg"
}

# psql in the hub with the clients' TLS settings; $1: a conninfo.
hub_psql() {
    local conn=$1
    shift
    ip netns exec "$(ns_of hub)" "$PGCLIENT/psql" -X -q -A -t -v ON_ERROR_STOP=1 "$conn" "$@"
}

tls_conn() { echo "sslmode=verify-full sslrootcert=$T/tls/ca.crt user=postgres dbname=postgres connect_timeout=2"; }

# The current leader's node number, from the nodes' own REST API.
primary_node() {
    local n
    for n in "${NODES[@]}"; do
        if ip netns exec "$(ns_of hub)" curl -fsS -m 2 --cacert "$T/tls/ca.crt" \
            -o /dev/null "https://$(node_addr "$n"):$NODE_API_PORT/primary" 2>/dev/null; then
            echo "$n"
            return 0
        fi
    done
    return 1
}

# Patroni's view, from the leader's REST API: one leader, every member
# running, and (synchronous_mode) a synchronous standby named.
patroni_settled() {
    local p=$1
    ip netns exec "$(ns_of hub)" curl -fsS -m 2 --cacert "$T/tls/ca.crt" \
        "https://$(node_addr "$p"):$NODE_API_PORT/cluster" |
        python3 -c '
import json, sys
m = json.load(sys.stdin)["members"]
roles = [x["role"] for x in m]
ok = (len(m) == 3 and roles.count("leader") == 1
      and all(x["state"] == "running" for x in m)
      and (sys.argv[1] != "true" or roles.count("sync_standby") == 1))
sys.exit(0 if ok else 1)' "$(cat "$T/sync")"
}

# Ready: Patroni settled, both replicas stream from the primary, and
# HAProxy routes each port.
cluster_ready() {
    local p
    p=$(primary_node) || return 1
    patroni_settled "$p" || return 1
    [ "$(hub_psql "host=$HUB_ADDR port=$PRIMARY_PORT $(tls_conn)" \
        -c "select count(*) from pg_stat_replication where state = 'streaming'")" = 2 ] || return 1
    # The replica port, once per node: its round robin then reaches every
    # server it has up, and a new primary that it still has up (its
    # /replica check fails three times, 3 s apart, before HAProxy drops
    # it: after dcs-stop every node was a replica) is not settled yet.
    local n
    for n in "${NODES[@]}"; do
        [ "$(hub_psql "host=$HUB_ADDR port=$REPLICA_PORT $(tls_conn)" -c 'select pg_is_in_recovery()')" = t ] || return 1
    done
}

write_env() {
    local conn n hosts=
    conn=$(tls_conn)
    for n in "${NODES[@]}"; do hosts+=${hosts:+,}$(node_addr "$n"); done
    {
        echo "# written by $HA"
        emit PGLOCK_HA "$HA"
        emit PGLOCK_HA_DIR "$T"
        emit PGLOCK_HA_NETNS "$(ns_of hub)"
        emit PGLOCK_HA_SYNC "$(cat "$T/sync")"
        emit PGLOCK_HA_CA "$T/tls/ca.crt"
        emit PGLOCK_HA_PRIMARY "host=$HUB_ADDR port=$PRIMARY_PORT $conn"
        emit PGLOCK_HA_REPLICA "host=$HUB_ADDR port=$REPLICA_PORT $conn"
        emit PGLOCK_HA_MULTI "host=$hosts port=$NODE_PG_PORT target_session_attrs=read-write $conn"
        for n in "${NODES[@]}"; do
            emit "PGLOCK_HA_NODE$n" "host=$(node_addr "$n") port=$NODE_PG_PORT $conn"
        done
    } >"$T/env"
}

make_ha_dir() {
    [ "$(id -u)" = 0 ] || fail "the HA cluster needs root (ip netns, nft; servers run as $PG_USER)"
    local c
    for c in /usr/bin/patroni /usr/bin/etcd /usr/sbin/haproxy /usr/bin/curl /usr/bin/openssl "$PG15/postgres"; do
        [ -x "$c" ] || fail "$c not found (see the README's install line)"
    done
    T=$(mktemp -d "${TMPDIR:-/tmp}/pglock-ha.XXXXXX")
    chmod 755 "$T"
    chown "$PG_USER:" "$T"
}

# Starts everything into $T within a bounded time (90 s: Patroni's first
# replicas wait up to one loop_wait before their base backup).
start_all() {
    local sync=$1 n t0=$SECONDS
    echo "$sync" >"$T/sync"
    make_tls
    make_netns
    start_etcd
    wait_secs 20 etcd_healthy || { tail -20 "$T/etcd.log" >&2; fail "etcd did not start"; }
    for n in "${NODES[@]}"; do
        write_patroni_config "$n" "$sync"
        start_patroni "$n"
    done
    start_haproxy
    wait_secs 90 cluster_ready || {
        tail -n 15 "$T"/node*/patroni.log "$T/haproxy.log" >&2
        fail "the cluster was not ready within 90 s"
    }
    write_env
    say "cluster up in $((SECONDS - t0)) s ($T; primary node$(primary_node))"
}

# Every process of node $1: Patroni, the postmaster and its children.
node_pids() {
    local p
    for p in "$T/node$1/patroni.pid" "$T/node$1/data/postmaster.pid"; do
        [ -f "$p" ] || continue
        p=$(head -1 "$p")
        alive "$p" || continue
        echo "$p"
        children_of "$p"
    done
}

all_pids() {
    local n p
    for n in "${NODES[@]}"; do node_pids "$n"; done
    for p in etcd haproxy watchdog; do
        [ -f "$T/$p.pid" ] || continue
        p=$(cat "$T/$p.pid")
        ! alive "$p" || echo "$p"
    done
}

signal_node() {
    local sig=$1 p
    for p in $(node_pids "$2"); do kill "-$sig" "$p" 2>/dev/null || true; done
}

# Stops everything and removes $T.  Patroni is asked first (it stops its
# PostgreSQL); whatever lingers is killed.  Safe to call twice.
stop_all() {
    [ -n "${T:-}" ] && [ -d "$T" ] || return 0
    local n p f
    [ ! -f "$T/watchdog.pid" ] || [ "$(cat "$T/watchdog.pid")" = "$$" ] ||
        { kill -TERM "$(cat "$T/watchdog.pid")" 2>/dev/null || true; }
    for n in "${NODES[@]}"; do
        signal_node CONT "$n"
        p=$(cat "$T/node$n/patroni.pid" 2>/dev/null || true)
        [ -z "$p" ] || kill -TERM "$p" 2>/dev/null || true
    done
    for n in "${NODES[@]}"; do
        p=$(cat "$T/node$n/patroni.pid" 2>/dev/null || true)
        [ -z "$p" ] || wait_gone "$p"
        [ ! -f "$T/node$n/data/postmaster.pid" ] || PGBIN=$PG15 stop_postmaster "$T/node$n/data"
        signal_node KILL "$n"
    done
    for f in haproxy etcd; do
        p=$(cat "$T/$f.pid" 2>/dev/null || true)
        [ -z "$p" ] || { kill -CONT "$p" 2>/dev/null || true; kill -TERM "$p" 2>/dev/null || true; wait_gone "$p"; }
    done
    delete_netns
    if [ -n "${PGLOCK_TEST_KEEP:-}" ]; then say "kept $T"; else rm -rf "$T"; fi
    T=
}

ha_watchdog() {
    local pid=$1
    T=$2
    echo $$ >"$T/watchdog.pid"
    mkfifo "$T/watchdog.fifo"
    exec 9<>"$T/watchdog.fifo"
    while alive "$pid"; do read -r -t 0.5 -u 9 _ || true; done
    stop_all
}

load_ha() {
    T=${PGLOCK_HA_DIR:-}
    [ -n "$T" ] && [ -f "$T/env" ] || fail "no running cluster (PGLOCK_HA_DIR is not set)"
}

patronictl_cmd() {
    ip netns exec "$(ns_of hub)" /usr/bin/patronictl -c "$T/node1/patroni.yml" "$@"
}

# The partition: the node's namespace drops every packet arriving from the
# hub, and the hub drops every packet arriving from the node, forwarded or
# its own (etcd, HAProxy).  Packets are sent and lost: no kernel on either
# side hears the other, no RST, no ICMP.  Inside the node's namespace
# (its loopback) everything goes on: its clients still reach it.
partition_node() {
    local n=$1
    ip netns exec "$(ns_of "$n")" nft -f - <<EOF
table inet pglock_ha {
    chain input { type filter hook input priority 0; policy accept; iifname "eth0" drop; }
}
EOF
    ip netns exec "$(ns_of hub)" nft -f - <<EOF
table inet pglock_ha_n$n {
    chain input { type filter hook input priority 0; policy accept; iifname "n$n" drop; }
    chain forward { type filter hook forward priority 0; policy accept; iifname "n$n" drop; oifname "n$n" drop; }
}
EOF
    echo "$n" >"$T/partitioned"
}

# Resets the frozen node, as Patroni's watchdog resets the machine of a
# node whose Patroni stopped: SIGKILL (which ends a stopped process too)
# to every process of it; heal_all starts it again, as a failed node, and
# it rejoins as a replica of the new primary (pg_rewind).  Never thawed:
# Patroni 3.0.2's etcd3 store, finding its lease expired, takes a new one
# and puts the leader key without a condition (fixed in 3.0.3,
# patroni#2689).  A thawed old leader whose view predates the freeze then
# takes the key back from the promoted standby, demotes it and leads
# again on the old timeline (in the chaos scene it granted the lock for a
# moment beside the promoted primary); a replica that followed the new
# timeline cannot stream from it ("highest timeline 1 of the primary is
# behind recovery timeline 2"), so synchronous_mode may never regain a
# synchronous standby.  Prints the node's number; nothing if none is
# frozen.
reset_frozen() {
    local n
    [ -f "$T/frozen" ] || return 0
    n=$(cat "$T/frozen")
    signal_node KILL "$n"
    wait_secs 10 eval "[ -z \"\$(node_pids $n)\" ]" || fail "node $n outlived SIGKILL"
    touch "$T/node$n/killed"
    rm -f "$T/frozen"
    echo "$n"
}

heal_all() {
    local n
    reset_frozen >/dev/null
    for n in "${NODES[@]}"; do
        ip netns exec "$(ns_of "$n")" nft delete table inet pglock_ha 2>/dev/null || true
        ip netns exec "$(ns_of hub)" nft delete table inet "pglock_ha_n$n" 2>/dev/null || true
        signal_node CONT "$n"
        # A node killed by failover comes back: Patroni rejoins it as a
        # replica (pg_rewind if needed).
        if [ -f "$T/node$n/killed" ]; then
            rm -f "$T/node$n/killed"
            start_patroni "$n"
        fi
    done
    rm -f "$T/partitioned" "$T/frozen"
    local p
    p=$(cat "$T/etcd.pid" 2>/dev/null || true)
    if [ -f "$T/etcd.stopped" ]; then
        rm -f "$T/etcd.stopped"
        start_etcd
        wait_secs 20 etcd_healthy || fail "etcd did not come back"
    fi
    # Back to a settled cluster, so that the next fault starts from one
    # (in synchronous_mode a failover needs a synchronous standby).
    wait_secs 120 cluster_ready || fail "the cluster did not settle within 120 s of the heal"
}

# Waits (at most $1 s) until a primary other than node $2 answers through
# HAProxy, and prints its number.
wait_new_primary() {
    local secs=$1 old=$2 i p
    for ((i = 0; i < secs * 4; i++)); do
        p=$(primary_node 2>/dev/null || true)
        if [ -n "$p" ] && [ "$p" != "$old" ] &&
            hub_psql "host=$HUB_ADDR port=$PRIMARY_PORT $(tls_conn)" -c 'select 1' >/dev/null 2>&1; then
            echo "$p"
            return 0
        fi
        sleep 0.25
    done
    return 1
}

cmd_start() {
    local sync=false
    while [ $# -gt 0 ]; do
        case $1 in
        --sync) sync=true; shift ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    REST=("$@")
    SYNC=$sync
}

main_ha() {
    local cmd=${1:-} n p
    [ $# -eq 0 ] || shift
    case $cmd in
    start)
        cmd_start "$@"
        [ ${#REST[@]} -eq 0 ] || fail "usage: ha.sh start [--sync]"
        make_ha_dir
        trap 'stop_all' EXIT
        start_all "$SYNC"
        disown -a 2>/dev/null || true
        echo "$T/env"
        T=
        trap - EXIT ;;
    run)
        cmd_start "$@"
        [ ${#REST[@]} -gt 0 ] || fail "usage: ha.sh run [--sync] [--] COMMAND [ARG...]"
        make_ha_dir
        trap 'stop_all' EXIT
        trap 'exit 130' INT
        trap 'exit 143' TERM
        (close_inherited_fds; exec setsid "$HA" watchdog $$ "$T" </dev/null >/dev/null 2>&1) &
        start_all "$SYNC"
        set -a
        # shellcheck disable=SC1091
        . "$T/env"
        set +a
        local rc=0
        "${REST[@]}" || rc=$?
        exit "$rc" ;;
    watchdog) ha_watchdog "$@" ;;
    stop)
        T=${1:-${PGLOCK_HA_DIR:-}}
        [ -n "$T" ] && [ -f "$T/env" ] || fail "usage: ha.sh stop DIR"
        stop_all ;;
    exec)
        load_ha
        local where=hub
        while [ $# -gt 0 ]; do
            case $1 in
            --node) where=$2; shift 2 ;;
            --primary) where=$(primary_node) || fail "no primary now"; shift ;;
            --) shift; break ;;
            *) break ;;
            esac
        done
        [ $# -gt 0 ] || fail "usage: ha.sh exec [--node N | --primary] [--] COMMAND..."
        exec ip netns exec "$(ns_of "$where")" "$@" ;;
    primary)
        load_ha
        primary_node || fail "no primary now" ;;
    wait-primary)
        load_ha
        wait_new_primary "${1:-60}" none || fail "no primary within ${1:-60} s" ;;
    switchover)
        # Patroni's planned switchover to a healthy replica; returns once
        # the new primary answers through HAProxy, and prints its number.
        load_ha
        p=$(primary_node) || fail "no primary now"
        patronictl_cmd switchover --leader "node$p" --force >"$T/switchover.log" 2>&1 ||
            { cat "$T/switchover.log" >&2; fail "switchover failed"; }
        n=$(wait_new_primary 60 "$p") || fail "no new primary within 60 s"
        wait_secs 120 cluster_ready || fail "the cluster did not settle within 120 s of the switchover"
        echo "$n" ;;
    failover)
        # The primary's node dies: SIGKILL to its Patroni, its postmaster
        # and every child (backends included, as on a crashed machine).
        # Prints the dead node's number; `heal` starts it again.
        load_ha
        p=$(primary_node) || fail "no primary now"
        signal_node KILL "$p"
        touch "$T/node$p/killed"
        echo "$p" ;;
    freeze)
        # A silent primary: SIGSTOP to its Patroni and every PostgreSQL
        # process; its connections stay open and nothing answers.
        # `watchdog-reset` or `heal` kills it (reset_frozen says why), and
        # `heal` starts it again.
        load_ha
        p=$(primary_node) || fail "no primary now"
        signal_node STOP "$p"
        echo "$p" >"$T/frozen"
        echo "$p" ;;
    partition)
        # The primary's namespace (its node and the clients beside it, see
        # exec --primary) cut off from etcd, HAProxy and the other nodes.
        load_ha
        p=$(primary_node) || fail "no primary now"
        partition_node "$p" || fail "could not cut node $p off"
        echo "$p" ;;
    watchdog-reset)
        # What Patroni's watchdog does to a node whose Patroni stopped
        # (ttl - safety_margin after its last loop, before its leader key
        # can expire): reset_frozen.  Prints its number.
        load_ha
        [ -f "$T/frozen" ] || fail "no frozen node"
        reset_frozen ;;
    heal)
        load_ha
        heal_all ;;
    dcs-stop)
        # etcd stops (SIGKILL): Patroni can no longer renew the leader key.
        load_ha
        p=$(cat "$T/etcd.pid")
        kill -KILL "$p" 2>/dev/null || true
        wait_gone "$p"
        touch "$T/etcd.stopped" ;;
    patronictl)
        load_ha
        patronictl_cmd "$@" ;;
    pids)
        load_ha
        all_pids ;;
    env)
        load_ha
        cat "$T/env" ;;
    *)
        sed -n '2,22p' "$HA" | sed 's/^# \{0,1\}//' >&2
        exit 64 ;;
    esac
}

main_ha "$@"
