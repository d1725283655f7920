#!/usr/bin/env bats
# The deployment examples work as written: docs/deployment.md's cron line
# and systemd unit, docs/examples/*.service, and pglock(1)'s cron line.  They
# name /usr/local/bin/pglock, where `make install` puts it; here the build
# is installed into a temporary prefix whose bin/ is mounted on
# /usr/local/bin in a mount namespace of the test's own (`unshare -rm`),
# so the machine's /usr/local is never touched.

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
    printf '#!/bin/sh\necho $$ >%s/scheduler.started\nexec sleep 60\n' "$out" >"$bin/scheduler"
    chmod +x "$bin/billing" "$bin/scheduler"
}

# as_installed PREFIX CMD...: CMD with PREFIX mounted on /usr/local, as
# if `sudo make install` had put the build there.
as_installed() {
    unshare -rm sh -c 'mount --bind "$1" /usr/local && shift && exec "$@"' sh "$@"
}
# as_installed_bg NAME PREFIX CMD...: the same in the background, output in
# $out/NAME.out; its pid (unshare's, which every exec keeps) in $bg_pid.
as_installed_bg() {
    local name=$1
    shift
    unshare -rm sh -c 'mount --bind "$1" /usr/local && shift && exec "$@"' sh "$@" \
        >"$out/$name.out" 2>&1 &
    bg_pid=$!
}

# block LANG: the first ```LANG block of docs/deployment.md, verbatim.
block() {
    awk -v lang="$1" '$0 == "```" lang { inblk = 1; next }
                      inblk && /^```$/ { exit }
                      inblk { print }' "$SRC/docs/deployment.md"
}

# cron_env: the environment cron gives a command (only PATH=/usr/bin:/bin
# and what the crontab sets; here the harness's server instead of
# db1.internal), then sh -c.
cron_env() {
    cron=(env -i PATH=/usr/bin:/bin HOME="$out" PGHOST="$PGHOST" PGPORT="$PGPORT"
          PGUSER="$PGUSER" PGDATABASE="$PGDATABASE" sh -c)
}

@test "docs/deployment.md's cron line runs as written under cron's PATH: one run, then a quiet skip (75)" {
    local line cmd
    line=$(block cron | grep -E '^[0-9*]+ [0-9*]+ \* \* \* ')
    # five time fields and the user, then the command
    cmd=$(awk '{ for (i = 1; i <= 6; i++) $i = ""; sub(/^ +/, ""); print }' <<<"$line")
    [[ "$cmd" == /usr/local/bin/pglock\ * ]]
    cmd=${cmd//nightly-billing/$K}
    local -a cron
    cron_env
    # (cron's sh -c runs pglock: first is that shell)
    as_installed_bg first "$out/prefix" "${cron[@]}" "$cmd"
    local first=$bg_pid
    wait_until 15 file_exists "$out/billing.ran"
    [ "$(cat "$out/billing.ran")" = "$K" ]
    # --min-hold keeps it for 10 minutes: a late host skips, and -q keeps
    # it quiet
    run -75 as_installed "$out/prefix" "${cron[@]}" "$cmd"
    [ -z "$output" ]
    [ "$(wc -l <"$out/billing.ran")" = 1 ]
    # (the first host stops holding when told to)
    pkill -TERM -P "$first" || kill -TERM "$first"
    local status=0
    wait "$first" || status=$?
    cat "$out/first.out"
    [ "$status" = 143 ]
    wait_until 10 not_held "$K"
    # Without the full path cron would not find pglock at all.
    run -127 "${cron[@]}" "${cmd#/usr/local/bin/}"
    # pglock(1)'s cron line names the same path.
    grep -q '^0 2 \* \* \* /usr/local/bin/pglock run ' "$SRC/docs/pglock.1"
}

@test "the systemd units pass systemd-analyze verify with the binaries where they name them, and count 143 as success" {
    command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (Debian's systemd package)"
    block ini >"$out/billing.service"
    cp "$SRC"/docs/examples/*.service "$out/"
    local unit units=0
    for unit in "$out"/*.service; do
        run -0 as_installed "$out/prefix" systemd-analyze verify "$unit"
        grep -qE '^SuccessExitStatus=.*\b143\b' "$unit"
        units=$((units + 1))
    done
    [ "$units" -ge 2 ]
    # The check can fail: without the binaries the same units are refused.
    mkdir "$out/empty"
    run ! as_installed "$out/empty" systemd-analyze verify "$out/billing.service"
    [[ "$output" == *"/usr/local/bin/pglock"* ]]
}

@test "the leader unit's ExecStart, stopped as systemd stops it: the scheduler goes, pglock exits 143" {
    local exec
    exec=$(sed -n 's/^ExecStart=//p' "$SRC/docs/examples/scheduler-leader.service")
    exec=${exec//scheduler -- /$K -- }
    [[ "$exec" == "/usr/local/bin/pglock lead "*" $K -- /usr/local/bin/scheduler" ]]
    local -a argv
    read -ra argv <<<"$exec"
    as_installed_bg lead "$out/prefix" "${argv[@]}"
    local pid=$bg_pid
    wait_until 15 file_exists "$out/scheduler.started"
    held "$K"
    # KillMode=mixed: SIGTERM to the main process alone.
    kill -TERM "$pid"
    local status=0
    wait "$pid" || status=$?
    cat "$out/lead.out"
    [ "$status" = 143 ]
    gone "$(cat "$out/scheduler.started")"
    wait_until 10 not_held "$K"
}

@test "the README's package lines are .ci/run's packages, no more, no less, and npm only where none is" {
    local readme ci
    readme=$(grep -E '^ +sudo apt-get install -y ' "$SRC/README.md" | sed 's/.*install -y //' | tr -s ' ' '\n' | grep . | sort -u)
    ci=$(sed -n '/^packages=(/,/)/p' "$SRC/.ci/run" | sed 's/packages=(//; s/)//' | tr -s ' ' '\n' | grep . | sort -u)
    [ -n "$ci" ]
    diff <(echo "$readme") <(echo "$ci")
    grep -qx '    command -v npm || sudo apt-get install -y npm' "$SRC/README.md"
}

# quick_start N: the Nth ```sh block of the README's quick start, verbatim.
quick_start() {
    awk -v n="$1" '/^## / { qs = ($0 ~ /^## Quick start/) }
                   qs && /^```sh$/ { if (++i == n) { inblk = 1 }; next }
                   inblk && /^```$/ { exit }
                   inblk { print }' "$SRC/README.md"
}

@test "the README's quick start runs as written: one of three hosts runs the job, two are told who holds it, status names it" {
    # the first block builds and starts the harness, which this test has
    # done already: it must name them as they are
    [ "$(quick_start 1)" = "$(printf '%s\n' make '. "$(tests/harness/harness.sh start --build build)"')" ]
    quick_start 2 >"$out/race.sh"
    grep -q 'pglock run --try nightly-billing' "$out/race.sh"
    mkdir "$out/tree"
    ln -s "$PGLOCK_BUILD" "$out/tree/build"
    run -0 --separate-stderr sh -c 'cd "$1" && . "$2"' sh "$out/tree" "$out/race.sh"
    echo "$output"
    echo "$stderr"
    [ "$(grep -c 'runs the job$' <<<"$output")" = 1 ]
    [ "$(grep -c 'is held by pid .*the command was not run$' <<<"$stderr")" = 2 ]
    [[ "$output" == *"nightly-billing (application_name) = key -3003901418071974465: exclusive"* ]]
    [[ "$output" == *"holds "*"pglock run nightly-billing"* ]]
}

@test "docs/examples/billing.cron and billing.service are docs/deployment.md's cron and systemd examples (the packages ship them)" {
    diff <(block cron) "$SRC/docs/examples/billing.cron"
    diff <(block ini) "$SRC/docs/examples/billing.service"
}
