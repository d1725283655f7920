#!/usr/bin/env bash
# tests/chaos/chaos.sh [--tap] [--seed N] [--duration D] [--faults "K..."]
#                      [--scenes "S..."] BUILD
#
# Random faults against pglock, and a checker that proves no two jobs
# overlapped (tests/chaos/README.md).  Three scenes, each a third of D
# (default 60s; 90, 90s, 10m): hosts talking to the primary directly,
# through PgBouncer in transaction mode, and to the harness's partition
# server, some across its network namespace by TCP, others by its Unix
# socket; and (as root, tests/harness/ha.sh) a Patroni cluster behind
# HAProxy, over TLS, whose faults are switchovers, failovers, a frozen or
# partitioned primary and etcd's loss.  Each host of the first two has its own cuttable proxy (the
# harness's pglock_test_proxy binary).  Each host loops `pglock run --try`,
# `run --wait`, `lead`, `run` as an ordinary user whose job goes through a
# setuid root program (a sudo), and the library's managed hold
# (hold_host.c, thread and loop mode, a third of them without a lease) on
# one key; tests/chaos/job.sh writes the CLI jobs' lines.  A third of the
# run and lead jobs are recorded (--record), and the checker compares each
# recorded run with what its jobs' lines say happened.  One fault at a time, at random moments, from a
# schedule drawn from the seed: the same --seed and --duration replay it.
#
# Runs inside tests/harness/harness.sh (starts one when not already in
# one).  As root it adds the partition scene and the sudo jobs (the
# partition server and setpriv need root); otherwise it says so and runs
# without them.  Exit 0 when the checker (check.py) finds nothing; otherwise the
# logs are kept and their directory printed.  --tap prints TAP for
# tests/run.sh.
set -uo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ARGS=("$@")
TAP=0 SEED="" DURATION=60s ONLY="" SCENES="direct pooler partition ha"
while [ $# -gt 0 ]; do
    case $1 in
    --tap) TAP=1; shift ;;
    --seed) SEED=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --faults) ONLY=$2; shift 2 ;;     # only these kinds (a mutation test)
    --scenes) SCENES=$2; shift 2 ;;   # only these scenes, in their order
    -*) echo "chaos: unknown option $1" >&2; exit 64 ;;
    *) break ;;
    esac
done
[ $# -eq 1 ] && [ -d "$1" ] || { echo "usage: chaos.sh [--tap] [--seed N] [--duration D] [--faults \"K...\"] [--scenes \"S...\"] BUILD" >&2; exit 64; }
for s in $SCENES; do
    [[ " direct pooler partition ha " = *" $s "* ]] || { echo "chaos: unknown scene $s" >&2; exit 64; }
done
BUILD=$(cd "$1" && pwd)
case $DURATION in
*m) SECS=$((${DURATION%m} * 60)) ;;
*s) SECS=${DURATION%s} ;;
*) SECS=$DURATION ;;
esac
[[ $SECS =~ ^[0-9]+$ ]] && [ "$SECS" -ge 10 ] || { echo "chaos: bad duration $DURATION (at least 10s)" >&2; exit 64; }
[ -n "$SEED" ] || SEED=$((RANDOM * 32768 + RANDOM))
[[ $SEED =~ ^[0-9]+$ ]] || { echo "chaos: bad seed $SEED" >&2; exit 64; }

if [ -n "${PGLOCK_TEST_SERVER:-}" ]; then
    # Faults need the harness's servers (restarts, PgBouncer, the proxy).
    [ "$TAP" = 0 ] || echo "1..1"
    echo "ok 1 - chaos # skip needs the harness's servers, not PGLOCK_TEST_SERVER"
    exit 0
fi
if [ -z "${PGLOCK_TEST_DIR:-}" ]; then
    exec "$SRC/tests/harness/harness.sh" run --build "$BUILD" -- "$0" "${ARGS[@]}"
fi
# The ha scene's cluster (root only: network namespaces), asynchronous,
# for the whole run: ha.sh's watchdog removes it whatever happens to us.
if [[ " $SCENES " = *" ha "* ]] && [ -z "${PGLOCK_HA_DIR:-}" ] && [ "$(id -u)" = 0 ]; then
    exec "$SRC/tests/harness/ha.sh" run -- "$0" "${ARGS[@]}"
fi

PGLOCK=$BUILD/pglock
PROXY=$BUILD/tests/pglock_test_proxy
HOLD=$BUILD/tests/pglock_test_chaos_hold
JOB=$SRC/tests/chaos/job.sh
HARNESS=$PGLOCK_TEST_HARNESS
KEY=914142                  # pg_locks: classid=0 objid=914142 objsubid=1
LEASE=3s KILL_AFTER_MS=500  # T_c 2 s; faults that freeze last PAST_LEASE
LEASE_MS=3000
PAST_LEASE=4
D=$BUILD/chaos/seed-$SEED
rm -rf "$D"
mkdir -p "$D/live" || exit 70
mkfifo "$D/sleep.fifo" || exit 70
exec 9<>"$D/sleep.fifo"     # read -t on it: a pause without a fork

# Sudo jobs: pglock runs as nobody, and its job calls become_root (a
# minimal sudo, tests/tools/become_root.c) installed setuid root here; so
# the jobs' files must be nobody's to write too.  Root only.
BECOME_ROOT=
if [ "$(id -u)" = 0 ] && command -v setpriv >/dev/null; then
    BECOME_ROOT=$D/become_root
    install -o root -g root -m 4755 "$BUILD/tests/pglock_test_become_root" "$BECOME_ROOT" || exit 70
    touch "$D/jobs.log" && chmod 666 "$D/jobs.log" "$D/sleep.fifo" &&
        chmod 777 "$D" "$D/live" || exit 70
fi
NETNS=${PGLOCK_TEST_PARTITION_NETNS:-}
PART_HOSTS=3                # the partition scene's: the last by the socket

say() {
    if [ "$TAP" = 1 ]; then echo "# $*"; else echo "chaos: $*"; fi
}
# Timestamps: ${EPOCHREALTIME/./}, µs, without the fork a $(...) would cost
# (the host loops take one every 100 ms).
nap() { read -r -t "$1" -u 9 _; }
# The current scene's server (the primary, or the partition server by its
# socket, which a partition never cuts).
SCENE_DB=$PGLOCK_TEST_PRIMARY SCENE_NS=()
psql_q() { psql_on "$SCENE_DB" "$@"; }
psql_on() {
    local db=$1
    shift
    "${SCENE_NS[@]}" "$PGLOCK_PGCLIENT/psql" -X -q -A -t -v ON_ERROR_STOP=1 "$db" "$@" </dev/null
}

# A process (not a zombie) exists.
running() {
    local s
    read -r s 2>/dev/null <"/proc/$1/stat" || return 1
    s=${s##*) }
    [ "${s%% *}" != Z ]
}

# Every process that carries our marker: pglock, its watchdog, the jobs.
marked_pids() {
    local f
    for f in /proc/[0-9]*/environ; do
        grep -qzx "CHAOS_DIR=$D" "$f" 2>/dev/null && { f=${f#/proc/}; echo "${f%/environ}"; }
    done
}

# where_stuck PID: what a pglock that did not end is doing, for the logs:
# the state and kernel wait of it and its children, and its stack when
# gdb is installed.
where_stuck() {
    local p
    for p in "$1" $(pgrep -P "$1"); do
        echo "== pid $p: $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
        grep -E '^(State|SigPnd|ShdPnd|SigBlk)' "/proc/$p/status" 2>/dev/null
        echo "wchan: $(cat "/proc/$p/wchan" 2>/dev/null)"
    done
    ! command -v gdb >/dev/null || timeout 8 gdb -batch -p "$1" -ex bt 2>&1
}

# ---- hosts ---------------------------------------------------------------

# host_loop NAME CONNINFO STOPFILE [NETNS]: one simulated host, until
# STOPFILE; inside network namespace NETNS when given.
host_loop() {
    local h=$1 conn=$2 stopfile=$3 netns=${4:-}
    local r mode beats ign life pid t0 el rc termed hang step lease rec l startw endw
    local -a args cmd pre=() errl
    [ -z "$netns" ] || pre=(ip netns exec "$netns")
    RANDOM=$((SEED + $(cksum <<<"$h" | cut -d' ' -f1)))
    while [ ! -e "$stopfile" ]; do
        # Most jobs are short (0.2-1.5 s), a quarter outlive the lease
        # (4-10 s): a frozen pglock must not let those run on.
        r=$((RANDOM % 100)) beats=$((4 + RANDOM % 26)) ign=$((RANDOM % 4 == 0 ? 1 : 0))
        [ $((RANDOM % 4)) != 0 ] || beats=$((80 + RANDOM % 120))
        life=20000
        if [ "$r" -lt 30 ]; then
            mode=try args=(run --try --fencing-token)
        elif [ "$r" -lt 45 ]; then
            mode=wait args=(run --wait=10s --fencing-token)
        elif [ "$r" -lt 55 ]; then
            # The holder, of whatever kind, is asked to stop; a library
            # host does not watch for it, and is waited for.
            mode=replace args=(run --replace --wait=10s --fencing-token)
        elif [ "$r" -lt 75 ]; then
            mode=lead args=(lead)
            if [ $((RANDOM % 2)) = 1 ]; then
                args+=("--restart=$((RANDOM % 200))ms") life=$((1500 + RANDOM % 4000))
            fi
        elif [ "$r" -lt 90 ]; then
            # The library's managed hold: steps of 50-250 ms (under the
            # caller's budget T_s/6), as long in all as a job's beats.
            mode=lib-thread step=$((50 + RANDOM % 201))
            [ $((RANDOM % 2)) = 0 ] || mode=lib-loop
            args=("$((RANDOM % 2 * 10000))")
            # A third without a lease: the options' default, dead_peer_ms
            # keeping the same T_s.
            lease=$LEASE_MS
            [ $((RANDOM % 3)) != 0 ] || lease=dead_peer=$LEASE_MS
        elif [ -n "$BECOME_ROOT" ]; then
            mode=sudo args=(run --wait=10s --fencing-token)
        else
            mode=wait args=(run --wait=10s --fencing-token)
        fi
        # A third of the run and lead jobs leave a row in pglock.runs
        # (the sudo jobs' user may not write it).
        rec=0
        if [[ $mode = try || $mode = wait || $mode = lead ]] && [ $((RANDOM % 3)) = 0 ]; then
            rec=1 args+=(--record --host-label "$h")
        fi
        case $mode in
        lib-*)
            cmd=("$HOLD" "$h" "${mode#lib-}" "${args[0]}" "$lease" "$step"
                 "$(((beats * 50 + step - 1) / step))" "$KEY" "$conn") ;;
        sudo)
            # pglock as nobody; its job tries to become root (job.sh).
            cmd=(setpriv --reuid=nobody --regid=nogroup --clear-groups -- env HOME=/nonexistent
                 "$PGLOCK" "${args[@]}" --lease "$LEASE" --kill-after "${KILL_AFTER_MS}ms"
                 -d "$conn" "$KEY" -- "$JOB" "$h" "$mode" "$beats" "$ign" "$BECOME_ROOT") ;;
        *)
            cmd=("$PGLOCK" "${args[@]}" --lease "$LEASE" --kill-after "${KILL_AFTER_MS}ms"
                 -d "$conn" "$KEY" -- "$JOB" "$h" "$mode" "$beats" "$ign") ;;
        esac
        # (ip netns exec, setsid, setpriv and env exec: $! is the pglock's
        # or the library host's pid.)
        CHAOS_DIR=$D "${pre[@]}" setsid "${cmd[@]}" </dev/null 2>"$D/$h.cur" &
        pid=$!
        echo "$pid" >"$D/$h.pglock"
        t0=${EPOCHREALTIME/./} termed=0 hang=0
        while running "$pid"; do
            nap 0.1
            el=$(((${EPOCHREALTIME/./} - t0) / 1000))
            if [ "$termed" = 0 ] && { [ -e "$stopfile" ] || { [ "$mode" = lead ] && [ "$el" -gt "$life" ]; }; }; then
                kill -TERM "$pid" 2>/dev/null
                echo "${EPOCHREALTIME/./} $h $mode $pid" >>"$D/terms.log"
                termed=$el
            elif [ "$termed" = 0 ] && [ "$el" -gt 30000 ]; then
                echo "${EPOCHREALTIME/./} $h $mode pid $pid still running after 30 s" >>"$D/hangs.log"
                kill -TERM "$pid" 2>/dev/null
                echo "${EPOCHREALTIME/./} $h $mode $pid" >>"$D/terms.log"
                termed=$el hang=1
            elif [ "$termed" != 0 ] && [ "$hang" != 2 ] && [ $((el - termed)) -gt 20000 ]; then
                # A job that ignores SIGTERM may run on, lock held, for up
                # to 10 s (check.py holds pglock to 8 s after it ends):
                # this only keeps a stuck pglock from stalling the run.
                echo "${EPOCHREALTIME/./} $h $mode pid $pid still running 20 s after SIGTERM" >>"$D/hangs.log"
                where_stuck "$pid" >"$D/hang-$pid.txt" 2>&1
                kill -KILL "$pid" 2>/dev/null
                hang=2
            fi
        done
        wait "$pid"
        rc=$?
        # What it said of its record (no fork: mapfile and a match), then
        # its lines go to the host's log.
        mapfile -t errl <"$D/$h.cur"
        startw=0 endw=0
        for l in "${errl[@]}"; do
            [[ $l = *"could not record the end of the run"* ]] && endw=$((endw + 1))
            [[ $l = *"could not record the start of the run"* || $l = *"could not reach the run history"* ]] &&
                startw=$((startw + 1))
        done
        [ ${#errl[@]} = 0 ] || printf '%s\n' "${errl[@]}" >>"$D/$h.err"
        echo "${EPOCHREALTIME/./} $h $mode $pid $rc $t0 rec=$rec startw=$startw endw=$endw" >>"$D/exits.log"
        [ "$mode" != try ] || [ "$rc" != 75 ] || nap "0.$((1 + RANDOM % 3))"
    done
}

# ---- faults --------------------------------------------------------------

# Kinds whose loss the server causes (check.py bounds the overlap after
# them).  A cancel is not one of them in any scene: a session lock
# survives it, and so does the pooler scene's holding transaction
# (--mode=xact), whose heartbeat runs under a savepoint, so a cancel
# aborts only the heartbeat.  Every cancel is a silent loss.  In the ha
# scene, a switchover (a fast shutdown), a failover (the node's processes
# SIGKILLed: its kernel closes the sockets) and etcd's loss (Patroni
# demotes the primary: a restart) end the holder's session on the
# server; a frozen or a partitioned primary is silent, and the lock
# passes when Patroni promotes a standby.
SERVER_KINDS="terminate restart-fast restart-immediate restart-pooler switchover failover dcs-stop"
CLIENT_KINDS="kill killpg stop stoppg cut syncrep cancel"
HA_KINDS="switchover failover freeze partition dcs-stop"

# fault KIND SCENE HOST HOLDER: one fault, logged to faults.log.  Its
# target is the pglock that holds the lock when HOLDER is 1 and one does
# (the last job to start says which), else HOST's current pglock.
fault() {
    local kind=$1 scene=$2 h=$3 pid t0 tend='' ok=ok holder detail=
    holder=$(cat "$D/holder" 2>/dev/null)
    if [ "$4" = 1 ] && [[ $holder = "$scene"* ]] && running "${holder#* }"; then
        h=${holder%% *} pid=${holder#* }
    else
        pid=$(cat "$D/$h.pglock" 2>/dev/null)
    fi
    t0=${EPOCHREALTIME/./}
    # (The ha scene's partition is the cluster's: its primary's node.)
    local act=$kind
    [ "$scene" != ha ] || [ "$kind" != partition ] || act=ha-partition
    case $act in
    kill) kill -KILL "$pid" 2>/dev/null ;;
    killpg) kill -KILL -- "-$pid" 2>/dev/null ;;
    stop | stoppg)
        local target=$pid
        [ "$kind" = stop ] || target=-$pid
        kill -STOP -- "$target" 2>/dev/null
        sleep "$PAST_LEASE"
        # The fault's end: taken just before the SIGCONT (no fork), so
        # that a library host's run after it is not undercounted.
        tend=${EPOCHREALTIME/./}
        kill -CONT -- "$target" 2>/dev/null ;;
    cut)
        "$PROXY" --control "$D/$h.ctl" --send cut >/dev/null || ok=failed
        sleep "$PAST_LEASE"
        "$PROXY" --control "$D/$h.ctl" --send heal >/dev/null || ok=failed ;;
    partition)
        # Every packet of the namespace's TCP hosts dropped, both ways,
        # no kernel answering: the socket host gets the lock at T_s.  It
        # waits up to 3 s for a TCP host to hold the lock (the socket
        # host's name is the scene's last).
        local i
        for ((i = 0; i < 30; i++)); do
            holder=$(cat "$D/holder" 2>/dev/null)
            [[ $holder = "$scene"* && $holder != "$scene$PART_HOSTS "* ]] && break
            nap 0.1
        done
        h=${holder%% *} pid=${holder#* } t0=${EPOCHREALTIME/./}
        "$HARNESS" partition-cut || ok=failed
        sleep "$PAST_LEASE"
        "$HARNESS" partition-heal || ok=failed ;;
    terminate)
        psql_q -c "select pg_terminate_backend(pid) from pg_locks
                   where locktype = 'advisory' and granted
                     and classid = 0 and objid = $KEY and objsubid = 1" >/dev/null || ok=failed ;;
    cancel)
        # pg_cancel_backend() of whichever backend holds the key, every
        # millisecond for PAST_LEASE s (paced, not a busy loop, for the
        # CPU's sake): it ends most heartbeats that are in flight.
        local n
        n=$(psql_q -c "create temporary table n as select 0 as n" -c "
            do \$\$ declare p int; begin
              while clock_timestamp() < statement_timestamp() + interval '$PAST_LEASE s' loop
                select pid into p from pg_locks where locktype = 'advisory' and granted
                  and classid = 0 and objid = $KEY and objsubid = 1 limit 1;
                if p is not null and pg_cancel_backend(p) then update n set n = n + 1; end if;
                perform pg_sleep(0.001);
              end loop; end \$\$" -c "select n from n") || ok=failed
        detail=" cancels=${n:-0}" ;;
    restart-fast) "$HARNESS" restart-primary || ok=failed ;;
    restart-immediate)
        "$HARNESS" stop-primary immediate || ok=failed
        "$HARNESS" start-primary || ok=failed ;;
    restart-pooler) "$HARNESS" restart-pooler || ok=failed ;;
    switchover)
        # Patroni's own; it returns once the cluster is settled again.
        "$PGLOCK_HA" switchover >/dev/null || ok=failed ;;
    failover | freeze | ha-partition)
        # The primary's node killed, frozen or cut off, until Patroni has
        # promoted another (the earliest: ttl - loop_wait = 20 s), then
        # healed: a killed node rejoins, a cut one (demoted by its
        # Patroni) is joined again, and the cluster settles.  A frozen
        # node is reset 15 s into the freeze, as Patroni's watchdog
        # would (the earliest it fires: ttl - safety_margin 5 s after a
        # last loop up to loop_wait before): resumed instead, it was a
        # read-write primary for a second beside the promoted one, and a
        # multi-host client took the lock there while another held it on
        # the new primary (seed 4101: a 223 ms overlap; its token on a
        # timeline of the same number, 4, as the new primary's).
        "$PGLOCK_HA" "${act#ha-}" >/dev/null || ok=failed
        if [ "$act" = freeze ]; then
            sleep 15
            "$PGLOCK_HA" watchdog-reset >/dev/null || ok=failed
        fi
        "$PGLOCK_HA" wait-primary 90 >/dev/null || ok=failed
        detail=" promoted_ms=$(((${EPOCHREALTIME/./} - t0) / 1000))"
        "$PGLOCK_HA" heal >/dev/null || ok=failed ;;
    dcs-stop)
        # etcd killed: Patroni demotes the primary once it cannot renew
        # the leader key (retry_timeout); then etcd back and settled.
        local i
        "$PGLOCK_HA" dcs-stop || ok=failed
        for ((i = 0; i < 300; i++)); do "$PGLOCK_HA" primary >/dev/null 2>&1 || break; nap 0.2; done
        detail=" demoted_ms=$(((${EPOCHREALTIME/./} - t0) / 1000))"
        "$PGLOCK_HA" heal >/dev/null || ok=failed ;;
    none) ;;
    syncrep)
        # A commit now waits for a standby that is not there: every token.
        psql_q -c "alter system set synchronous_standby_names = 'nosuch'" -c "select pg_reload_conf()" >/dev/null || ok=failed
        sleep "$PAST_LEASE"
        syncrep_clear || ok=failed ;;
    esac
    # (no pglock on HOST at that moment: the pid column says so, as "-")
    echo "$t0 ${tend:-${EPOCHREALTIME/./}} $kind $h ${pid:--} $ok$detail" >>"$D/faults.log"
    [ "$ok" = ok ]
}

syncrep_clear() {
    psql_q -c "alter system reset synchronous_standby_names" -c "select pg_reload_conf()" >/dev/null
}

# ---- scenes --------------------------------------------------------------

PROXY_PIDS=() HOST_PIDS=()

# scene NAME TARGET_PORT HOSTS SECONDS KIND...: hosts through proxies of
# their own to TARGET_PORT; TARGET_PORT "partition": hosts on the
# partition server, all but the last inside its namespace by TCP, the last
# by the Unix socket, which the partition does not cut; "ha": hosts in the
# HA cluster's hub namespace, the odd ones through HAProxy's primary port,
# the even ones through the three nodes' multi-host conninfo
# (target_session_attrs=read-write), all over TLS (verify-full).
scene() {
    local name=$1 port=$2 n=$3 secs=$4 i h end gap kind fallback holder conn
    shift 4
    local -a kinds=() k
    for k in "$@"; do
        [ -z "$ONLY" ] || [[ " $ONLY " = *" $k "* ]] && kinds+=("$k")
    done
    [ ${#kinds[@]} -gt 0 ] || kinds=(none)
    local stopfile=$D/stop-$name
    say "scene $name: $n hosts for ${secs}s, faults: ${kinds[*]}"
    rm -f "$D/holder" "$stopfile"
    PROXY_PIDS=() HOST_PIDS=()
    SCENE_DB=$PGLOCK_TEST_PRIMARY SCENE_NS=()
    [ "$port" != partition ] || SCENE_DB=$PGLOCK_TEST_PARTITION_SOCKET
    [ "$port" != ha ] || SCENE_DB=$PGLOCK_HA_PRIMARY SCENE_NS=(ip netns exec "$PGLOCK_HA_NETNS")
    "${SCENE_NS[@]}" "$PGLOCK" init -q -d "$SCENE_DB" || { say "pglock init failed on $SCENE_DB"; return 1; }
    SCENE_T0=${EPOCHREALTIME/./}
    if [ "$port" = partition ]; then
        for ((i = 1; i <= n; i++)); do
            if [ "$i" -lt "$n" ]; then
                host_loop "$name$i" "$PGLOCK_TEST_PARTITION_TCP connect_timeout=2" "$stopfile" "$NETNS" \
                    2>>"$D/hosts.err" &
            else
                host_loop "$name$i" "$PGLOCK_TEST_PARTITION_SOCKET connect_timeout=2" "$stopfile" \
                    2>>"$D/hosts.err" &
            fi
            HOST_PIDS+=($!)
        done
    elif [ "$port" = ha ]; then
        for ((i = 1; i <= n; i++)); do
            conn=$PGLOCK_HA_PRIMARY
            [ $((i % 2)) = 1 ] || conn=$PGLOCK_HA_MULTI
            host_loop "$name$i" "$conn" "$stopfile" "$PGLOCK_HA_NETNS" 2>>"$D/hosts.err" &
            HOST_PIDS+=($!)
        done
    else
        scene_proxies "$name" "$port" "$n" "$stopfile" || return 1
    fi
    end=$((SECONDS + secs))
    local rc=0
    while :; do
        # The schedule: drawn from the seed alone, whatever happens at run time.
        gap=$((500 + RANDOM % 2500)) kind=${kinds[RANDOM % ${#kinds[@]}]}
        fallback=$name$((1 + RANDOM % n)) holder=$((RANDOM % 5 != 0 ? 1 : 0))
        nap "$((gap / 1000)).$(printf %03d $((gap % 1000)))"
        [ $SECONDS -lt $((end - PAST_LEASE - 1)) ] || break
        # A cluster fault lasts a minute or two with its heal: none that
        # would run far past the scene's end.
        [[ " $HA_KINDS " != *" $kind "* ]] || [ $SECONDS -lt $((end - 60)) ] || continue
        fault "$kind" "$name" "$fallback" "$holder" || { say "fault $kind could not be applied"; rc=1; break; }
    done
    nap "$((end > SECONDS ? end - SECONDS : 0))"
    scene_stop "$name"
    syncrep_clear || rc=1
    return "$rc"
}

# scene_proxies NAME TARGET_PORT HOSTS STOPFILE: a proxy per host, and
# the hosts through them.
scene_proxies() {
    local name=$1 port=$2 n=$3 stopfile=$4 i h
    for ((i = 1; i <= n; i++)); do
        h=$name$i
        setsid "$PROXY" --listen 0 --target "$port" --control "$D/$h.ctl" \
            --port-file "$D/$h.port" </dev/null >>"$D/proxies.log" 2>&1 &
        PROXY_PIDS+=($!)
    done
    for ((i = 1; i <= n; i++)); do
        h=$name$i
        local tries
        for ((tries = 0; tries < 100; tries++)); do [ -s "$D/$h.port" ] && break; nap 0.05; done
        [ -s "$D/$h.port" ] || { say "proxy of $h did not start"; return 1; }
    done
    for ((i = 1; i <= n; i++)); do
        h=$name$i
        host_loop "$h" "host=127.0.0.1 port=$(cat "$D/$h.port") user=postgres dbname=postgres \
connect_timeout=2" "$stopfile" 2>>"$D/hosts.err" &
        HOST_PIDS+=($!)
    done
}

# Stops a scene's hosts (each TERMs its pglock) and proxies.
scene_stop() {
    local name=$1 p i
    touch "$D/stop-$name"
    for p in "${HOST_PIDS[@]}"; do
        for ((i = 0; i < 400; i++)); do running "$p" || break; nap 0.1; done
        running "$p" && { echo "${EPOCHREALTIME/./} host loop $p of scene $name did not stop" >>"$D/hangs.log"; kill -KILL "$p"; }
        wait "$p" 2>/dev/null
    done
    for p in "${PROXY_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
    HOST_PIDS=() PROXY_PIDS=()
    final_state "$name"
}

# Nothing held, no pglock or job process left (bounded waits).
final_state() {
    local name=$1 i left held
    for ((i = 0; i < 100; i++)); do
        left=$(marked_pids)
        [ -z "$left" ] && break
        nap 0.1
    done
    for p in $left; do
        echo "leftover-process $name $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)" >>"$D/final.log"
        kill -KILL "$p" 2>/dev/null
    done
    # (In the ha scene, on every node: a demoted primary too.)
    local db dbs=("$SCENE_DB")
    [ "$name" != ha ] || dbs=("$PGLOCK_HA_NODE1" "$PGLOCK_HA_NODE2" "$PGLOCK_HA_NODE3")
    for db in "${dbs[@]}"; do
        for ((i = 0; i < 100; i++)); do
            held=$(psql_on "$db" -c "select count(*) from pg_locks where locktype = 'advisory'
                              and classid = 0 and objid = $KEY and objsubid = 1")
            [ "$held" = 0 ] && break
            nap 0.1
        done
        [ "$held" = 0 ] || echo "lock-held $name $held ${db%% port=*}" >>"$D/final.log"
    done
    # The scene's recorded runs, for check.py: times in µs, "-" for null.
    psql_q -F ' ' -c "select id, host, pid, coalesce(fencing_token::text, '-'), coalesce(outcome, '-'),
        coalesce(exit_status::text, '-'), floor(extract(epoch from started_at) * 1e6)::bigint,
        coalesce(floor(extract(epoch from ended_at) * 1e6)::bigint::text, '-')
        from pglock.runs where host like '$name%' and started_at >= to_timestamp($SCENE_T0 / 1e6)
        order by id" >>"$D/runs.log" || echo "runs-unreadable $name" >>"$D/final.log"
    echo "scene-end $name ${EPOCHREALTIME/./}" >>"$D/final.log"
}

cleanup() {
    local f p
    for f in "$D"/stop-*; do [ -e "$f" ] || touch "$f"; done
    touch "$D/stop-direct" "$D/stop-pooler" "$D/stop-partition" "$D/stop-ha"
    for f in "$D"/*.pglock; do
        p=$(cat "$f" 2>/dev/null) && [ -n "$p" ] && kill -CONT -- "-$p" "$p" 2>/dev/null
    done
    for p in "${HOST_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    for p in "${PROXY_PIDS[@]}"; do kill -TERM "$p" 2>/dev/null; done
    [ -z "$NETNS" ] || "$HARNESS" partition-heal 2>/dev/null
    syncrep_clear 2>/dev/null
    [ "$SCENE_DB" = "$PGLOCK_TEST_PRIMARY" ] || { SCENE_DB=$PGLOCK_TEST_PRIMARY; syncrep_clear 2>/dev/null; }
}
trap 'cleanup; exit 130' INT
trap 'cleanup; exit 143' TERM

# ---- main ----------------------------------------------------------------

REPLAY="make chaos SEED=$SEED DURATION=${SECS}s${ONLY:+ FAULTS=\"$ONLY\"}"
[ "$SCENES" = "direct pooler partition ha" ] || REPLAY+=" SCENES=\"$SCENES\""
[ "$TAP" = 0 ] || echo "1..1"
say "seed $SEED, duration ${SECS}s (replay: $REPLAY); logs in $D"
RANDOM=$SEED
PPORT=$PGPORT
BPORT=${PGLOCK_TEST_POOLER#*port=}
BPORT=${BPORT%% *}
status=0
[ -n "$BECOME_ROOT" ] || say "no sudo jobs: they need root (setpriv, a setuid helper)"
# The scenes that can run here, and their shares of the duration: the ha
# scene two (its faults last a minute or two each), the others one.
share() { if [ "$1" = ha ]; then echo 2; else echo 1; fi; }
run_scenes=() shares=0
for s in $SCENES; do
    case $s in
    partition) [ -n "$NETNS" ] || { say "no partition scene: the harness runs no partition server (it needs root)"; continue; } ;;
    ha) [ -n "${PGLOCK_HA_DIR:-}" ] || { say "no ha scene: its cluster (tests/harness/ha.sh) needs root"; continue; } ;;
    esac
    run_scenes+=("$s")
    shares=$((shares + $(share "$s")))
done
left=$SECS
for s in "${run_scenes[@]}"; do
    secs=$((SECS * $(share "$s") / shares))
    [ "$s" != "${run_scenes[-1]}" ] || secs=$left
    left=$((left - secs))
    # shellcheck disable=SC2086  # word lists
    case $s in
    direct) scene direct "$PPORT" 4 "$secs" $CLIENT_KINDS terminate restart-fast restart-immediate ;;
    pooler) scene pooler "$BPORT" 3 "$secs" $CLIENT_KINDS terminate restart-fast restart-immediate restart-pooler ;;
    # The partition server has no restart action: its faults are the
    # client's, the partition, a terminate and a cancel storm.
    partition) scene partition partition "$PART_HOSTS" "$secs" kill killpg stop stoppg syncrep cancel partition terminate ;;
    # No proxy to cut (HAProxy and multi-host are the paths), and Patroni
    # owns synchronous_standby_names: the client's other faults, a
    # terminate, and the cluster's.
    ha) scene ha ha 4 "$secs" kill killpg stop stoppg cancel terminate $HA_KINDS ;;
    esac || status=1
done

python3 -B "$SRC/tests/chaos/check.py" --kill-after-ms "$KILL_AFTER_MS" --server-kinds "$SERVER_KINDS" \
    "$D" >"$D/summary.txt" 2>&1 || status=1
while IFS= read -r l; do say "$l"; done <"$D/summary.txt"
if [ "$status" = 0 ] && [ -z "${CHAOS_KEEP:-}" ]; then
    mkdir -p "$BUILD/chaos" && cp "$D/summary.txt" "$BUILD/chaos/last-summary.txt"
    rm -rf "$D"
    [ "$TAP" = 0 ] || echo "ok 1 - chaos seed=$SEED duration=${SECS}s"
    exit 0
fi
if [ "$status" = 0 ]; then   # CHAOS_KEEP=1: keep the logs of a good run
    say "logs kept in $D"
    [ "$TAP" = 0 ] || echo "ok 1 - chaos seed=$SEED duration=${SECS}s"
    exit 0
fi
say "FAILED: logs kept in $D (replay: $REPLAY)"
[ "$TAP" = 0 ] || echo "not ok 1 - chaos seed=$SEED duration=${SECS}s"
exit 1
