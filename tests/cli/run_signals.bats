#!/usr/bin/env bats
# pglock run: SIGINT, SIGTERM, SIGHUP and SIGQUIT sent to pglock reach the
# whole job — the command and a grandchild it runs in the foreground —
# and pglock exits with the command's status; the lock is free afterwards.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# forwarded SIG: a job whose child and grandchild each record SIG and exit
# 0; pglock gets SIG; both recorded it, and pglock exits 0 (the job's own
# status, since it handled the signal).
forwarded() {
    local sig=$1
    rm -f "$out"/child.got "$out"/gc.got "$out"/started
    bg h run -d "$DB" "$K" -- sh -c "
        trap 'echo $sig > $out/child.got; exit 0' $sig
        sh -c 'trap \"echo $sig > $out/gc.got; exit 0\" $sig
               touch $out/started; while :; do sleep 0.02; done'
        wait"
    wait_until 10 file_exists "$out/started"
    held "$K"
    kill "-$sig" "$(pid_of h)"
    finish h 10
    echo "pglock exited $(status_of h); stderr: $(cat "$out/h.err")"
    [ "$(cat "$out/gc.got")" = "$sig" ]
    [ "$(cat "$out/child.got")" = "$sig" ]
    [ "$(status_of h)" = 0 ]
    wait_until 5 not_held "$K"
}

@test "SIGINT reaches the command and its grandchild" { forwarded INT; }
@test "SIGTERM reaches the command and its grandchild" { forwarded TERM; }
@test "SIGHUP reaches the command and its grandchild" { forwarded HUP; }
@test "SIGQUIT reaches the command and its grandchild" { forwarded QUIT; }

@test "a job killed by the forwarded signal: 128+N" {
    local sig n
    for sig in INT HUP QUIT TERM; do
        n=$(kill -l "$sig")
        rm -f "$out/started"
        bg h run -d "$DB" "$K" -- sh -c "touch $out/started; while :; do sleep 0.02; done"
        wait_until 10 file_exists "$out/started"
        kill "-$sig" "$(pid_of h)"
        finish h 10
        [ "$(status_of h)" = $((128 + n)) ]
    done
    wait_until 5 not_held "$K"
}
