#!/usr/bin/env bats
# make lint's checks of src/: tests/lint_cycles.py (no two files depend on
# each other in a circle) and tests/lint_copies.py (no run of six lines
# repeated to the letter).  Each can fail, on a small tree made here; and
# the real tree passes them (PGLOCK_BUILD's objects for the circles).

bats_require_minimum_version 1.5.0

# The small trees live in a checkout under a folder named src (as in
# ~/src/pglock), so that every check here also runs from such a path.
setup() {
    root=$BATS_TEST_DIRNAME/../..
    t=$BATS_TEST_TMPDIR/src/pglock
    mkdir -p "$t"
}

# object NAME: compiles $t/src/NAME.c as the build would, into
# $t/build/CMakeFiles/x.dir/src/NAME.c.o.
object() {
    local o=$t/build/CMakeFiles/x.dir/src/$1.c.o
    mkdir -p "$(dirname "$o")"
    cc -c -o "$o" "$t/src/$1.c"
}

@test "lint_cycles: a circle between two files fails, named file by file with the symbol between each" {
    mkdir -p "$t/src/cli" "$t/src/lib"
    printf 'int b_count(void);\nint a_value(void) { return 1; }\nint a_run(void) { return b_count(); }\n' >"$t/src/cli/a.c"
    printf 'int a_value(void);\nint b_count(void) { return a_value() + 1; }\n' >"$t/src/cli/b.c"
    printf 'int a_run(void);\nint c_main(void) { return a_run(); }\n' >"$t/src/lib/c.c"
    object cli/a; object cli/b; object lib/c
    run -1 "$root/tests/lint_cycles.py" --source "$t" "$t/build"
    [ "${lines[0]}" = "lint_cycles: a circle: src/cli/a.c -> src/cli/b.c (b_count) -> src/cli/a.c (a_value)" ]
    [[ "$output" == *"1 circle(s) among 3 files"* ]]
    [[ "$output" != *c.c* ]]
    # b.c no longer calls back: no circle
    printf 'int b_count(void) { return 2; }\n' >"$t/src/cli/b.c"
    object cli/b
    run -0 "$root/tests/lint_cycles.py" --source "$t" "$t/build"
    [ "$output" = "lint_cycles: 3 files of src/, no circle" ]
}

@test "lint_cycles: a circle of three files fails; an object whose source is gone does not count" {
    mkdir -p "$t/src/run"
    printf 'int y(void);\nint x(void) { return y(); }\n' >"$t/src/run/x.c"
    printf 'int z(void);\nint y(void) { return z(); }\n' >"$t/src/run/y.c"
    printf 'int x(void);\nint z(void) { return x(); }\n' >"$t/src/run/z.c"
    object run/x; object run/y; object run/z
    run -1 "$root/tests/lint_cycles.py" --source "$t" "$t/build"
    [ "${lines[0]}" = "lint_cycles: a circle: src/run/x.c -> src/run/y.c (y) -> src/run/z.c (z) -> src/run/x.c (x)" ]
    # z.c moved away, its object left behind in the build
    rm "$t/src/run/z.c"
    run -0 "$root/tests/lint_cycles.py" --source "$t" "$t/build"
    # no objects at all: the check cannot run
    run -2 "$root/tests/lint_cycles.py" --source "$t" "$t/nothing"
    [[ "$output" == *"no object files"* ]]
}

@test "lint_cycles: the real tree has no circle" {
    [ -n "${PGLOCK_BUILD:-}" ]
    run -0 "$root/tests/lint_cycles.py" "$PGLOCK_BUILD"
    # every file of src/ is among those looked at
    local n
    n=$(find "$root/src" -name '*.c' | wc -l)
    [[ "$output" == *": $n files of src/, no circle"* ]]
    # The same tree and build, reached through a folder named src.
    ln -s "$(cd "$root" && pwd)" "$t/tree"
    ln -s "$(cd "$PGLOCK_BUILD" && pwd)" "$t/build"
    run -0 "$t/tree/tests/lint_cycles.py" --source "$t/tree" "$t/build"
    [[ "$output" == *": $n files of src/, no circle"* ]]
}

# body: six lines of C that count (a function's).
body() {
    cat <<'EOF'
    int total = 0;
    for (int i = 0; i < n; i++)
        total += v[i];
    if (total < 0)
        total = -total;
    printf("%d\n", total);
    return total;
EOF
}

@test "lint_copies: six lines repeated to the letter fail, however spaced and commented; five do not" {
    mkdir -p "$t/copy/sub"
    { echo 'int sum(const int *v, int n)'; echo '{'; body; echo '}'; } >"$t/copy/a.c"
    # the same lines, indented otherwise, with a blank line, a comment
    # and a lone brace among them
    { echo 'static int sum2(const int *v, int n) {'
      body | sed -e 's/^    //' -e '2a\
' -e '3a\
/* the total */' -e '4a\
{' ; echo '}'; } >"$t/copy/sub/b.h"
    run -1 "$root/tests/lint_copies.py" "$t/copy"
    [[ "${lines[0]}" == "lint_copies: 7 lines repeated to the letter: $t/copy/a.c:3-9 and $t/copy/sub/b.h:"* ]]
    [ "${lines[1]}" = "lint_copies: 1 copies in 2 files: make one function serve both" ]
    # five of them only
    { echo 'int sum(const int *v, int n)'; echo '{'; body | head -5; echo '}'; } >"$t/copy/a.c"
    run -0 "$root/tests/lint_copies.py" "$t/copy"
    # twice in one file
    { echo 'int f(const int *v, int n) {'; body; echo '}'; echo 'int g(const int *v, int n) {'; body; echo '}'; } >"$t/copy/a.c"
    rm "$t/copy/sub/b.h"
    run -1 "$root/tests/lint_copies.py" "$t/copy"
    [[ "${lines[0]}" == "lint_copies: 7 lines repeated to the letter: $t/copy/a.c:2-8 and $t/copy/a.c:11-17" ]]
}

@test "lint_copies: src/ has no run of six lines repeated" {
    run -0 "$root/tests/lint_copies.py" "$root/src"
    [[ "$output" == *"no run of 6 lines repeated"* ]]
}
