#!/usr/bin/env bats
# Every subcommand speaks one way: each line it writes to stderr on a
# failure is "pglock: error: ...", "pglock: warning: ...", "pglock: hint:
# ..." (a full sentence) or the "Try ... --help" line, and a
# usage error ends with the Try line naming the subcommand.

load helpers
bats_require_minimum_version 1.5.0

setup() { setup_run; }
teardown() { teardown_run; }

# house_format CODE SUBCOMMAND ARGS...: pglock SUBCOMMAND ARGS exits CODE
# and every stderr line is in the house format.
house_format() {
    local code=$1 sub=$2 line
    shift 2
    run --separate-stderr "$PGLOCK_BIN" "$sub" "$@"
    [ "$status" -eq "$code" ] || { echo "exit $status, not $code: pglock $sub $*"; echo "$stderr"; return 1; }
    [ -n "$stderr" ]
    while IFS= read -r line; do
        [[ "$line" =~ ^pglock:\ (error|warning):\ [^A-Z] ]] && continue
        [[ "$line" =~ ^pglock:\ hint:\ [A-Z] ]] && continue # a full sentence
        [[ "$line" == "Try \"pglock $sub --help\" for more information." ]] && continue
        echo "not in the house format (pglock $sub $*): $line"
        return 1
    done <<<"$stderr"
    if [ "$code" -eq 64 ]; then
        [[ "${stderr##*$'\n'}" == "Try \"pglock $sub --help\" for more information." ]]
    fi
}

@test "usage errors of every subcommand: one error line, then the Try line" {
    local sub
    for sub in run lead status key doctor init history metrics terminate; do
        house_format 64 "$sub" --bogus-option
        house_format 64 "$sub" -Z
        house_format 64 "$sub" --help=yes
    done
    house_format 64 run -w
    house_format 64 run --wait=soon K -- true
    house_format 64 run --try --wait=1s K -- true
    house_format 64 run --lease=3s --kill-after=2s K -- true
    house_format 64 run 99999999999999999999 -- true
    house_format 64 run K
    house_format 64 lead --try K -- true
    house_format 64 lead --restart=soon K -- true
    house_format 64 status --watch=1ms
    house_format 64 status 42:x
    house_format 64 key -5
    house_format 64 key
    house_format 64 doctor extra-argument
    house_format 64 run K text:K -- true
    house_format 64 lead K K2 -- true
    house_format 64 terminate
    house_format 64 terminate K K2
    house_format 64 run --slots=0 K -- true
    house_format 64 run --slots=2 --shared K -- true
    house_format 64 run --slots=2 K K2 -- true
    house_format 64 status --slots=x K
}

@test "a server that is not there: every subcommand says so in the house format, 69" {
    local sub
    for sub in status doctor init history metrics; do
        house_format 69 "$sub" -h /nonexistent-socket-dir -p 1
    done
    # check is a monitoring plugin: UNKNOWN (3), its stderr still ours
    house_format 3 check -h /nonexistent-socket-dir -p 1 K --within=1h
    house_format 3 check --bogus-option
    house_format 69 run -h /nonexistent-socket-dir -p 1 K -- true
    house_format 69 key -h /nonexistent-socket-dir -p 1 hashtext:x
    house_format 69 terminate -h /nonexistent-socket-dir -p 1 --yes K
}
