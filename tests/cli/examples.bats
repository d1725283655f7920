#!/usr/bin/env bats
# The deployment examples work as written: docs/deployment.md's cron line,
# systemd units and timer, docs/examples/*, pglock(1)'s cron line and
# docs/operations.md's crontab lines; also the README's quick start and its
# package lines.  The blocks are looked up by name (doc_block, see
# tests/cli/examples_docs.bats).  They name /usr/bin/pglock, where the
# package puts it (a source install's is /usr/local/bin/pglock), and jobs
# in /usr/local/bin.  Here the build is installed into a temporary prefix,
# mounted on /usr/local in a mount namespace of the test's own (`unshare
# -rm`), and for the package's path its pglock is laid over /usr/bin there
# (an overlay), so the machine's /usr/local and /usr/bin are never touched.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    need PGLOCK_TEST_PRIMARY PGLOCK_BUILD
    out=$BATS_TEST_TMPDIR
    SRC=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    K="examples-$$-$RANDOM"
    install_to "$out/prefix"
    bin=$out/prefix/bin
    # The jobs the examples name, as stubs that say they ran.
    printf '#!/bin/sh\necho "$PGLOCK_KEY" >>%s/billing.ran\n' "$out" >"$bin/billing"
    cp "$bin/billing" "$bin/bill"
    printf '#!/bin/sh\necho $$ >%s/scheduler.started\nexec sleep 60\n' "$out" >"$bin/scheduler"
    chmod +x "$bin/billing" "$bin/bill" "$bin/scheduler"
    # what the package adds to /usr/bin
    mkdir "$out/usr-bin"
    cp "$bin/pglock" "$out/usr-bin/pglock"
}

# A host left running by a failed test (its pid in $bg_pid, still one of
# this shell's jobs: not waited for) is stopped, or bats would wait for it.
teardown() {
    [ -n "${bg_pid:-}" ] && jobs -p | grep -qx "$bg_pid" || return 0
    pkill -TERM -P "$bg_pid" 2>/dev/null || kill -TERM "$bg_pid" 2>/dev/null || true
}

# as_host KIND PREFIX CMD...: CMD with PREFIX mounted on /usr/local, as if
# `sudo make install` had put the build there (KIND source); with KIND
# package, also $out/usr-bin laid over /usr/bin, as if the package had put
# pglock there (the jobs stay in /usr/local/bin).
host_ns='mount --bind "$2" /usr/local &&
    { [ "$1" = source ] || mount -t overlay overlay -o lowerdir="$3":/usr/bin /usr/bin; } &&
    shift 3 && exec "$@"'
as_host() {
    local kind=$1 prefix=$2
    shift 2
    unshare -rm sh -c "$host_ns" sh "$kind" "$prefix" "$out/usr-bin" "$@"
}
# as_host_bg NAME KIND PREFIX CMD...: the same in the background, output in
# $out/NAME.out; its pid (unshare's, which every exec keeps) in $bg_pid.
as_host_bg() {
    local name=$1 kind=$2 prefix=$3
    shift 3
    unshare -rm sh -c "$host_ns" sh "$kind" "$prefix" "$out/usr-bin" "$@" >"$out/$name.out" 2>&1 &
    bg_pid=$!
}

# cron_env: the environment cron gives a command (only PATH=/usr/bin:/bin
# and what the crontab sets; here the harness's server instead of
# db1.internal), then sh -c.
cron_env() {
    cron=(env -i PATH=/usr/bin:/bin HOME="$out" PGHOST="$PGHOST" PGPORT="$PGPORT"
          PGUSER="$PGUSER" PGDATABASE="$PGDATABASE" sh -c)
}

# cron_first_runs KIND CMD: CMD started as cron starts it (cron_env) on a
# host of KIND (as_host), in the background as "first" (its pid in $first);
# returns once its billing ran for $K.  cron is left set for the caller's
# next runs.
cron_first_runs() {
    cron_env
    # (cron's sh -c runs pglock: first is that shell)
    as_host_bg first "$1" "$out/prefix" "${cron[@]}" "$2"
    first=$bg_pid
    wait_until 15 test -s "$out/billing.ran"
    [ "$(cat "$out/billing.ran")" = "$K" ]
}

@test "docs/deployment.md's cron line runs as written under cron's PATH with the package's pglock: one run, then a quiet skip (75); a source install's, with its path" {
    local line cmd
    line=$(doc_block docs/deployment.md deploy-cron | grep -E '^[0-9*]+ [0-9*]+ \* \* \* ')
    # five time fields and the user, then the command
    cmd=$(awk '{ for (i = 1; i <= 6; i++) $i = ""; sub(/^ +/, ""); print }' <<<"$line")
    [[ "$cmd" == '/usr/bin/pglock '*' -- /usr/local/bin/billing' ]]
    cmd=${cmd//nightly-billing/$K}
    local -a cron
    local first
    cron_first_runs package "$cmd"
    # --min-hold keeps it for 10 minutes: a late host skips, and -q keeps
    # it quiet; so does a source install's host, with its path
    run -75 as_host package "$out/prefix" "${cron[@]}" "$cmd"
    [ -z "$output" ]
    run -75 as_host source "$out/prefix" "${cron[@]}" "${cmd/#\/usr\/bin\//\/usr\/local\/bin\/}"
    [ -z "$output" ]
    [ "$(wc -l <"$out/billing.ran")" = 1 ]
    # (the first host stops holding when told to)
    pkill -TERM -P "$first" || kill -TERM "$first"
    local status=0
    wait "$first" || status=$?
    cat "$out/first.out"
    [ "$status" = 143 ]
    wait_until 10 not_held "$K"
    # Without the full path cron would not find a source install's pglock.
    run -127 as_host source "$out/prefix" "${cron[@]}" "${cmd#/usr/bin/}"
}

# cron_command LINE: a crontab line's command (after five time fields).
cron_command() { awk '{ for (i = 1; i <= 5; i++) $i = ""; sub(/^ +/, ""); print }' <<<"$1"; }

@test "pglock(1)'s cron line runs as written under cron's PATH, on the harness's server instead of db1" {
    local cmd
    cmd=$(cron_command "$(doc_block docs/pglock.1 man-cron)")
    [[ "$cmd" == '/usr/bin/pglock run '*'-d "host=db1 dbname=app" nightly-billing -- /usr/local/bin/billing' ]]
    cmd=${cmd//\"host=db1 dbname=app\"/$(printf %q "$PGLOCK_TEST_PRIMARY")}
    cmd=${cmd//nightly-billing/$K}
    local -a cron
    local first
    cron_first_runs package "$cmd"
    # --min-hold: held after billing ended, until told to stop
    held "$K"
    pkill -TERM -P "$first" || kill -TERM "$first"
    local status=0
    wait "$first" || status=$?
    cat "$out/first.out"
    [ "$status" = 143 ]
}

@test "docs/operations.md's crontab lines run under cron's PATH: a recorded run, then the metrics file says pglock_up 1" {
    local block cmd setting
    block=$(doc_block docs/operations.md ops-cron)
    # the crontab's variable assignments, then its one command
    local -a cron
    cron_env
    # (before cron_env's closing `sh -c`, after its env -i)
    while read -r setting; do
        cron=("${cron[@]:0:${#cron[@]}-2}" "$setting" sh -c)
    done < <(grep -E '^[A-Z_]+=' <<<"$block")
    [[ "${cron[*]}" == *PGLOCK_RECORD=1* ]]
    cmd=$(cron_command "$(grep -E '^[0-9*]+ ' <<<"$block")")
    [[ "$cmd" == "/usr/bin/pglock run "*"-d app nightly-billing -- /usr/local/bin/bill" ]]
    cmd=${cmd//-d app/-d $(printf %q "$PGLOCK_TEST_PRIMARY")}
    cmd=${cmd//nightly-billing/$K}
    "$PGLOCK_BIN" init -q -d "$PGLOCK_TEST_PRIMARY"
    run -0 as_host package "$out/prefix" "${cron[@]}" "$cmd"
    [ "$(cat "$out/billing.ran")" = "$K" ]
    run -0 "$PGLOCK_BIN" history -d "$PGLOCK_TEST_PRIMARY" "$K"
    [[ "$output" == *succeeded* ]]
    # the node_exporter line, into this test's directory instead
    cmd=$(cron_command "$(doc_block docs/operations.md ops-metrics-cron)")
    [[ "$cmd" == "/usr/bin/pglock metrics -d app > /var/lib/node_exporter/"* ]]
    cmd=${cmd//-d app/-d $(printf %q "$PGLOCK_TEST_PRIMARY")}
    cmd=${cmd//\/var\/lib\/node_exporter/$out}
    cron_env
    run -0 as_host package "$out/prefix" "${cron[@]}" "$cmd"
    grep -qx 'pglock_up 1' "$out/pglock.prom"
    [ ! -e "$out/pglock.prom.tmp" ]
}

# source_paths FILE: FILE with a source install's pglock for the package's.
source_paths() { sed 's|/usr/bin/pglock |/usr/local/bin/pglock |g' "$1"; }

@test "the systemd units and the timer pass systemd-analyze verify with the package's paths and with a source install's; the services run as a user and count 143 as success" {
    command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (Debian's systemd package)"
    mkdir "$out/package" "$out/source"
    doc_block docs/deployment.md deploy-systemd >"$out/package/billing.service"
    doc_block docs/deployment.md deploy-timer >"$out/package/billing.timer"
    cp "$SRC"/docs/examples/*.service "$SRC"/docs/examples/*.timer "$out/package/"
    local unit name units=0
    for unit in "$out"/package/*; do
        name=${unit##*/}
        source_paths "$unit" >"$out/source/$name"
        run -0 as_host package "$out/prefix" systemd-analyze verify --recursive-errors=no "$unit"
        [ -z "$output" ]
        run -0 as_host source "$out/prefix" systemd-analyze verify --recursive-errors=no "$out/source/$name"
        [ -z "$output" ]
        units=$((units + 1))
        [[ $name == *.service ]] || continue
        grep -qE '^ExecStart=/usr/bin/pglock ' "$unit"
        grep -qE '^ExecStart=/usr/local/bin/pglock ' "$out/source/$name"
        grep -qE '^SuccessExitStatus=.*\b143\b' "$unit"
        grep -qE '^User=[a-z]+$' "$unit"
        grep -qx 'Wants=network-online.target' "$unit"
        grep -qx 'After=network-online.target' "$unit"
    done
    [ "$units" = 3 ]
    # the timer starts billing.service
    grep -qx 'OnCalendar=\*-\*-\* 02:00:00' "$out/package/billing.timer"
    # The check can fail: a unit whose pglock is not there is refused.
    mkdir "$out/empty"
    run ! as_host source "$out/empty" systemd-analyze verify "$out/source/billing.service"
    [[ "$output" == *"/usr/local/bin/pglock"* ]]
    if [ ! -e /usr/bin/pglock ]; then
        run ! as_host source "$out/prefix" systemd-analyze verify "$out/package/billing.service"
        [[ "$output" == *"/usr/bin/pglock"* ]]
    fi
}

@test "the leader unit's ExecStart under Type=notify, as systemd runs it (its notify socket, WatchdogSec= as WATCHDOG_USEC): READY=1, the leader's STATUS, watchdog pings; stopped as systemd stops it: the scheduler goes, pglock exits 143" {
    local unit=$SRC/docs/examples/scheduler-leader.service exec wd
    exec=$(sed -n 's/^ExecStart=//p' "$unit")
    exec=${exec//scheduler -- /$K -- }
    [[ "$exec" == "/usr/bin/pglock lead "*" $K -- /usr/local/bin/scheduler" ]]
    grep -qx 'Type=notify' "$unit"
    # WatchdogSec= in seconds, as systemd passes it: in microseconds
    wd=$(sed -n 's/^WatchdogSec=\([0-9]*\)s$/\1/p' "$unit")
    [ -n "$wd" ]
    local -a argv
    read -ra argv <<<"$exec"
    # No systemd runs units here (not PID 1 in the test machine): its
    # notify socket is a socket of the test's own.
    receiver sd "$out/notify.sock"
    NOTIFY_SOCKET=$out/notify.sock WATCHDOG_USEC=$((wd * 1000000)) \
        as_host_bg lead package "$out/prefix" "${argv[@]}"
    local pid=$bg_pid
    wait_until 15 file_exists "$out/scheduler.started"
    held "$K"
    wait_until 10 said sd 'READY=1$'
    wait_until 10 said sd 'STATUS=leader since [0-9-]+T[0-9:]+Z, token [0-9]+$'
    # the lease's heartbeats (5 s) ping the watchdog
    wait_until 15 said sd 'WATCHDOG=1$'
    # KillMode=mixed: SIGTERM to the main process alone.
    kill -TERM "$pid"
    local status=0
    wait "$pid" || status=$?
    cat "$out/lead.out"
    [ "$status" = 143 ]
    gone "$(cat "$out/scheduler.started")"
    wait_until 10 not_held "$K"
    kill "$(cat "$out/sd-receiver.pid")"
}

# packages BLOCK: the packages of BLOCK's `sudo apt-get install -y` lines,
# one a line, sorted (npm's line apart).
packages() {
    grep -E '^sudo apt-get install -y ' <<<"$1" | grep -v ' npm$' | sed 's/.*install -y //' |
        tr -s ' ' '\n' | grep . | sort -u
}

@test "the README's build, test and package-building lines are .ci/run's packages, no more, no less, npm only where none is; the bench line names what bench/ uses" {
    local build tests deb bench ci p
    build=$(packages "$(doc_block README.md install-build)")
    tests=$(packages "$(doc_block README.md install-test)")
    deb=$(packages "$(doc_block README.md install-deb)")
    bench=$(packages "$(doc_block README.md install-bench)")
    [ -n "$build" ] && [ -n "$tests" ] && [ -n "$bench" ]
    ci=$(sed -n '/^packages=(/,/)/p' "$SRC/.ci/run" | sed 's/packages=(//; s/)//' | tr -s ' ' '\n' | grep . | sort -u)
    [ -n "$ci" ]
    # build and test apart: no package on both lines
    [ -z "$(comm -12 <(echo "$build") <(echo "$tests"))" ]
    diff <(printf '%s\n%s\n%s\n' "$build" "$tests" "$deb" | sort -u) <(echo "$ci")
    doc_block README.md install-test | grep -qx 'command -v npm || sudo apt-get install -y npm'
    # make bench: each package's program or library is one bench/ uses,
    # and nothing from the build line is repeated
    [ -z "$(comm -12 <(echo "$build") <(echo "$bench"))" ]
    for p in $bench; do
        case $p in
        postgresql) grep -q 'harness.sh' "$SRC/bench/run.sh" ;;
        libhiredis-dev) grep -q 'hiredis' "$SRC/bench/CMakeLists.txt" ;;
        etcd-server) grep -q 'command -v etcd ' "$SRC/bench/etcd_side.sh" ;;
        etcd-client) grep -q 'command -v etcdctl ' "$SRC/bench/etcd_side.sh" ;;
        *) grep -qE "(command -v|^| )$p( |$)" "$SRC/bench/run.sh" ;;
        esac || { echo "the README's bench line names $p, which bench/ does not use"; false; }
    done
    for p in hyperfine redis-server etcd-server etcd-client strace python3; do
        grep -qx "$p" <<<"$bench" || { echo "bench/run.sh uses $p, the README's bench line omits it"; false; }
    done
}

@test "the README's quick start runs as written: one of three hosts runs the job, two are told who holds it, status names it" {
    # the first block builds and starts the harness, which this test has
    # done already: it must name them as they are
    [ "$(doc_block README.md quick-start-build)" = "$(printf '%s\n' make '. "$(tests/harness/harness.sh start --build build)"')" ]
    doc_block README.md quick-start-race >"$out/race.sh"
    grep -q 'pglock run --try --host-label "$host" nightly-billing' "$out/race.sh"
    mkdir "$out/tree"
    ln -s "$PGLOCK_BUILD" "$out/tree/build"
    run -0 --separate-stderr sh -c 'cd "$1" && . "$2"' sh "$out/tree" "$out/race.sh"
    echo "$output"
    echo "$stderr"
    [ "$(grep -c 'runs the job$' <<<"$output")" = 1 ]
    # each loser names the winner's host and backend pid
    local winner
    winner=$(sed -n 's/ runs the job$//p' <<<"$output")
    [ "$(grep -c "is held by $winner (backend pid [0-9]*, .*\"pglock run nightly-billing on $winner\".*the command was not run$" <<<"$stderr")" = 2 ]
    [[ "$output" == *"nightly-billing (application_name) = key -3003901418071974465: exclusive"* ]]
    grep -E "^  BACKEND PID +HOST +USER +CLIENT +HOW LONG +APPLICATION$" <<<"$output"
    grep -E "^  holds [0-9]+ +$winner +postgres +local +.* +pglock run nightly-billing on $winner$" <<<"$output"
}

@test "docs/examples/billing.cron, billing.service, billing.timer and scheduler-leader.k8s.yaml are docs/deployment.md's cron, systemd, timer and Kubernetes leader examples (the packages ship them)" {
    diff <(doc_block docs/deployment.md deploy-cron) "$SRC/docs/examples/billing.cron"
    diff <(doc_block docs/deployment.md deploy-systemd) "$SRC/docs/examples/billing.service"
    diff <(doc_block docs/deployment.md deploy-timer) "$SRC/docs/examples/billing.timer"
    diff <(doc_block docs/deployment.md deploy-k8s-leader) "$SRC/docs/examples/scheduler-leader.k8s.yaml"
    # deployment.md points to the packaged copies
    grep -q '/usr/share/doc/pglock/examples/' "$SRC/docs/deployment.md"
}
