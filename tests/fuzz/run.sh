#!/bin/sh
# Runs each fuzz target for FUZZ_SECONDS (default 20) from the seed corpus
# in tests/fuzz/corpus/NAME; new inputs go to BUILD/fuzz-corpus/NAME, crashes
# to BUILD/fuzz-crashes/.  Usage: tests/fuzz/run.sh BUILD_DIR
set -eu
build=${1:?usage: tests/fuzz/run.sh BUILD_DIR}
seconds=${FUZZ_SECONDS:-20}
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$build/fuzz-crashes"
status=0
for name in key_parse duration registry; do
    bin="$build/fuzz/fuzz_$name"
    work="$build/fuzz-corpus/$name"
    mkdir -p "$work"
    echo "fuzz_$name: ${seconds}s"
    if ! "$bin" -max_total_time="$seconds" -max_len=4096 -timeout=10 \
            -print_final_stats=1 -artifact_prefix="$build/fuzz-crashes/$name-" \
            "$work" "$here/corpus/$name" > "$build/fuzz-$name.log" 2>&1; then
        echo "fuzz_$name: FAILED (see $build/fuzz-$name.log)"
        status=1
    fi
    grep -E '^stat::number_of_executed_units|^stat::new_units_added' \
        "$build/fuzz-$name.log" | sed "s/^/  /"
done
exit $status
