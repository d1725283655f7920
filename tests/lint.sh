#!/usr/bin/env bash
# tests/lint.sh — shellcheck over every shell script and bats file in the
# tree, found by name (*.sh, *.bash, *.bats) and by #! line, so that a new
# one is covered without being listed.  `make check` runs it first.
#
# Fails on any finding of severity warning or above.  A code that is wrong
# for this project is disabled in .shellcheckrc, with its reason, and
# nowhere else.
#
# A negated command `! cmd` never fails a bats test (set -e ignores it)
# unless it is the test's last line, and the next line added below it
# disarms it; in a plain script it skips errexit the same way.  So those
# are refused at any severity (SC2314, SC2251), and so is a line of a .bats
# file that starts with `!`, which shellcheck misses inside a loop.  Use
# `run ! cmd`, or a helper such as `gone PID` (tests/cli/helpers.bash).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

command -v shellcheck >/dev/null ||
    { echo "lint: error: shellcheck is not installed (apt-get install shellcheck)" >&2; exit 69; }

# Build directories (/build*/, as in .gitignore) and the fuzz corpus hold
# no scripts of ours.
files=()
while IFS= read -r -d '' f; do
    case $f in
    *.sh | *.bash | *.bats) files+=("$f") ;;
    *) head -n1 "$f" 2>/dev/null | grep -qE '^#!.*[/ ](ba|da)?sh( |$)' && files+=("$f") ;;
    esac
done < <(find . \( -path ./.git -o -path './build*' -o -path ./tests/fuzz/corpus \) -prune \
             -o -type f -print0 | sort -z)
[ ${#files[@]} -gt 0 ] || { echo "lint: error: no shell scripts found" >&2; exit 1; }

# One pass at every severity, then the findings that fail the gate.  Exit
# status 1 means findings; a higher one, that the check could not run.
# Two shellchecks at once, on half of the files each: shellcheck uses one
# core, and nothing else runs while make check lints.
rc=0
half=$(((${#files[@]} + 1) / 2))
first_half=$(mktemp)
trap 'rm -f "$first_half"' EXIT
shellcheck --format=gcc "${files[@]:0:half}" >"$first_half" &
first_pid=$!
report=$(shellcheck --format=gcc "${files[@]:half}") || [ $? -eq 1 ] ||
    { echo "lint: error: shellcheck failed" >&2; exit 1; }
wait "$first_pid" || [ $? -eq 1 ] ||
    { echo "lint: error: shellcheck failed" >&2; exit 1; }
report=$(cat "$first_half")$'\n'$report
if grep -E ': (error|warning): |\[SC(2314|2251)\]$' <<<"$report"; then
    rc=1
fi
bats_files=()
for f in "${files[@]}"; do [[ $f != *.bats ]] || bats_files+=("$f"); done
if [ ${#bats_files[@]} -gt 0 ] && grep -nE '^[[:space:]]*![[:space:]]' "${bats_files[@]}"; then
    echo "lint: a line above starts with '!', which asserts nothing in bats: use 'run ! cmd' or a helper" >&2
    rc=1
fi
[ "$rc" -eq 0 ] && echo "lint: ${#files[@]} shell scripts, no findings"
exit "$rc"
