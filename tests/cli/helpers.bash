# tests/cli/helpers.bash — the helpers every tests/cli/*.bats loads.
#   load helpers      (from a file in tests/cli/)
# Real processes, a real server; every wait is bounded polling.

# The harness's primitives: need, q, wait_until, alive, proxy_cmd.
load ../support/harness

# Per test: a scratch dir and a key nobody else uses (exported, for the
# tests that use them and for the commands they run).
setup_run() {
    need PGLOCK_TEST_PRIMARY PGLOCK_BIN
    out=$BATS_TEST_TMPDIR
    K="run-test-$BATS_TEST_NUMBER-$$-$RANDOM"
    DB=$PGLOCK_TEST_PRIMARY
    export out K DB
}

# Kills what a test started and left running (by recorded pid only).
teardown_run() {
    local f
    for f in "$out"/*.pid; do
        [ -e "$f" ] || continue
        kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
}

# run_app KEY [COMMAND]: the application_name of `pglock COMMAND KEY`'s
# lock connection on this host, "pglock run KEY on HOST" (for a KEY short
# enough that both fit: app_name.c).
run_app() { echo "pglock ${2:-run} $1 on $(uname -n)"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

# name_sql NAME: docs/keys.md's SQL for a text key's bigint.
name_sql() {
    printf "('x' || substr(encode(sha256(convert_to('%s', 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint" "$1"
}

# advisory_count BIGINT_SQL GRANTED(t|f): advisory locks on a 64-bit key.
advisory_count() {
    qpoll "select count(*) from pg_locks where locktype = 'advisory' and objsubid = 1
         and granted = '$2' and ((classid::bigint << 32) | objid::bigint) = $1"
}
# waiting_on NAME: true once someone waits for the text key NAME.
waiting_on() { [ "$(advisory_count "$(name_sql "$1")" f)" -ge 1 ]; }
# held NAME: true while someone holds the text key NAME.
held() { [ "$(advisory_count "$(name_sql "$1")" t)" -ge 1 ]; }
not_held() { ! held "$1"; }

# gone PID: PID no longer runs (a zombie does not run).  Assert with this,
# not with `! alive`: bats' set -e ignores a negated command, so a `! cmd`
# that is not a test's last line can never fail it (shellcheck SC2314).
gone() {
    [[ $1 =~ ^[0-9]+$ ]] || { echo "gone: \"$1\" is not a pid"; return 1; }
    ! alive "$1"
}

# bg NAME ARGS...: runs `pglock ARGS...` in the background; output in
# $out/NAME.out / .err, pid in $out/NAME.pid.  SIGINT and SIGQUIT, which a
# shell without job control ignores in background commands, are restored
# to their defaults, as under a terminal.
bg() {
    local name=$1
    shift
    env --default-signal=INT,QUIT "$PGLOCK_BIN" "$@" >"$out/$name.out" 2>"$out/$name.err" &
    echo $! >"$out/$name.pid"
}
# (read, not cat: the polls ask it)
pid_of() { local p; read -r p <"$out/$1.pid" && echo "$p"; }

# finish NAME SECS: waits (bounded) for a bg pglock to end and writes its
# exit status to $out/NAME.status.  Fails if it is still running.
finish() {
    local pid
    pid=$(pid_of "$1")
    if ! wait_until "$2" eval "! alive $pid"; then
        echo "pglock $1 (pid $pid) still runs after $2 s" >&2
        return 1
    fi
    local st=0
    wait "$pid" || st=$?
    echo "$st" >"$out/$1.status"
    rm -f "$out/$1.pid"
}
status_of() { cat "$out/$1.status"; }

# A job that records itself: its pid, that it started, and (every 20 ms)
# the last time it ran.  It runs until killed or until $out/NAME.release.
# Usage: pglock run ... KEY -c "$(stamp_job NAME)"
stamp_job() {
    local n=$1
    printf '%s' "echo \$\$ > $out/$n.jobpid; date +%s%N > $out/$n.start;
      while [ ! -e $out/$n.release ]; do
        date +%s%N > $out/$n.alive.tmp && mv $out/$n.alive.tmp $out/$n.alive
        sleep 0.02
      done"
}
# A job that, when it starts, checks that none of the pids listed in the
# files given is still running (a zombie does not run), and records when.
check_job() {
    local n=$1
    shift
    printf '%s' "date +%s%N > $out/$n.start
      for f in $*; do for p in \$(cat \$f 2>/dev/null); do
        s=\$(cat /proc/\$p/stat 2>/dev/null) || continue
        s=\${s##*) }
        [ \"\${s%% *}\" = Z ] || echo \"\$p\" >> $out/$n.overlap
      done; done"
}

# file_exists PATH
file_exists() { [ -e "$1" ]; }

# ms_between FILE_A FILE_B: (B - A) in ms, each file holding date +%s%N.
ms_between() { echo $((($(cat "$2") - $(cat "$1")) / 1000000)); }

# unreachable_exits_69 SUBCOMMAND: pglock SUBCOMMAND, pointed at a socket
# directory that does not exist (and at $PGLOCK_TEST_DOWN, a refusing
# address, when set), exits 69 with a pglock error.
unreachable_exits_69() {
    run "$PGLOCK_BIN" "$1" -h /nonexistent-socket-dir -p 1
    [ "$status" -eq 69 ]
    [[ "$output" == "pglock: error: "* ]]
    if [ -n "${PGLOCK_TEST_DOWN:-}" ]; then
        run "$PGLOCK_BIN" "$1" -d "$PGLOCK_TEST_DOWN"
        [ "$status" -eq 69 ]
    fi
}

# py EXPR: evaluates EXPR with d = the JSON document in $output.  -S: no
# site module, which json does not need; the interpreter then starts in a
# third of the CPU (55 ms, not 155 ms, on the CI machine), and py runs
# hundreds of times a pass.
py() {
    python3 -S -c "import json,sys; d=json.loads(sys.stdin.read()); print($1)" <<<"$output"
}

# report TEXT: a measured figure, shown in the TAP output.
report() { echo "# $*" >&3; }

# show_procs PID...: state of each process and its children, for failures.
show_procs() {
    local p c
    for p in "$@"; do
        echo "pid $p: $(cat /proc/$p/stat 2>/dev/null | cut -d' ' -f1-5) children: $(cat /proc/$p/task/*/children 2>/dev/null)"
        for c in $(cat /proc/$p/task/*/children 2>/dev/null); do
            echo "  child $c: $(cut -d' ' -f1-5 /proc/$c/stat 2>/dev/null) wchan $(cat /proc/$c/wchan 2>/dev/null) children: $(cat /proc/$c/task/*/children 2>/dev/null)"
            for g in $(cat /proc/$c/task/*/children 2>/dev/null); do
                echo "    grandchild $g: $(cut -d' ' -f1-8 /proc/$g/stat 2>/dev/null)"
            done
        done
    done
}

# stopped PID: PID is stopped (T), or waits in D for a vfork()ed child
# that is stopped before its exec (dash forks commands with vfork): either
# way it cannot run.
stopped() {
    local s c
    proc_state "$1" s || return 1
    [ "$s" = T ] && return 0
    [ "$s" = D ] || return 1
    for c in $(cat /proc/$1/task/*/children 2>/dev/null); do
        proc_state "$c" s && [ "$s" = T ] || return 1
    done
}

# Leader tests: each leader's job appends "TIME NAME TOKEN ..." to
# $out/leaders and writes its pid to $out/NAME.jobpid (names a, b, c).
leaders() { [ -e "$out/leaders" ] && wc -l <"$out/leaders" || echo 0; }
leaders_at_least() { [ "$(leaders)" -ge "$1" ]; }
# The name of the latest leader.
last_leader() { tail -n 1 "$out/leaders" | cut -d' ' -f2; }
# How many of the jobs a b c run now.
running_jobs() {
    local n c=0
    for n in a b c; do
        [ -e "$out/$n.jobpid" ] && alive "$(cat "$out/$n.jobpid")" && c=$((c + 1))
    done
    echo "$c"
}

# ends_on_sigterm_unrun NAME: the bg pglock NAME still runs; a SIGTERM
# ends it with 143, and its command (touch "$out/ran") never ran.
ends_on_sigterm_unrun() {
    alive "$(pid_of "$1")"
    kill -TERM "$(pid_of "$1")"
    finish "$1" 10
    [ "$(status_of "$1")" = 143 ]
    [ ! -e "$out/ran" ]
}

# install_to DIR: installs the build under test into DIR (a --prefix that
# differs from the configured one, as a packager's staging dir does).
install_to() {
    cmake --install "$PGLOCK_BUILD" --prefix "$1" >"$out/install.log" 2>&1 ||
        { cat "$out/install.log"; return 1; }
}

# doc_block FILE NAME: the code block that FILE (a path under the source
# tree) names NAME, verbatim: in markdown the fenced block right after
# `<!-- example: NAME -->`, in a man page the .EX block right after
# `.\" example: NAME` (roff's \- \e \& undone).  Fails if there is none.
# tests/cli/examples_docs.bats checks that every code block of the docs is
# either named and looked up here by a test, or marked as a fragment.
doc_block() {
    local file=$BATS_TEST_DIRNAME/../../$1
    case $1 in
    *.md)
        awk -v name="$2" '
            $1 == "<!--" && $2 == "example:" && $3 == name && $4 == "-->" && NF == 4 { found = 1; next }
            found == 1 && /^```/ { found = 2; next }
            found == 1 { exit }
            found == 2 && /^```$/ { done = 1; exit }
            found == 2 { print }
            END { exit !done }' "$file" ;;
    *)
        awk -v name="$2" '
            $1 == ".\\\"" && $2 == "example:" && $3 == name && NF == 3 { found = 1; next }
            found == 1 && /^\.EX/ { found = 2; next }
            found == 1 { exit }
            found == 2 && /^\.EE/ { done = 1; exit }
            found == 2 { print }
            END { exit !done }' "$file" | sed -e 's/\\-/-/g' -e 's/\\e/\\/g' -e 's/\\&//g'
        return "${PIPESTATUS[0]}" ;;
    esac
}
