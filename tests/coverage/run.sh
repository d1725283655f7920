#!/usr/bin/env bash
# tests/coverage/run.sh [BUILD] — which lines of src/ each suite runs, by
# gcov, and which CLI suites the ASan+UBSan pass can leave out: those
# whose every line a C test or another kept CLI suite runs too
# (tests/README.md, "What each pass runs").  Builds BUILD (default
# build-cov) with --coverage, runs every suite once (tests/run.sh, two
# lanes), each suite's processes writing their counts under a prefix of
# its own (GCOV_PREFIX), then prints the report of suites.py.  Takes about
# as long as one pass of make check.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build=$(realpath -m "${1:-$SRC/build-cov}")
cmake -S "$SRC" -B "$build" -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=--coverage \
    -DCMAKE_EXE_LINKER_FLAGS=--coverage -DCMAKE_SHARED_LINKER_FLAGS=--coverage >/dev/null
cmake --build "$build" -j"$(nproc)" >/dev/null

counts=$(mktemp -d)
wrappers=$(mktemp -d)
trap 'rm -rf "$counts" "$wrappers"' EXIT
# A bats in front of the real one: each file's processes count under
# $counts/FILE.  The C tests count under $counts/ctests.
real_bats=$(command -v bats)
cat >"$wrappers/bats" <<WRAP
#!/bin/sh
for last; do :; done
GCOV_PREFIX=$counts/\$(basename "\$last") exec "$real_bats" "\$@"
WRAP
chmod +x "$wrappers/bats"
PATH=$wrappers:$PATH TESTS='\.bats$' PGLOCK_TEST_JOBS=2 \
    "$SRC/tests/run.sh" "$build" >"$build/coverage-run.log" 2>&1 ||
    echo "coverage: some suites failed (their counts are partial): $build/coverage-run.log" >&2
GCOV_PREFIX=$counts/ctests TESTS='^test_' PGLOCK_TEST_JOBS=2 \
    "$SRC/tests/run.sh" "$build" >>"$build/coverage-run.log" 2>&1 ||
    echo "coverage: some C tests failed: $build/coverage-run.log" >&2
python3 "$SRC/tests/coverage/suites.py" "$build" "$counts"
