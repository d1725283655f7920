#!/usr/bin/env bash
# tests/lint_format.sh [DIR] — every C file under DIR (default: the tree)
# is laid out as the tree's .clang-format says, so that a diff shows what
# changed and not how one editor indents.  `make lint` runs it.
#
# Fails naming each file that clang-format would change; `clang-format -i
# FILE` fixes it.  Where a layout must stay as written (a braced
# initializer in a macro, which clang-format turns into a block), the
# lines sit between /* clang-format off */ and /* clang-format on */, with
# the reason above them.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$root}

command -v clang-format >/dev/null ||
    { echo "lint_format: error: clang-format is not installed (apt-get install clang-format)" >&2; exit 69; }

# Build directories (/build*/, as in .gitignore) and the fuzz corpus hold
# no C of ours.
files=()
while IFS= read -r -d '' f; do
    files+=("$f")
done < <(cd "$dir" && find . \( -path ./.git -o -path './build*' -o -path ./tests/fuzz/corpus \) -prune \
             -o -type f \( -name '*.c' -o -name '*.h' \) -print0 | sort -z)
[ ${#files[@]} -gt 0 ] || { echo "lint_format: error: no C files under $dir" >&2; exit 2; }

bad=0
for f in "${files[@]}"; do
    out=$(cd "$dir" && clang-format --style="file:$root/.clang-format" --dry-run --Werror "$f" 2>&1) && continue
    # A finding names its warning; anything else is clang-format failing.
    [[ $out == *clang-format-violations* ]] ||
        { echo "lint_format: error: clang-format failed on ${f#./}: ${out%%$'\n'*}" >&2; exit 2; }
    echo "lint_format: ${f#./} is not laid out as .clang-format says (clang-format -i ${f#./})"
    bad=$((bad + 1))
done
if [ "$bad" -gt 0 ]; then
    echo "lint_format: $bad of ${#files[@]} C files to reformat"
    exit 1
fi
echo "lint_format: ${#files[@]} C files, laid out as .clang-format says"
