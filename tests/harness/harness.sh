#!/usr/bin/env bash
# harness.sh — throwaway PostgreSQL primary + standby + PgBouncer + proxy
# for pglock's tests and demo.  See tests/harness/README.md.
#
#   harness.sh run [--build DIR] [--tls] [--] COMMAND [ARG...]
#       start everything, run COMMAND with the PGLOCK_TEST_* variables
#       exported, tear everything down (on success, failure or signal) and
#       exit with COMMAND's status.
#   harness.sh start [--build DIR] [--under DIR] [--tls]   start, print the env
#   harness.sh stop [DIR]              file's path; the servers stay up
#                                      until `stop` (or until the harness
#                                      whose DIR they are under stops).
#   harness.sh restart-primary | stop-primary [smart|fast|immediate] |
#              start-primary | restart-pooler | promote-standby |
#              sync-standby on|off | psql [ARG...] | env | pids |
#              partition-cut | partition-heal | partition-exec COMMAND...
#       actions on a running harness, found by $PGLOCK_TEST_DIR.
#
# PGLOCK_PGBIN: the server binaries (initdb, pg_ctl, postgres), default
# Debian's PostgreSQL 15; PGLOCK_PGCLIENT: psql's directory, always
# Debian's by default (psql 15 talks to every newer server).
# With PGLOCK_TEST_SERVER=CONNINFO nothing is started: only
# PGLOCK_TEST_PRIMARY is exported and tests needing the rest skip.
set -euo pipefail

HARNESS=$(readlink -f "${BASH_SOURCE[0]}")
SRCDIR=$(cd "$(dirname "$HARNESS")/../.." && pwd)
PGBIN=${PGLOCK_PGBIN:-/usr/lib/postgresql/15/bin}
PGCLIENT=${PGLOCK_PGCLIENT:-/usr/lib/postgresql/15/bin}
PGBOUNCER=${PGLOCK_PGBOUNCER:-/usr/sbin/pgbouncer}
PG_USER=postgres          # the OS user servers run as when we are root
TLS=0                     # --tls: the primary speaks TLS, its conninfos verify it

say() { echo "harness: $*" >&2; }
fail() { say "error: $*"; exit 1; }

# Closes every fd above 2 (except bash's own 255) in the current (sub)shell:
# a server must not inherit the caller's pipes, or whoever reads them (bats,
# make, a CI runner) waits for their end as long as the server lives.
close_inherited_fds() {
    local fd
    for fd in /proc/$BASHPID/fd/*; do
        fd=${fd##*/}
        case $fd in 0 | 1 | 2 | 255) ;; *) eval "exec $fd>&-" 2>/dev/null || true ;; esac
    done
}

# Servers are started through `setsid -w`: in a session of their own, a
# signal a test sends to its process group (or a Ctrl-C) never reaches
# them; the harness stops them itself.
#
# Runs a command as the user who owns the servers, from a directory that
# user can read (postgres warns about an unreadable cwd otherwise), with no
# inherited fds beyond stdin, stdout and stderr.
as_owner() {
    local owner
    owner=$(stat -c %U "$T")
    if [ "$(id -un)" = "$owner" ]; then
        (cd "$T" && close_inherited_fds && "$@")
    elif [ "$(id -u)" = 0 ]; then
        (cd "$T" && close_inherited_fds && runuser -u "$owner" -- "$@")
    else
        fail "the harness runs as $owner; run this as $owner or root"
    fi
}

# True if something listens on TCP port $1 (IPv4 or IPv6); /proc/net, so
# that no iproute2/net-tools is needed.
port_listening() {
    local hex
    hex=$(printf '%04X' "$1")
    grep -qE "^ *[0-9]+: [0-9A-F]+:$hex [0-9A-F]+:[0-9A-F]+ 0A " \
        /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# Children of pid $1, one a line (from /proc; no procps needed).  The
# kernel's list when it keeps one (CONFIG_PROC_CHILDREN): scanning every
# process, a cat each, takes minutes on a machine that runs thousands.
children_of() {
    local f stat
    if [ -r "/proc/$1/task/$1/children" ]; then
        cat /proc/"$1"/task/*/children 2>/dev/null | tr ' ' '\n' | grep -v '^$' || true
        return 0
    fi
    for f in /proc/[0-9]*/stat; do
        stat=$(cat "$f" 2>/dev/null) || continue
        stat=${stat##*) }
        set -- "$1" $stat
        [ "$3" = "$1" ] && { f=${f#/proc/}; echo "${f%/stat}"; }
    done
    return 0
}

# A port below the kernel's ephemeral range (so no outgoing connection can
# hold it) that nothing listens on now.  Callers start each server before
# picking the next port, and retry if another program won the race.
pick_port() {
    local lo p tries=0
    lo=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
    [ "$lo" -gt 21000 ] || lo=32768
    while :; do
        p=$((20000 + (RANDOM * 32768 + RANDOM) % (lo - 20000)))
        tries=$((tries + 1))
        [ "$tries" -lt 200 ] || fail "no free port found"
        if ! port_listening "$p"; then
            echo "$p"
            return
        fi
    done
}

# Polls a command until it succeeds, at most $1 seconds.
wait_for() {
    local secs=$1 i
    shift
    for ((i = 0; i < secs * 20; i++)); do
        if "$@" >/dev/null 2>&1; then return 0; fi
        sleep 0.05
    done
    return 1
}

psql_q() { "$PGCLIENT/psql" -X -q -A -t -v ON_ERROR_STOP=1 "$@"; }

# Stops one postmaster for good: pg_ctl, then SIGKILL if it lingers.
stop_postmaster() {
    local data=$1 mode=${2:-immediate} pid
    [ -f "$data/postmaster.pid" ] || return 0
    pid=$(head -1 "$data/postmaster.pid")
    as_owner "$PGBIN/pg_ctl" -D "$data" -m "$mode" -w -t 20 stop >/dev/null 2>&1 || true
    if alive "$pid"; then
        kill -KILL "$pid" 2>/dev/null || true
        wait_gone "$pid"
    fi
}

# True while pid runs.  A zombie does not run: our daemons are reparented
# to PID 1, which may reap them late (in containers, much later).  With
# read, not $(cat): the watchdog asks twice a second for the whole run,
# and a subshell and a cat each time cost every harness 15 s of CPU in a
# make check.
alive() {
    local stat
    { read -r stat <"/proc/$1/stat"; } 2>/dev/null || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

wait_gone() {
    local pid=$1 i
    for ((i = 0; i < 200; i++)); do
        alive "$pid" || return 0
        sleep 0.05
    done
    kill -KILL "$pid" 2>/dev/null || true
}

# Starts a postmaster on its configured port and waits until it answers.
start_postmaster() {
    local data=$1 log=$2 port=$3
    as_owner setsid -w "$PGBIN/pg_ctl" -D "$data" -l "$log" -w -t 30 start >/dev/null 2>&1 || return 1
    wait_for 20 psql_q "host=$T port=$port user=postgres dbname=postgres" -c 'select 1'
}

# Starts a postmaster on a fresh free port, retrying if another program
# grabbed the port in the meantime.  Prints the port.
start_on_free_port() {
    local data=$1 log=$2 port tries
    for tries in 1 2 3 4 5; do
        port=$(pick_port)
        echo "port = $port" >>"$data/postgresql.conf"
        if start_postmaster "$data" "$log" "$port"; then
            echo "$port"
            return 0
        fi
        grep -q "could not bind\|Address already in use" "$log" 2>/dev/null || break
        say "port $port was taken, retrying"
    done
    tail -20 "$log" >&2 || true
    fail "could not start the server in $data"
}

run_initdb() {
    as_owner "$PGBIN/initdb" -D "$1" -U postgres -A trust -E UTF8 --locale=C.UTF-8 \
        --no-sync >"$T/initdb.log" 2>&1 || { cat "$T/initdb.log" >&2; fail "initdb failed"; }
}

# init_data DIR: a new cluster in DIR.  Under tests/run.sh, whose lanes and
# suites start dozens of harnesses, one initdb per server version serves
# them all (PGLOCK_TEST_INITDB_CACHE, a directory the run removes): initdb
# costs 2 s of CPU on a 2-core machine, a copy 0.4 s.  The first harness
# runs it under a lock; the others wait for it, then copy.
init_data() {
    local cache=${PGLOCK_TEST_INITDB_CACHE:-} key
    if [ -n "$cache" ] && [ -d "$cache" ] && [ -w "$cache" ]; then
        key=$cache/$(printf '%s' "$PGBIN" | tr -c 'A-Za-z0-9' _)
        (
            flock 9
            [ -d "$key" ] || { run_initdb "$key.new" && mv "$key.new" "$key"; }
        ) 9>"$key.lock" || fail "initdb failed"
        as_owner cp -a "$key" "$1" || fail "could not copy $key"
        return 0
    fi
    run_initdb "$1"
}

start_primary_server() {
    local d=$T/data
    init_data "$d"
    cat >>"$d/postgresql.conf" <<EOF
# --- pglock test harness
listen_addresses = '127.0.0.1'
unix_socket_directories = '$T'
fsync = off
synchronous_commit = off
full_page_writes = off
max_connections = 100
shared_buffers = 32MB
wal_level = replica
max_wal_senders = 10
ssl = off
log_line_prefix = '%m [%p] %q%u@%d '
EOF
    cat >"$d/pg_hba.conf" <<'EOF'
# pglock_pw always needs its password; everyone else is trusted.
local   all          pglock_pw                  scram-sha-256
host    all          pglock_pw   127.0.0.1/32   scram-sha-256
host    all          pglock_pw   ::1/128        scram-sha-256
local   all          all                        trust
host    all          all         127.0.0.1/32   trust
host    all          all         ::1/128        trust
local   replication  all                        trust
host    replication  all         127.0.0.1/32   trust
EOF
    [ "$TLS" = 0 ] || enable_tls "$d"
    # The standby's copy, taken while the primary is stopped (see below).
    as_owner cp -a "$d" "$T/standby"
    spawn_partition_server
    PPORT=$(start_on_free_port "$d" "$T/primary.log")
    psql_q "host=$T port=$PPORT user=postgres dbname=postgres" >/dev/null <<'EOF'
CREATE ROLE pglock_user LOGIN;
SET password_encryption = 'scram-sha-256';
CREATE ROLE pglock_pw LOGIN PASSWORD 'pglock-secret';
CREATE DATABASE pglock_other;
EOF
    SERVER_VERSION_NUM=$(psql_q "host=$T port=$PPORT user=postgres dbname=postgres" \
        -c 'SHOW server_version_num')
}

# --tls: a CA made now, a certificate for 127.0.0.1 and localhost signed
# by it, and ssl = on in the data directory $1 (the standby's and the
# partition's copies inherit it).  Elliptic-curve keys: a fraction of
# RSA's cost, in a harness many suites start.
enable_tls() {
    local d=$T/tls
    mkdir -p "$d"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 \
        -subj /CN=pglock-test-ca -keyout "$d/ca.key" -out "$d/ca.crt" >/dev/null 2>&1 &&
        openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
            -keyout "$d/server.key" -out "$d/server.csr" >/dev/null 2>&1 &&
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$d/server.ext" &&
        openssl x509 -req -in "$d/server.csr" -CA "$d/ca.crt" -CAkey "$d/ca.key" -CAcreateserial \
            -days 2 -extfile "$d/server.ext" -out "$d/server.crt" >/dev/null 2>&1 ||
        fail "openssl could not make the test certificates"
    rm -f "$d/ca.key" "$d/server.csr" "$d/server.ext"
    chmod 600 "$d/server.key"
    chown -R "$(stat -c %U "$T")" "$d"
    cat >>"$1/postgresql.conf" <<EOF
ssl = on
ssl_cert_file = '$d/server.crt'
ssl_key_file = '$d/server.key'
EOF
}

# The standby is a cold copy of the primary's data directory, taken after
# initdb before the primary first started, plus standby.signal and
# primary_conninfo: no pg_basebackup, so it works for every server version
# with Debian's client tools (pg_basebackup 15 cannot stream from 16 and
# newer).  It replays from that copy's checkpoint onwards by streaming
# from the primary (the roles and database created since included).
start_standby_server() {
    local d=$T/standby
    as_owner touch "$d/standby.signal"
    # application_name=standby: what synchronous_standby_names names.
    echo "primary_conninfo = 'host=$T port=$PPORT user=postgres application_name=standby'" \
        >>"$d/postgresql.conf"
    SPORT=$(start_on_free_port "$d" "$T/standby.log")
    wait_for 20 test "$(psql_q "host=$T port=$SPORT user=postgres dbname=postgres" \
        -c 'select pg_is_in_recovery()' 2>/dev/null)" = t ||
        fail "the standby does not report pg_is_in_recovery()"
}

pooler_answers() {
    # A real query through the pool, not just the admin console.
    psql_q "host=127.0.0.1 port=$BPORT user=postgres dbname=postgres" -c 'select 1'
}

start_pooler() {
    local tries pid
    printf '"postgres" ""\n"pglock_user" ""\n' >"$T/userlist.txt"
    for tries in 1 2 3 4 5; do
        BPORT=$(pick_port)
        cat >"$T/pgbouncer.ini" <<EOF
[databases]
* = host=$T port=$PPORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $BPORT
unix_socket_dir = $T
auth_type = trust
auth_file = $T/userlist.txt
admin_users = postgres
stats_users = postgres
pool_mode = transaction
default_pool_size = 3
max_client_conn = 200
; The common production setting; "options" is NOT ignored, as in a
; default PgBouncer: a client that sends it is refused.
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
; Test every server connection before lending it: after a primary restart
; the pool's old connections are dead, and without the check the next
; client gets "server conn crashed?" instead of a fresh connection.
server_check_delay = 0
logfile = $T/pgbouncer.log
pidfile = $T/pgbouncer.pid
EOF
        chown "$(stat -c %U "$T")" "$T/pgbouncer.ini" "$T/userlist.txt"
        rm -f "$T/pgbouncer.pid"
        as_owner setsid -w "$PGBOUNCER" -d "$T/pgbouncer.ini" >>"$T/pgbouncer.out" 2>&1 || true
        if wait_for 10 pooler_answers; then return 0; fi
        pid=$(cat "$T/pgbouncer.pid" 2>/dev/null || true)
        [ -z "$pid" ] || { kill -TERM "$pid" 2>/dev/null || true; wait_gone "$pid"; }
        grep -q "Address already in use" "$T/pgbouncer.log" "$T/pgbouncer.out" 2>/dev/null || break
        say "port $BPORT was taken, retrying"
    done
    tail -20 "$T/pgbouncer.log" "$T/pgbouncer.out" >&2 || true
    fail "could not start pgbouncer"
}

# ---- the partition server: a real network partition on this host.
#
# A network namespace of the harness's own (named after $T, so that two
# harnesses never share one) holds a PostgreSQL server listening on
# 127.0.0.1:5432 of that namespace only, and on a Unix socket in $T/ns,
# which any process reaches whatever its namespace.  A holder run inside
# the namespace (partition-exec) connects by TCP; partition-cut makes the
# namespace's nftables drop every packet of that port on its loopback as
# it arrives, in both directions, so neither kernel hears the other: no
# ACK, no RST, no keepalive answer, as on a cut cable.  The socket is not
# cut, so a waiter outside still reaches the same server.  Needs root
# (ip netns, nft); run as another user the harness starts without it and
# the tests that need it skip, which fails them under tests/run.sh.
NS_PORT=5432

netns_name() { echo "pglock-${T##*.}"; }

# Runs a command inside the namespace as the servers' owner.
in_ns_as_owner() {
    (cd "$T" && close_inherited_fds &&
     ip netns exec "$NS" runuser -u "$(stat -c %U "$T")" -- "$@")
}

partition_answers() {
    psql_q "host=$T/ns port=$NS_PORT user=postgres dbname=postgres" -c 'select 1'
}

# Starts the partition server from $T/partition (a cold copy of the
# primary's data directory, taken before the primary first started: no
# initdb of its own).  Writes $T/netns once the namespace exists, so that
# stop_all deletes it whatever happens next.
start_partition_server() {
    local d=$T/partition
    NS=$(netns_name)
    ip netns add "$NS" || fail "ip netns add $NS failed (needs root and iproute2)"
    echo "$NS" >"$T/netns"
    ip netns exec "$NS" ip link set lo up || fail "cannot bring lo up in $NS"
    ip netns exec "$NS" nft list tables >/dev/null ||
        fail "nft does not work in $NS (needs nftables and CAP_NET_ADMIN)"
    as_owner mkdir "$T/ns"
    cat >>"$d/postgresql.conf" <<EOF
# --- the partition server (in network namespace $NS)
port = $NS_PORT
unix_socket_directories = '$T/ns'
max_connections = 40
EOF
    in_ns_as_owner setsid -w "$PGBIN/pg_ctl" -D "$d" -l "$T/partition.log" -w -t 30 start \
        >/dev/null 2>&1 || { tail -20 "$T/partition.log" >&2; fail "could not start the partition server"; }
    wait_for 20 partition_answers || fail "the partition server does not answer"
    ip netns exec "$NS" "$PGCLIENT/psql" -X -q -A -t -v ON_ERROR_STOP=1 \
        "host=127.0.0.1 port=$NS_PORT user=postgres dbname=postgres" -c 'select 1' >/dev/null ||
        fail "the partition server does not answer by TCP inside $NS"
}

# In the background, so that it starts while the others do; waited for by
# wait_partition_server.
spawn_partition_server() {
    PARTITION_PID=
    if [ "$(id -u)" != 0 ]; then
        say "no partition server: ip netns and nft need root (its tests will skip)"
        return 0
    fi
    command -v ip >/dev/null || fail "ip not found (install iproute2)"
    command -v nft >/dev/null || fail "nft not found (install nftables)"
    as_owner cp -a "$T/data" "$T/partition"
    start_partition_server &
    PARTITION_PID=$!
}

wait_partition_server() {
    [ -n "${PARTITION_PID:-}" ] || return 0
    wait "$PARTITION_PID" || fail "the partition server did not start"
    NS=$(cat "$T/netns")
}

# The partition's nftables table: every TCP packet to or from the
# server's port is dropped as it comes in on the namespace's loopback.
partition_cut() {
    ip netns exec "$NS" nft -f - <<EOF
table inet pglock_partition {
    chain input {
        type filter hook input priority 0; policy accept;
        tcp dport $NS_PORT drop
        tcp sport $NS_PORT drop
    }
}
EOF
}

partition_heal() {
    if ip netns exec "$NS" nft list table inet pglock_partition >/dev/null 2>&1; then
        ip netns exec "$NS" nft delete table inet pglock_partition
    fi
}

# Stops the partition server and deletes its namespace.
stop_partition_server() {
    local ns
    stop_postmaster "$T/partition"
    ns=$(cat "$T/netns" 2>/dev/null || true)
    [ -z "$ns" ] || ip netns delete "$ns" 2>/dev/null || true
}

start_proxy() {
    local bin=$1 i
    PROXY_BIN=$bin
    (close_inherited_fds
     exec setsid "$bin" --listen 0 --target "$PPORT" --control "$T/proxy.ctl" \
        --port-file "$T/proxy.port" --down-port-file "$T/down.port" \
        </dev/null >>"$T/proxy.log" 2>&1) &
    echo $! >"$T/proxy.pid"
    for ((i = 0; i < 100; i++)); do
        [ -s "$T/proxy.port" ] && break
        alive "$(cat "$T/proxy.pid")" || break
        sleep 0.05
    done
    [ -s "$T/proxy.port" ] || { cat "$T/proxy.log" >&2; fail "the proxy did not start"; }
    XPORT=$(cat "$T/proxy.port")
    DPORT=$(cat "$T/down.port")
}

# Writes $T/env: one `export NAME='value'` per variable.
write_env() {
    local conn="user=postgres dbname=postgres" primary other ordinary proxy_tls='' tls=''
    primary="host=$T port=$PPORT $conn"
    other="host=$T port=$PPORT user=postgres dbname=pglock_other"
    ordinary="host=$T port=$PPORT user=pglock_user dbname=postgres"
    if [ "$TLS" = 1 ]; then
        # The lock connections go by TCP over verified TLS (libpq never
        # uses TLS on a Unix-domain socket).
        tls="sslmode=verify-full sslrootcert=$T/tls/ca.crt"
        primary="host=127.0.0.1 port=$PPORT $conn $tls"
        other="host=127.0.0.1 port=$PPORT user=postgres dbname=pglock_other $tls"
        ordinary="host=127.0.0.1 port=$PPORT user=pglock_user dbname=postgres $tls"
        proxy_tls=" sslmode=disable"
    fi
    {
        echo "# written by $HARNESS"
        emit PGLOCK_TEST_HARNESS "$HARNESS"
        emit PGLOCK_TEST_DIR "$T"
        emit PGLOCK_TEST_PGDATA "$T/data"
        emit PGLOCK_TEST_PRIMARY "$primary"
        emit PGLOCK_TEST_PRIMARY_TCP "host=127.0.0.1 port=$PPORT $conn"
        emit PGLOCK_TEST_OTHER_DB "$other"
        emit PGLOCK_TEST_ORDINARY "$ordinary"
        [ "$TLS" = 0 ] || emit PGLOCK_TEST_TLS_CA "$T/tls/ca.crt"
        emit PGLOCK_TEST_PW_CONNINFO "host=127.0.0.1 port=$PPORT user=pglock_pw dbname=postgres"
        emit PGLOCK_TEST_PW_PASSWORD "pglock-secret"
        emit PGLOCK_TEST_STANDBY "host=$T port=$SPORT $conn"
        emit PGLOCK_TEST_STANDBY_TCP "host=127.0.0.1 port=$SPORT $conn"
        emit PGLOCK_TEST_STANDBY_PGDATA "$T/standby"
        emit PGLOCK_TEST_SERVER_VERSION_NUM "$SERVER_VERSION_NUM"
        emit PGLOCK_PGBIN "$PGBIN"
        emit PGLOCK_PGCLIENT "$PGCLIENT"
        emit PGLOCK_TEST_POOLER "host=127.0.0.1 port=$BPORT $conn"
        emit PGLOCK_TEST_POOLER_ADMIN "host=127.0.0.1 port=$BPORT user=postgres dbname=pgbouncer"
        if [ -n "${XPORT:-}" ]; then
            # The proxy counts protocol messages, which TLS would hide:
            # in clear text even with --tls.
            emit PGLOCK_TEST_PROXY "host=127.0.0.1 port=$XPORT $conn$proxy_tls"
            emit PGLOCK_TEST_PROXY_CTL "$T/proxy.ctl"
            emit PGLOCK_TEST_PROXY_BIN "$PROXY_BIN"
            emit PGLOCK_TEST_DOWN "host=127.0.0.1 port=$DPORT $conn"
        fi
        if [ -n "${NS:-}" ]; then
            emit PGLOCK_TEST_PARTITION_NETNS "$NS"
            # Its TCP conninfo verifies TLS as the primary's does (the
            # partition server is a copy of the primary's data, ssl = on).
            emit PGLOCK_TEST_PARTITION_TCP "host=127.0.0.1 port=$NS_PORT $conn${tls:+ $tls}"
            emit PGLOCK_TEST_PARTITION_SOCKET "host=$T/ns port=$NS_PORT $conn"
        fi
        emit PGHOST "$T"
        emit PGPORT "$PPORT"
        emit PGUSER postgres
        emit PGDATABASE postgres
    } >"$T/env"
}

emit() { printf "export %s='%s'\n" "$1" "${2//\'/\'\\\'\'}"; }

find_proxy() {
    local build=$1
    if [ -n "${PGLOCK_TEST_PROXY_BIN:-}" ]; then echo "$PGLOCK_TEST_PROXY_BIN"; return; fi
    if [ -n "$build" ] && [ -x "$build/tests/pglock_test_proxy" ]; then
        readlink -f "$build/tests/pglock_test_proxy"; return
    fi
    [ -x "$SRCDIR/build/tests/pglock_test_proxy" ] && echo "$SRCDIR/build/tests/pglock_test_proxy"
    return 0
}

# Prints a new temp dir for the servers, owned by the user they run as;
# under $1 if given (a running harness's dir: stopping it stops this too).
make_dir() {
    local under=${1:-${TMPDIR:-/tmp}} dir
    [ -x "$PGBIN/postgres" ] || fail "no PostgreSQL server in $PGBIN (PGLOCK_PGBIN)"
    [ -x "$PGCLIENT/psql" ] || fail "no psql in $PGCLIENT (PGLOCK_PGCLIENT)"
    [ -x "$PGBOUNCER" ] || fail "pgbouncer not found at $PGBOUNCER"
    if [ "$(id -u)" = 0 ] && ! runuser -u "$PG_USER" -- test -x "$PGBIN/postgres"; then
        fail "user $PG_USER cannot run $PGBIN/postgres (is it under /root?)"
    fi
    dir=$(mktemp -d "$under/pglock-harness.XXXXXX")
    chmod 755 "$dir"    # sockets usable by any local user
    if [ "$(id -u)" = 0 ]; then chown "$PG_USER:" "$dir"; fi
    echo "$dir"
}

# Starts everything into $T (a new temp dir, under $2 if given, if unset)
# and writes $T/env.
start_all() {
    local build=$1 proxy
    proxy=$(find_proxy "$build")
    [ -n "$proxy" ] || fail "pglock_test_proxy is not built (build the tests: make)"
    [ -n "${T:-}" ] || T=$(make_dir "${2:-}")
    start_primary_server
    start_proxy "$proxy"
    start_pooler
    start_standby_server
    wait_partition_server
    write_env
}

# A harness that is SIGKILLed cannot clean up: a watchdog in a session of
# its own does it within a second.  Normal teardown ends the watchdog first.
start_watchdog() {
    (close_inherited_fds
     exec setsid "$HARNESS" watchdog "$1" "$T" </dev/null >/dev/null 2>&1) &
    echo $! >"$T/watchdog.pid"
}

cmd_watchdog() {
    local pid=$1
    T=$2
    # Wait with read -t on a fifo nobody writes: no sleep child to outlive us.
    mkfifo "$T/watchdog.fifo"
    exec 9<>"$T/watchdog.fifo"
    while alive "$pid"; do read -r -t 0.5 -u 9 _ || true; done
    # Our parent is gone; if its directory is still there, nobody cleaned.
    rm -f "$T/watchdog.pid"
    stop_all
}

# Stops everything under $T and removes it.  Safe to call twice.
stop_all() {
    [ -n "${T:-}" ] && [ -d "$T" ] || return 0
    local pid f sub
    # Harnesses started `--under` this one (a test's own servers) first.
    for sub in "$T"/pglock-harness.*/; do
        [ -d "$sub" ] || continue
        (T=${sub%/}; stop_all)
    done
    for f in watchdog.pid proxy.pid pgbouncer.pid; do
        pid=$(cat "$T/$f" 2>/dev/null || true)
        [ -n "$pid" ] || continue
        kill -TERM "$pid" 2>/dev/null || true
        wait_gone "$pid"
    done
    stop_postmaster "$T/standby"
    stop_postmaster "$T/data"
    # A harness stopped while it starts: the partition server's start (in
    # the background, bounded by pg_ctl's -t) ends first, so that no
    # postmaster is left running in a namespace deleted under it.
    [ -z "${PARTITION_PID:-}" ] || wait "$PARTITION_PID" 2>/dev/null || true
    stop_partition_server
    if [ -n "${PGLOCK_TEST_KEEP:-}" ]; then
        say "kept $T"
    else
        rm -rf "$T"
    fi
    T=
}

# Loads a running harness's state from $PGLOCK_TEST_DIR.
load_running() {
    [ -z "${PGLOCK_TEST_SERVER:-}" ] || fail "PGLOCK_TEST_SERVER is set: the harness runs no server to act on"
    T=${PGLOCK_TEST_DIR:-}
    [ -n "$T" ] && [ -f "$T/env" ] || fail "no running harness (PGLOCK_TEST_DIR is not set)"
    # shellcheck disable=SC1091
    . "$T/env"
    PPORT=$PGPORT
    PGBIN=$PGLOCK_PGBIN PGCLIENT=$PGLOCK_PGCLIENT
}

# After the primary is back: it answers directly and through the pooler.
wait_primary_usable() {
    wait_for 20 psql_q "$PGLOCK_TEST_PRIMARY" -c 'select 1' || fail "the primary does not answer"
    BPORT=${PGLOCK_TEST_POOLER#*port=}
    BPORT=${BPORT%% *}
    wait_for 20 pooler_answers || fail "the pooler does not answer after the restart"
    # Drop the pool's connections to the old server now, not when a test
    # next happens to draw one.
    psql_q "$PGLOCK_TEST_POOLER_ADMIN" -c 'RECONNECT' >/dev/null 2>&1 || true
}

cmd_run() {
    local build=
    while [ $# -gt 0 ]; do
        case $1 in
        --build) build=$2; shift 2 ;;
        --tls) TLS=1; shift ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    [ $# -gt 0 ] || fail "usage: harness.sh run [--build DIR] [--] COMMAND [ARG...]"
    if [ -n "${PGLOCK_TEST_SERVER:-}" ]; then
        say "using PGLOCK_TEST_SERVER; no standby, pooler or proxy"
        export PGLOCK_TEST_PRIMARY=$PGLOCK_TEST_SERVER
        # PGHOST etc. as libpq resolved them (psql tells us; we never parse
        # conninfo), so that tests relying on libpq's defaults work too.
        local resolved
        resolved=$("$PGCLIENT/psql" -X -q -A -t "$PGLOCK_TEST_SERVER" \
            -c '\echo :HOST' -c '\echo :PORT' -c '\echo :USER' -c '\echo :DBNAME' \
            -c 'SHOW server_version_num' </dev/null) ||
            fail "cannot connect to PGLOCK_TEST_SERVER"
        { read -r PGHOST; read -r PGPORT; read -r PGUSER; read -r PGDATABASE
          read -r PGLOCK_TEST_SERVER_VERSION_NUM; } <<<"$resolved"
        export PGHOST PGPORT PGUSER PGDATABASE PGLOCK_TEST_SERVER_VERSION_NUM
        exec "$@"
    fi
    CHILD=
    trap 'stop_child; stop_all' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    local t0=$SECONDS
    T=$(make_dir)
    start_watchdog $$
    start_all "$build"
    say "servers up in $((SECONDS - t0)) s ($T)"
    set -a
    # shellcheck disable=SC1091
    . "$T/env"
    set +a
    # In the background so that a signal to us is handled at once.
    "$@" <&0 &
    CHILD=$!
    local rc=0
    wait "$CHILD" || rc=$?
    CHILD=
    exit "$rc"
}

stop_child() {
    [ -n "${CHILD:-}" ] || return 0
    kill -TERM "$CHILD" 2>/dev/null || true
    wait_gone "$CHILD"
}

cmd_start() {
    local build='' under=''
    while [ $# -gt 0 ]; do
        case $1 in
        --build) build=$2; shift 2 ;;
        --under) under=$2; shift 2 ;;
        --tls) TLS=1; shift ;;
        *) fail "usage: harness.sh start [--build DIR] [--under DIR] [--tls]" ;;
        esac
    done
    [ -z "$under" ] || [ -d "$under" ] || fail "no directory $under"
    trap 'stop_all' EXIT
    start_all "$build" "$under"
    # The proxy is our child: detach it so that it outlives this shell.
    disown -a 2>/dev/null || true
    local dir=$T
    T=
    trap - EXIT
    echo "$dir/env"
}

main() {
    local cmd=${1:-}
    [ $# -eq 0 ] || shift
    case $cmd in
    run) cmd_run "$@" ;;
    watchdog) cmd_watchdog "$@" ;;
    start) cmd_start "$@" ;;
    stop)
        T=${1:-${PGLOCK_TEST_DIR:-}}
        [ -n "$T" ] && [ -f "$T/env" ] || fail "usage: harness.sh stop DIR"
        stop_all ;;
    restart-primary)
        load_running
        as_owner setsid -w "$PGBIN/pg_ctl" -D "$PGLOCK_TEST_PGDATA" -l "$T/primary.log" -m fast -w -t 30 restart \
            >/dev/null 2>&1 || fail "restart failed"
        wait_primary_usable ;;
    stop-primary)
        load_running
        as_owner "$PGBIN/pg_ctl" -D "$PGLOCK_TEST_PGDATA" -m "${1:-fast}" -w -t 30 stop \
            >/dev/null || fail "stop failed" ;;
    start-primary)
        load_running
        as_owner setsid -w "$PGBIN/pg_ctl" -D "$PGLOCK_TEST_PGDATA" -l "$T/primary.log" -w -t 30 start \
            >/dev/null || fail "start failed"
        wait_primary_usable ;;
    restart-pooler)
        # PgBouncer's immediate shutdown (SIGTERM: every client and server
        # connection closes), then the same config again, same port.
        load_running
        BPORT=${PGLOCK_TEST_POOLER#*port=}
        BPORT=${BPORT%% *}
        local bpid
        bpid=$(cat "$T/pgbouncer.pid" 2>/dev/null || true)
        [ -z "$bpid" ] || { kill -TERM "$bpid" 2>/dev/null || true; wait_gone "$bpid"; }
        as_owner setsid -w "$PGBOUNCER" -d "$T/pgbouncer.ini" >>"$T/pgbouncer.out" 2>&1 ||
            fail "pgbouncer restart failed"
        wait_for 20 pooler_answers || fail "the pooler does not answer after its restart" ;;
    promote-standby)
        # Returns once the standby accepts writes.
        load_running
        as_owner "$PGBIN/pg_ctl" -D "$PGLOCK_TEST_STANDBY_PGDATA" -w -t 30 promote \
            >/dev/null || fail "promote failed"
        wait_for 20 test "$(psql_q "$PGLOCK_TEST_STANDBY" -c 'select pg_is_in_recovery()' \
            2>/dev/null)" = f || fail "the standby is still in recovery" ;;
    sync-standby)
        # on: a commit that asks for it (synchronous_commit = on, as
        # pglock's token transaction does) waits until the standby has
        # flushed it.  Returns once the primary lists the standby so.
        load_running
        local names='' want=async
        case ${1:-} in
        on) names=standby want=sync ;;
        off) ;;
        *) fail "usage: harness.sh sync-standby on|off" ;;
        esac
        psql_q "$PGLOCK_TEST_PRIMARY" -c "ALTER SYSTEM SET synchronous_standby_names = '$names'" \
            -c 'SELECT pg_reload_conf()' >/dev/null || fail "could not set synchronous_standby_names"
        wait_for 20 test "$(psql_q "$PGLOCK_TEST_PRIMARY" -c \
            "select sync_state from pg_stat_replication where application_name = 'standby'" \
            2>/dev/null)" = "$want" || fail "the standby's sync_state did not become $want" ;;
    partition-cut | partition-heal | partition-exec)
        # cut: every packet of the partition server's TCP port is dropped
        # (returns once the rule is in place); heal: deleted again (a
        # no-op when not cut); exec COMMAND...: runs COMMAND inside the
        # namespace, as the caller's user.
        load_running
        NS=${PGLOCK_TEST_PARTITION_NETNS:-}
        [ -n "$NS" ] || fail "this harness runs no partition server (it needs root)"
        case $cmd in
        partition-cut) partition_cut || fail "could not cut the partition" ;;
        partition-heal) partition_heal || fail "could not heal the partition" ;;
        partition-exec)
            [ $# -gt 0 ] || fail "usage: harness.sh partition-exec COMMAND [ARG...]"
            exec ip netns exec "$NS" "$@" ;;
        esac ;;
    psql)
        if [ -z "${PGLOCK_TEST_SERVER:-}" ]; then load_running; fi
        exec "$PGCLIENT/psql" -X "${PGLOCK_TEST_PRIMARY:-$PGLOCK_TEST_SERVER}" "$@" ;;
    env)
        load_running
        cat "$T/env" ;;
    pids)
        # Every process the harness started, one pid a line (servers'
        # children included).
        load_running
        local p
        for p in "$T/data/postmaster.pid" "$T/standby/postmaster.pid" "$T/partition/postmaster.pid" "$T/pgbouncer.pid" "$T/proxy.pid" "$T/watchdog.pid"; do
            [ -f "$p" ] || continue
            p=$(head -1 "$p")
            echo "$p"
            children_of "$p"
        done ;;
    *)
        sed -n '2,23p' "$HARNESS" | sed 's/^# \{0,1\}//' >&2
        exit 64 ;;
    esac
}

# Sourced (by ha.sh, which shares these helpers): define, do not run.
[[ ${BASH_SOURCE[0]} != "$0" ]] || main "$@"
