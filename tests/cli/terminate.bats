#!/usr/bin/env bats
# pglock terminate KEY: shows who holds KEY, then ends that session with
# pg_terminate_backend, checked and done in one statement; never a waiter,
# never a session that no longer holds KEY; several shared holders need
# --all; --yes or a terminal's answer; 69 without the privilege.

load helpers
load sessions
bats_require_minimum_version 1.5.0

setup() {
    setup_run
    sessions_setup
}
teardown() {
    sessions_teardown
    teardown_run
}

# holder NAME [ARGS...]: a pglock run holding $K (ARGS before the key) until
# $out/NAME.release; waits until its job runs.
holder() {
    local n=$1
    shift
    bg "$n" run -d "$DB" "$@" "$K" -c "echo \$PGLOCK_BACKEND_PID > $out/$n.backend; $(stamp_job "$n")"
    wait_until 10 file_exists "$out/$n.start"
}

# answer_on_tty REPLY BEFORE ARGS...: runs pglock ARGS under a terminal,
# waits for its question, runs the shell command BEFORE, types REPLY.
# Prints what the terminal showed; exits with pglock's status.
answer_on_tty() {
    python3 - "$@" <<'EOF'
import os, pty, signal, subprocess, sys
signal.alarm(30)
reply, before, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
seen = b""
while b"[y/N]" not in seen:
    seen += os.read(fd, 4096)
subprocess.run(before, shell=True, check=True)
os.write(fd, reply.encode() + b"\n")
try:
    while True:
        chunk = os.read(fd, 4096)
        if not chunk:
            break
        seen += chunk
except OSError:
    pass
_, st = os.waitpid(pid, 0)
sys.stdout.write(seen.decode(errors="replace"))
sys.exit(os.waitstatus_to_exitcode(st))
EOF
}

@test "nobody holds KEY: 1, nothing terminated" {
    run -1 "$PGLOCK_BIN" terminate -d "$DB" --yes "$K"
    [ "$output" = "pglock: lock \"$K\" is not held; nothing to terminate" ]
}

@test "-y is --yes: the holder is terminated without a question" {
    holder h --lease=3s
    run -0 "$PGLOCK_BIN" terminate -d "$DB" -y "$K" </dev/null
    [[ "$output" == *"terminated backend pid $(cat "$out/h.backend")"* ]]
    not_held "$K"
    finish h 10
    [ "$(status_of h)" -eq 74 ]
}

@test "the holder is shown, then terminated: its pglock stops the job (74), the lock is free" {
    holder h --lease=3s
    # not a terminal and no --yes: shown, refused, still held
    run -64 "$PGLOCK_BIN" terminate -d "$DB" "$K" </dev/null
    [[ "$output" == *"  backend pid $(cat "$out/h.backend")  host $(uname -n)  exclusive  user postgres"*"\"$(run_app "$K")\""* ]]
    [[ "$output" == *"pglock: error: not a terminal: --yes is needed to terminate"* ]]
    held "$K"
    run -0 "$PGLOCK_BIN" terminate -d "$DB" --yes "$K"
    [[ "$output" == *"terminated backend pid $(cat "$out/h.backend")"* ]]
    # pg_terminate_backend waited for the session to end: free at once
    not_held "$K"
    finish h 10
    [ "$(status_of h)" = 74 ]
    gone "$(cat "$out/h.jobpid")"
}

@test "on a terminal it asks; 'n' terminates nothing, 'y' terminates" {
    holder h --lease=3s
    run -1 answer_on_tty n true "$PGLOCK_BIN" terminate -d "$DB" "$K"
    [[ "$output" == *"Terminate this session (on $(uname -n)) of lock \"$K\"? [y/N]"* ]]
    [[ "$output" == *"nothing was terminated"* ]]
    held "$K"
    run -0 answer_on_tty y true "$PGLOCK_BIN" terminate -d "$DB" "$K"
    [[ "$output" == *"terminated backend pid"* ]]
    finish h 10
    [ "$(status_of h)" = 74 ]
}

@test "the holder's host (--host-label) is shown and asked about; a psql holder names none" {
    holder h --lease=3s --host-label cron-3
    run -1 answer_on_tty n true "$PGLOCK_BIN" terminate -d "$DB" "$K"
    [[ "$output" == *"  backend pid $(cat "$out/h.backend")  host cron-3  exclusive  user postgres  from local  session up "*"  \"pglock run $K on cron-3\""* ]]
    [[ "$output" == *"Terminate this session (on cron-3) of lock \"$K\"? [y/N]"* ]]
    held "$K"
    touch "$out/h.release"
    finish h 10
    [ "$(status_of h)" = 0 ]
    session plain "$DB" "select pg_advisory_lock($(name_sql "$K"));"
    wait_until 10 held "$K"
    run -1 answer_on_tty n true "$PGLOCK_BIN" terminate -d "$DB" "$K"
    [[ "$output" == *"  backend pid $(backend plain)  exclusive  user postgres"* ]]
    [[ "$output" != *"  host "* ]]
    [[ "$output" == *"Terminate this session of lock \"$K\"? [y/N]"* ]]
}

@test "a session that released KEY after it was shown is not terminated (one statement)" {
    # a psql session that holds KEY, then lets go but stays connected (as a
    # pooled server connection that now serves someone else)
    session released "$DB" "select pg_advisory_lock($(name_sql "$K"));"
    wait_until 10 held "$K"
    local backend
    backend=$(backend released)
    echo "select 'unlocked ' || pg_advisory_unlock($(name_sql "$K"));" >"$out/unlock.sql"
    alive "$(session_pid released)"
    local release="cat $out/unlock.sql > $TMP/released.fifo
      until grep -q 'unlocked t' $TMP/released.out; do sleep 0.1; done"
    run -1 answer_on_tty y "$release" "$PGLOCK_BIN" terminate -d "$DB" "$K"
    [[ "$output" == *"backend pid $backend"* ]]
    [[ "$output" == *"no longer held by the sessions shown; nothing was terminated"* ]]
    # the session lives on
    [ "$(q "select count(*) from pg_stat_activity where pid = $backend")" = 1 ]
}

@test "waiters are never terminated" {
    holder h --lease=3s
    bg w run -d "$DB" --wait=20s "$K" -- touch "$out/w.ran"
    wait_until 10 waiting_on "$K"
    run -0 "$PGLOCK_BIN" terminate -d "$DB" --yes "$K"
    [ "$(grep -c '^  backend pid ' <<<"$output")" = 1 ]
    finish h 10
    # the waiter got the lock and ran its command
    finish w 10
    [ "$(status_of w)" = 0 ]
    [ -e "$out/w.ran" ]
}

@test "several shared holders: listed, and --all is needed to end them" {
    holder a --lease=3s --shared
    holder b --lease=3s --shared
    run -64 "$PGLOCK_BIN" terminate -d "$DB" --yes "$K"
    [ "$(grep -c '^  backend pid .*  shared  ' <<<"$output")" = 2 ]
    [[ "$output" == *"pglock: error: 2 sessions hold lock \"$K\"; nothing was terminated"* ]]
    [[ "$output" == *"pglock: hint: Use --all to terminate all of them."* ]]
    alive "$(pid_of a)"
    alive "$(pid_of b)"
    run -0 "$PGLOCK_BIN" terminate -d "$DB" --yes --all "$K"
    [ "$(grep -c '^terminated backend pid' <<<"$output")" = 2 ]
    finish a 10
    finish b 10
    [ "$(status_of a)" = 74 ]
    [ "$(status_of b)" = 74 ]
    not_held "$K"
}

@test "a role that may not terminate the holder: 69, says which privilege, terminates nothing" {
    need PGLOCK_TEST_ORDINARY
    holder h --lease=3s
    run -69 "$PGLOCK_BIN" terminate -d "$PGLOCK_TEST_ORDINARY" --yes "$K"
    [[ "$output" == *"pglock: error: permission denied to terminate the holder of lock \"$K\""*"nothing was terminated"* ]]
    [[ "$output" == *"pglock: hint: "*"superuser"*"pg_signal_backend"* ]]
    held "$K"
    alive "$(pid_of h)"
    # with --all, one holder it may not end stops all: the other lives too
    touch "$out/h.release"
    finish h 10
    bg a run -d "$PGLOCK_TEST_ORDINARY" --shared "$K" -c "$(stamp_job a)"
    holder b --lease=3s --shared
    wait_until 10 file_exists "$out/a.start"
    run -69 "$PGLOCK_BIN" terminate -d "$PGLOCK_TEST_ORDINARY" --yes --all "$K"
    alive "$(pid_of a)"
    alive "$(pid_of b)"
    [ "$(q "select count(*) from pg_locks where locktype = 'advisory' and granted and
              ((classid::bigint << 32) | objid::bigint) = $(name_sql "$K")")" = 2 ]
    # its own role's session it may end
    touch "$out/b.release"
    finish b 10
    run -0 "$PGLOCK_BIN" terminate -d "$PGLOCK_TEST_ORDINARY" --yes "$K"
    finish a 10
    [ "$(status_of a)" = 74 ]
}

@test "bad input: one line and 64; a server that is down: 69" {
    run -64 "$PGLOCK_BIN" terminate -d "$DB"
    [ "${lines[0]}" = "pglock: error: no lock key given" ]
    run -64 "$PGLOCK_BIN" terminate -d "$DB" "$K" other
    [ "${lines[0]}" = "pglock: error: one key at a time: \"other\" is a second one" ]
    run -64 "$PGLOCK_BIN" terminate -d "$DB" 42:x
    [[ "${lines[0]}" == "pglock: error: invalid key \"42:x\""* ]]
    run -64 "$PGLOCK_BIN" terminate --bogus "$K"
    [[ "${lines[0]}" == "pglock: error: "*"--bogus"* ]]
    run -69 "$PGLOCK_BIN" terminate -h /nonexistent-socket-dir -p 1 --yes "$K"
    [[ "${lines[0]}" == "pglock: error: "* ]]
    # a standby's locks are not the primary's: it refuses to look there
    if [ -n "${PGLOCK_TEST_STANDBY:-}" ]; then
        run -69 "$PGLOCK_BIN" terminate -d "$PGLOCK_TEST_STANDBY" --yes "$K"
        [[ "${lines[0]}" == "pglock: error: "*"standby"* ]]
    fi
}

# leader_job NAME: a lead command that records its token and start, and
# ignores SIGTERM until $out/NAME.release: a command slow to stop.
leader_job() {
    printf '%s' "trap '' TERM; echo \$PGLOCK_FENCING_TOKEN > $out/$1.token; echo \$\$ > $out/$1.jobpid;
      date +%s%N > $out/$1.start; while [ ! -e $out/$1.release ]; do sleep 0.02; done"
}

@test "ending a lead holder: the next leader's command starts while the old one is still stopping, with another token (pglock-terminate(1))" {
    bg a lead -d "$DB" --lease=30s --kill-after=5s "$K" -c "$(leader_job a)"
    wait_until 10 file_exists "$out/a.start"
    bg b lead -d "$DB" --lease=30s --kill-after=5s "$K" -c "$(leader_job b)"
    wait_until 10 waiting_on "$K"
    date +%s%N >"$out/terminated"
    run -0 "$PGLOCK_BIN" terminate -d "$DB" --yes "$K"
    wait_until 10 file_exists "$out/b.start"
    # the old leader's command is still there after the new one started
    kill -0 "$(cat "$out/a.jobpid")"
    [ "$(cat "$out/a.token")" != "$(cat "$out/b.token")" ]
    report "the new leader's command started $(ms_between "$out/terminated" "$out/b.start") ms after the terminate, the old one still running"
    # the old leader stops its command in the end (SIGKILL after --kill-after)
    touch "$out/b.release"
    finish b 15
    [ "$(status_of b)" = 0 ]
    wait_until 15 gone "$(cat "$out/a.jobpid")"
    kill -TERM "$(pid_of a)"
    finish a 15
}
