#!/usr/bin/env bats
# pglock run --replace, and lead --replace: the holder, asked through
# its heartbeat, stops its job with one SIGTERM and its whole grace; the
# lock passes only once that job is gone.  Leases are 6 s (T_h 1 s); the
# holders' grace is --kill-after=3s, so that the graceful job's five
# ticks after its SIGTERM fit on a loaded machine.  The assertions are the jobs' own records: how many
# SIGTERMs the old job got, that it ended by itself (its grace was not
# cut), and that its last sign of life came before the new job started;
# no duration is asserted.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# A job that stamps itself as stamp_job does; on SIGTERM it counts the
# signal in NAME.terms, goes on stamping for 5 more ticks (well inside a
# 3 s grace), then exits 7 by itself.
graceful_job() {
    local n=$1
    printf '%s' "echo \$\$ > $out/$n.jobpid; date +%s%N > $out/$n.start
      left=-1
      trap 'echo term >> $out/$n.terms; left=5' TERM
      while [ \$left -ne 0 ]; do
        date +%s%N > $out/$n.alive.tmp && mv $out/$n.alive.tmp $out/$n.alive
        [ \$left -gt 0 ] && left=\$((left - 1))
        sleep 0.02
      done
      exit 7"
}

# A job that counts its SIGTERMs and ignores them, so that only the
# SIGKILL at the grace's end stops it.
stubborn_job() {
    local n=$1
    printf '%s' "trap 'echo term >> $out/$n.terms' TERM; $(stamp_job "$n")"
}

# stop_sql NAME: the bigint of the text key NAME's stop-request key
# (pglock.h: the name "pglock stop request " + the key's bigint).
stop_sql() {
    name_sql "pglock stop request $(q "select $(name_sql "$1")")"
}

# nothing_left NAME: neither NAME nor its stop-request key is held or
# waited for.
nothing_left() {
    [ "$(advisory_count "$(name_sql "$1")" t)" -eq 0 ] &&
        [ "$(advisory_count "$(name_sql "$1")" f)" -eq 0 ] &&
        [ "$(advisory_count "$(stop_sql "$1")" t)" -eq 0 ]
}

# The rule: the old job's last sign of life came before the new job's
# start, and no process of it was alive then (check_job's record).
assert_no_overlap() {
    [ ! -e "$out/r.overlap" ] || { echo "still running at the new job's start: $(cat "$out/r.overlap")"; false; }
    local gap
    gap=$(ms_between "$out/h.alive" "$out/r.start")
    report "$1: the new job started ${gap} ms after the old job's last sign of life"
    [ "$gap" -gt 0 ] || { echo "the old job ran $((-gap)) ms after the new one started"; false; }
}

# replace_holder CONNINFO JOB [RUN OPTION]...: h holds $K with JOB, then r
# replaces it (--replace) with a check_job; both end.
replace_holder() {
    local db=$1 job=$2
    shift 2
    bg h run -d "$db" --lease=6s --kill-after=3s "$@" "$K" -c "$job"
    wait_until 20 file_exists "$out/h.start"
    bg r run -d "$db" --lease=6s --replace --wait=30s "$@" "$K" -c "$(check_job r "$out/h.jobpid")"
    finish r 40
    finish h 10
}

@test "run --replace: the holder's job gets one SIGTERM and its grace, and its last tick comes before the new job starts" {
    replace_holder "$DB" "$(graceful_job h)"
    assert_no_overlap "direct"
    [ "$(status_of r)" = 0 ] || { cat "$out/r.err"; false; }
    # The old job ended by itself after its five ticks: exit 7, not 137.
    [ "$(status_of h)" = 7 ] || { echo "h: $(status_of h)"; cat "$out/h.err"; false; }
    [ "$(wc -l <"$out/h.terms")" -eq 1 ]
    grep -q 'lock ".*" is asked for by backend pid [0-9]* (user postgres, application "pglock run .*") (--replace): stopping the command' "$out/h.err"
    wait_until 10 nothing_left "$K"
}

@test "run --replace: a job that ignores SIGTERM is killed at its grace's end, and only then does the new job start" {
    replace_holder "$DB" "$(stubborn_job h)"
    [ "$(status_of r)" = 0 ] || { cat "$out/r.err"; false; }
    [ "$(status_of h)" = 137 ]
    [ "$(wc -l <"$out/h.terms")" -eq 1 ]
    gone "$(cat "$out/h.jobpid")"
    assert_no_overlap "SIGKILL after the grace"
}

@test "run --replace through PgBouncer: transaction locks, the same order" {
    need PGLOCK_TEST_POOLER
    replace_holder "$PGLOCK_TEST_POOLER" "$(graceful_job h)"
    assert_no_overlap "pooled"
    [ "$(status_of r)" = 0 ] || { cat "$out/r.err"; false; }
    [ "$(status_of h)" = 7 ] || { echo "h: $(status_of h)"; cat "$out/h.err"; false; }
    [ "$(wc -l <"$out/h.terms")" -eq 1 ]
    wait_until 10 nothing_left "$K"
}

@test "run --replace: an ordinary role may not stop a superuser's job: it runs on, the replacer exits 75 at --wait's end" {
    need PGLOCK_TEST_ORDINARY
    bg h run -d "$DB" --lease=6s "$K" -c "$(stubborn_job h)"
    wait_until 20 file_exists "$out/h.start"
    run -75 "$PGLOCK_BIN" run -d "$PGLOCK_TEST_ORDINARY" --lease=6s --replace --wait=4s "$K" -c "touch $out/ran"
    [[ "$output" == *"is still held by"* ]]
    [[ "$output" == *"pglock: hint: --replace"* ]]
    [ ! -e "$out/ran" ]
    [ ! -e "$out/h.terms" ]
    alive "$(cat "$out/h.jobpid")"
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
}

@test "run --replace: a role may stop a job of its own role" {
    need PGLOCK_TEST_ORDINARY
    replace_holder "$PGLOCK_TEST_ORDINARY" "$(graceful_job h)"
    [ "$(status_of r)" = 0 ] || { cat "$out/r.err"; false; }
    [ "$(status_of h)" = 7 ] || { echo "h: $(status_of h)"; cat "$out/h.err"; false; }
    grep -q '(user pglock_user, ' "$out/h.err"
    assert_no_overlap "same role"
}

@test "run --replace: with nobody holding the key it just runs" {
    run -0 "$PGLOCK_BIN" run -d "$DB" --replace "$K" -c "echo ran"
    [ "$output" = ran ]
    wait_until 10 nothing_left "$K"
}

@test "run --replace with --try, --shared or --slots: a usage error, nothing locked" {
    run -64 "$PGLOCK_BIN" run -d "$DB" --replace --try "$K" -- true
    [[ "$output" == *"--replace and --try cannot be used together"* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" --replace --shared "$K" -- true
    [[ "$output" == *"--replace cannot be used with --shared"* ]]
    run -64 "$PGLOCK_BIN" run -d "$DB" --replace --slots=2 "$K" -- true
    [[ "$output" == *"--replace cannot be used with --slots"* ]]
    nothing_left "$K"
}

@test "lead --replace: the old leader's command gets one SIGTERM and steps down; the new leader's starts after it, and the old lead contends again" {
    bg h lead -d "$DB" --lease=6s --kill-after=3s "$K" -c "$(graceful_job h)"
    wait_until 20 file_exists "$out/h.start"
    bg r lead -d "$DB" --lease=6s --replace "$K" -c "$(check_job r "$out/h.jobpid"); $(stamp_job r2)"
    wait_until 30 file_exists "$out/r.start"
    [ "$(wc -l <"$out/h.terms")" -eq 1 ]
    assert_no_overlap "lead"
    # the old lead waits again, behind the new leader
    alive "$(pid_of h)"
    wait_until 10 waiting_on "$K"
    grep -q 'stepping down\|is asked for by' "$out/h.err"
    kill -TERM "$(pid_of r)" "$(pid_of h)"
    finish r 10
    finish h 10
    wait_until 10 nothing_left "$K"
}
