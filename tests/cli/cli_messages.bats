#!/usr/bin/env bats
# Messages that say what went wrong: a misspelt command or option gets a
# "did you mean", a fraction in a duration is understood, a refused
# connection keeps libpq's hint, key --sql shows the form to type, a
# pooler's backend pid reads the same in run and doctor, and an option
# that several commands share reads the same in each one's --help.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

@test "a misspelt command or long option: did you mean, 64" {
    run -64 --separate-stderr "$PGLOCK_BIN" rnu "$K" -- true
    [ "${stderr_lines[0]}" = 'pglock: error: unrecognized command "rnu"' ]
    [ "${stderr_lines[1]}" = 'pglock: hint: Did you mean "pglock run"?' ]
    run -64 --separate-stderr "$PGLOCK_BIN" stauts
    [ "${stderr_lines[1]}" = 'pglock: hint: Did you mean "pglock status"?' ]
    run -64 --separate-stderr "$PGLOCK_BIN" run --wiat=5s "$K" -- true
    [ "${stderr_lines[0]}" = 'pglock: error: unrecognized option "--wiat=5s"' ]
    [ "${stderr_lines[1]}" = 'pglock: hint: Did you mean "--wait"?' ]
    # nothing close: no guess
    run -64 --separate-stderr "$PGLOCK_BIN" frobnicate
    [ "${#stderr_lines[@]}" -eq 2 ]
    [[ "${stderr_lines[1]}" == Try* ]]
    run -64 --separate-stderr "$PGLOCK_BIN" run --try=yes "$K" -- true
    [ "${stderr_lines[0]}" = 'pglock: error: option "--try=yes" takes no value' ]
}

# A negative key looks like an option to every option parser; the form
# that works is int:-N.  getopt reads "-5123" a letter at a time: the
# refusal names the argument it came from, not the option before it.
@test "a negative key: unrecognized option, with a hint at int:-N; nothing is run" {
    run -64 --separate-stderr "$PGLOCK_BIN" run --try -5 -- touch "$out/ran"
    [ "$stderr" = 'pglock: error: unrecognized option "-5"
pglock: hint: A negative key is written int:-5.
Try "pglock run --help" for more information.' ]
    run -64 --separate-stderr "$PGLOCK_BIN" run --try -5123 -- touch "$out/ran"
    [ "${stderr_lines[0]}" = 'pglock: error: unrecognized option "-5"' ]
    [ "${stderr_lines[1]}" = 'pglock: hint: A negative key is written int:-5123.' ]
    run -64 --separate-stderr "$PGLOCK_BIN" status --json x -42
    [ "${stderr_lines[1]}" = 'pglock: hint: A negative key is written int:-42.' ]
    [ ! -e "$out/ran" ]
    # the form hinted at works
    run -0 "$PGLOCK_BIN" run --try -d "$DB" int:-5123 -- touch "$out/ran"
    [ -e "$out/ran" ]
    # a command without keys has no such hint; a letter has none either
    run -64 --separate-stderr "$PGLOCK_BIN" doctor -5
    [ "${#stderr_lines[@]}" -eq 2 ]
    run -64 --separate-stderr "$PGLOCK_BIN" run --try -x -- true
    [ "${#stderr_lines[@]}" -eq 2 ]
}

@test "a misspelt registry name: did you mean, 64, nothing locked or run" {
    printf 'nightly-billing = 72001\nreports\n' >"$out/keys"
    run -64 --separate-stderr "$PGLOCK_BIN" run --keys "$out/keys" -d "$DB" @nightly-biling -- touch "$out/ran"
    [ "${stderr_lines[0]}" = "pglock: error: unknown key \"@nightly-biling\": not in registry \"$out/keys\" (did you mean \"@nightly-billing\"?)" ]
    [ ! -e "$out/ran" ]
    PGLOCK_KEYS=$out/keys run -64 --separate-stderr "$PGLOCK_BIN" status -d "$DB" @reprots
    [[ "${stderr_lines[0]}" == *'(did you mean "@reports"?)' ]]
    # nothing close: no guess
    run -64 --separate-stderr "$PGLOCK_BIN" key --keys "$out/keys" @zzz
    [ "$stderr" = "pglock: error: unknown key \"@zzz\": not in registry \"$out/keys\"" ]
}

@test "a duration with a fraction: 1.5s is 1500 ms; finer than a millisecond is refused" {
    run -0 "$PGLOCK_BIN" run -d "$DB" --wait=1.5s "$K" -- true
    run -64 --separate-stderr "$PGLOCK_BIN" run -d "$DB" --wait=1.5ms "$K" -- true
    [ "${stderr_lines[0]}" = 'pglock: error: invalid value for --wait: invalid duration "1.5ms": finer than a millisecond' ]
    # the fraction is really used: a 0.5 s wait on a held lock ends in 75
    bg h run -d "$DB" "$K" -- sh -c "touch $out/held; while [ ! -e $out/release ]; do sleep 0.1; done"
    wait_until 10 file_exists "$out/held"
    run -75 "$PGLOCK_BIN" run -d "$DB" --wait=0.5s "$K" -- touch "$out/ran"
    [ ! -e "$out/ran" ]
    touch "$out/release"
    finish h 10
}

@test "a refused connection keeps libpq's hint, as our own hint line" {
    run -69 --separate-stderr "$PGLOCK_BIN" run -h "$BATS_TEST_TMPDIR" -p 1 "$K" -- true
    [[ "${stderr_lines[0]}" == 'pglock: error: connection to server on socket '*'failed: No such file or directory' ]]
    [ "${stderr_lines[1]}" = 'pglock: hint: Is the server running locally and accepting connections on that socket?' ]
    if [ -n "${PGLOCK_TEST_DOWN:-}" ]; then
        run -69 --separate-stderr "$PGLOCK_BIN" status -d "$PGLOCK_TEST_DOWN"
        [[ "${stderr_lines[0]}" == *'failed: Connection refused' ]]
        [ "${stderr_lines[1]}" = 'pglock: hint: Is the server running on that host and accepting TCP/IP connections?' ]
    fi
}

@test "key --sql prints the SQL expression and the plain bigint form" {
    run -0 "$PGLOCK_BIN" key --sql nightly-billing
    [ "${lines[-2]}" = "sql       SELECT pg_advisory_lock(('x' || substr(encode(sha256(convert_to('nightly-billing', 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint);" ]
    [ "${lines[-1]}" = "          SELECT pg_advisory_lock(-3003901418071974465);" ]
    # both take the same lock on the server
    local expr plain
    expr=$(q "select ('x' || substr(encode(sha256(convert_to('nightly-billing', 'UTF8')), 'hex'), 1, 16))::bit(64)::bigint")
    [ "$expr" = -3003901418071974465 ]
    run -0 "$PGLOCK_BIN" key --sql --json --xact --shared nightly-billing
    plain=$(py 'd[0]["sql_bigint"]')
    [ "$plain" = "SELECT pg_advisory_xact_lock_shared(-3003901418071974465);" ]
    # a bigint key has one form only
    run -0 "$PGLOCK_BIN" key --sql 42
    [ "${lines[-1]}" = "sql       SELECT pg_advisory_lock(42);" ]
}

@test "a pooler's backend pid prints unsigned in run and in doctor" {
    need PGLOCK_TEST_POOLER
    run -69 --separate-stderr "$PGLOCK_BIN" run --mode=session -d "$PGLOCK_TEST_POOLER" "$K" -- true
    [[ "$stderr" =~ libpq\'s\ backend\ pid\ ([0-9]+)\ differs ]]
    run -0 "$PGLOCK_BIN" doctor -d "$PGLOCK_TEST_POOLER"
    [[ "$output" =~ PQbackendPID\(\)\ ([0-9]+)\ is\ not ]]
}

@test "lead --help names every exit status it can return" {
    run -0 "$PGLOCK_BIN" lead --help
    [[ "$output" == *74* ]]
    [[ "$output" == *69* ]]
    [[ "$output" == *64* ]]
}

@test "pglock --help: every command of main.c's table in Usage and in Commands, each column aligned" {
    local cmds cmd usage_col=() summary_col=()
    # the command table's names: its entries open with {"NAME", cmd_
    cmds=$(sed -nE 's/^ *\{"([a-z]+)", *cmd_[a-z_]+,.*/\1/p' "$BATS_TEST_DIRNAME/../../src/cli/main.c")
    [ "$(wc -w <<<"$cmds")" -ge 10 ]
    run -0 "$PGLOCK_BIN" --help
    for cmd in $cmds; do
        # "  pglock NAME<spaces>ARGS": where ARGS starts
        local line
        line=$(grep -E "^  pglock $cmd +\[" <<<"$output" | head -1)
        [ -n "$line" ] || { echo "no Usage line for $cmd"; false; }
        usage_col+=("$(($(expr "$line" : '  pglock [a-z]* *')))")
        line=$(grep -E "^  $cmd +[a-z]" <<<"$output" | head -1)
        [ -n "$line" ] || { echo "no Commands line for $cmd"; false; }
        summary_col+=("$(($(expr "$line" : '  [a-z]* *')))")
    done
    [ "$(printf '%s\n' "${usage_col[@]}" | sort -u | wc -l)" -eq 1 ]
    [ "$(printf '%s\n' "${summary_col[@]}" | sort -u | wc -l)" -eq 1 ]
}

# option_entry OPT: from --help on stdin, "HEADING|the option's lines" for
# the long option OPT (its continuation lines joined), or nothing.
option_entry() {
    awk -v opt="$1" '
        /^[^ ]/ { heading = $0; inside = 0; next }
        $0 ~ "^ +(-., )?" opt "([= ]|$)" { inside = 1; entry = heading "|" $0; next }
        inside && /^                             / { entry = entry " " $0; next }
        { inside = 0 }
        END { if (entry != "") print entry }'
}

@test "--keys, --json and --quiet read the same in every command's --help, each under its own group" {
    local cmds cmd opt entry seen
    cmds=$("$PGLOCK_BIN" --help | awk '/^Commands:/ { c = 1; next } c && /^  [a-z]/ { print $1 } c && /^$/ { exit }')
    [ "$(wc -l <<<"$cmds")" -ge 10 ]
    for opt in --keys --json --quiet; do
        seen=
        for cmd in $cmds; do
            entry=$("$PGLOCK_BIN" "$cmd" --help | option_entry "$opt")
            [ -n "$entry" ] || continue
            case $opt in
            --keys) [[ "$entry" == "Key registry:|"* ]] || { echo "$cmd: $entry"; false; } ;;
            *) [[ "$entry" == "Output:|"* ]] || { echo "$cmd: $entry"; false; } ;;
            esac
            [ -z "$seen" ] || [ "$entry" = "$seen" ] || { echo "$cmd: $entry, not $seen"; false; }
            seen=$entry
        done
        [ -n "$seen" ] || { echo "no command takes $opt"; false; }
    done
}

@test "each message line is one write(): pglock processes that share one stderr never interleave their lines" {
    command -v strace >/dev/null || skip "strace is not installed"
    # LeakSanitizer cannot stop the world under a tracer (it exits 1), so
    # under the ASan pass the traced runs check everything but leaks
    export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
    # an error, its hint and the try-help line; then a verbose line
    run -64 strace -f -qq -s 4096 -e trace=write -e signal=none -o "$BATS_TEST_TMPDIR/w" \
        "$PGLOCK_BIN" run --wiat=5s "$K" -- true
    grep -q '^[0-9]* *write(2, "pglock: error: unrecognized option \\"--wiat=5s\\"\\n", ' "$BATS_TEST_TMPDIR/w"
    grep -q '^[0-9]* *write(2, "pglock: hint: Did you mean \\"--wait\\"?\\n", ' "$BATS_TEST_TMPDIR/w"
    run -0 strace -f -qq -s 4096 -e trace=write -e signal=none -o "$BATS_TEST_TMPDIR/v" \
        "$PGLOCK_BIN" run -v -d "$PGLOCK_TEST_PRIMARY" "$K" -- true
    grep -qE '^[0-9]* *write\(2, "pglock: [0-9:.]+ [^"]*\\n", ' "$BATS_TEST_TMPDIR/v"
    # no write to stderr is a piece of a line
    run ! grep -E '^[0-9]* *write\(2, "([^"]|\\")*[^n"]", ' "$BATS_TEST_TMPDIR/w" "$BATS_TEST_TMPDIR/v"
}
