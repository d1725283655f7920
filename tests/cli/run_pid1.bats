#!/usr/bin/env bats
# pglock run as PID 1 of a PID namespace (a container's entry point): the
# orphans the job leaves behind are reaped — no zombie stays in the
# namespace — while the job still runs.

load helpers
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    unshare --pid --fork --mount-proc true 2>/dev/null || skip "no PID namespaces here (unshare)"
}
teardown() { teardown_run; }

@test "as PID 1: orphans that exit are reaped while the job runs" {
    # The job orphans three short-lived processes (double fork), waits
    # until they have exited, then looks, inside the namespace, for
    # zombies (bounded polling), and reports what it found.
    local job="
        for i in 1 2 3; do (sh -c 'sleep 0.1; touch $out/orphan.\$\$' &); done
        i=0; while [ \$(ls $out/orphan.* 2>/dev/null | wc -l) -lt 3 ] && [ \$i -lt 200 ]; do sleep 0.05; i=\$((i+1)); done
        i=0; z=1
        while [ \$i -lt 200 ]; do
          z=0
          for s in /proc/[0-9]*/stat; do
            st=\$(cat \$s 2>/dev/null) || continue
            st=\${st##*) }
            [ \"\${st%% *}\" = Z ] && z=\$((z+1))
          done
          [ \$z -eq 0 ] && break
          sleep 0.05; i=\$((i+1))
        done
        echo \$z > $out/zombies
        echo \$(cut -d' ' -f1 /proc/1/stat) > $out/pid1"
    run timeout 60 unshare --pid --fork --mount-proc "$PGLOCK_BIN" run -d "$DB" "$K" -c "$job"
    echo "$output"
    [ "$status" -eq 0 ]
    [ "$(cat "$out/pid1")" = 1 ]
    [ "$(ls "$out"/orphan.* | wc -l)" -eq 3 ]
    [ "$(cat "$out/zombies")" -eq 0 ]
    [ "$(advisory_count "$(name_sql "$K")" t)" -eq 0 ]
}
