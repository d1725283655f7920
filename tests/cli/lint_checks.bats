#!/usr/bin/env bats
# make lint's checks of the C: tests/lint_format.sh (laid out as
# .clang-format says), tests/lint_cycles.py (no two files of src/ depend on
# each other in a circle), tests/lint_layers.py (the CLI uses no internal
# of the library's), tests/lint_state.py (no mutable file-scope object in
# the CLI but the few kept for a reason), tests/lint_copies.py (no run of
# six lines repeated to the letter) and tests/lint_functions.py (no
# function over 100 lines).  Each can fail, on a small tree made here; and
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

@test "lint_layers: a CLI object using a pglock__ internal of src/lib, or a CLI file including a header of src/lib, fails, named; through src/common it passes" {
    mkdir -p "$t/src/cli" "$t/src/lib" "$t/src/common"
    printf 'int pglock__secret(void) { return 1; }\nint pglock_open(void) { return 2; }\n' >"$t/src/lib/l.c"
    printf 'int pglock__secret(void);\nint a(void) { return pglock__secret(); }\n' >"$t/src/cli/a.c"
    printf 'int pglock_open(void);\nint b(void) { return pglock_open(); }\n' >"$t/src/cli/b.c"
    : >"$t/src/lib/internal.h"
    printf '#include "../lib/internal.h"\nint c(void) { return 3; }\n' >"$t/src/cli/c.c"
    object lib/l; object cli/a; object cli/b; object cli/c
    run -1 "$root/tests/lint_layers.py" --source "$t" "$t/build"
    [ "${lines[0]}" = "lint_layers: src/cli/a.c uses pglock__secret, an internal of src/lib/l.c: use pglock.h, or move what both need to src/common/" ]
    [ "${lines[1]}" = 'lint_layers: src/cli/c.c includes "../lib/internal.h", a header of src/lib/' ]
    [ "${lines[2]}" = "lint_layers: 2 finding(s)" ]
    # by its name alone too
    printf '#include "internal.h"\nint c(void) { return 3; }\n' >"$t/src/cli/c.c"
    run -1 "$root/tests/lint_layers.py" --source "$t" "$t/build"
    [[ "$output" == *'src/cli/c.c includes "internal.h"'* ]]
    # the internal moved to src/common, the include gone: it passes
    rm "$t/src/lib/l.c" "$t/build/CMakeFiles/x.dir/src/lib/l.c.o"
    printf 'int pglock__secret(void) { return 1; }\n' >"$t/src/common/s.c"
    printf 'int pglock_open(void) { return 2; }\n' >"$t/src/lib/l.c"
    printf 'int c(void) { return 3; }\n' >"$t/src/cli/c.c"
    object common/s; object lib/l; object cli/c
    run -0 "$root/tests/lint_layers.py" --source "$t" "$t/build"
    [ "$output" = "lint_layers: 3 objects of src/cli use no internal of src/lib's 1" ]
    # no objects: the check cannot run
    run -2 "$root/tests/lint_layers.py" --source "$t" "$t/nothing"
}

@test "lint_layers: the command line uses no internal of the library" {
    [ -n "${PGLOCK_BUILD:-}" ]
    run -0 "$root/tests/lint_layers.py" "$PGLOCK_BUILD"
}

@test "lint_state: a CLI object's mutable file-scope object fails, named, a function's static too; constant tables and the kept ones pass" {
    mkdir -p "$t/src/cli/run" "$t/src/lib"
    printf 'int counter;\nint bump(void) { return ++counter; }\n' >"$t/src/cli/a.c"
    printf 'int once(void) { static int said = 1; return said--; }\n' >"$t/src/cli/b.c"
    # tables, with and without pointers: written once, not state
    printf 'static const char *const names[] = {"a", "b"};\nstatic const int sizes[] = {1, 2};\nconst char *name(int i) { return names[i] + sizes[i]; }\n' >"$t/src/cli/c.c"
    printf 'static volatile int stop_signal;\nvoid on_stop(int s) { stop_signal = s; }\n' >"$t/src/cli/run/run_signals.c"
    printf 'int lib_state;\n' >"$t/src/lib/l.c"
    object cli/a; object cli/b; object cli/c; object cli/run/run_signals; object lib/l
    run -1 "$root/tests/lint_state.py" --source "$t" "$t/build"
    [ "${lines[0]}" = "lint_state: src/cli/a.c keeps counter at file scope (.bss): give it an owner (a struct the caller passes), or say in tests/lint_state.py why it cannot have one" ]
    [[ "${lines[1]}" == "lint_state: src/cli/b.c keeps said at file scope (.data): "* ]]
    [ "${lines[2]}" = "lint_state: 2 finding(s)" ]
    [ "${#lines[@]}" -eq 3 ]
    # the state passed by the caller instead: it passes
    printf 'int bump(int *counter) { return ++*counter; }\n' >"$t/src/cli/a.c"
    printf 'int once(int *said) { return (*said)--; }\n' >"$t/src/cli/b.c"
    object cli/a; object cli/b
    run -0 "$root/tests/lint_state.py" --source "$t" "$t/build"
    [ "$output" = "lint_state: 4 objects of src/cli keep 1 mutable file-scope objects, each for its reason" ]
    run -2 "$root/tests/lint_state.py" --source "$t" "$t/nothing"
}

@test "lint_state: the command line keeps only the signal plumbing and the output verbosity at file scope" {
    [ -n "${PGLOCK_BUILD:-}" ]
    run -0 "$root/tests/lint_state.py" "$PGLOCK_BUILD"
}

@test "lint_functions: a function over 100 lines fails, named with its first line, however its declarator is split; 100 lines pass" {
    mkdir -p "$t/src/sub"
    # lines: the declarator (2), "{", 97 statements, "}" = 101
    { echo '/* a comment above does not count */'
      echo 'static int long_one(int a,'; echo '                    int b)'; echo '{'
      for i in $(seq 97); do echo "    a += b * $i;"; done
      echo '}'; echo
      echo 'int short_one(void)'; echo '{'; echo '    return 0;'; echo '}'; } >"$t/src/sub/a.c"
    run -1 "$root/tests/lint_functions.py" "$t/src"
    [ "${lines[0]}" = "lint_functions: $t/src/sub/a.c:2: 101 lines, over 100: static int long_one(int a," ]
    [ "${lines[1]}" = "lint_functions: 1 function(s) over 100 lines" ]
    # one statement less: 100 lines
    sed -i '/a += b \* 97;/d' "$t/src/sub/a.c"
    run -0 "$root/tests/lint_functions.py" "$t/src"
    [ "$output" = "lint_functions: no function over 100 lines in 1 files" ]
    run -2 "$root/tests/lint_functions.py"
}

@test "lint_functions: src/ has no function over 100 lines" {
    run -0 "$root/tests/lint_functions.py" "$root/src"
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

@test "lint_format: a C file laid out otherwise than .clang-format fails, named; reformatted, or under /* clang-format off */, it passes; build folders are not looked at" {
    mkdir -p "$t/src/cli" "$t/build/x"
    printf 'int f(int a)\n{\n    return a;\n}\n' >"$t/src/cli/good.c"
    printf 'int  g(int a) { return a; }\n' >"$t/src/cli/bad.c"
    cp "$t/src/cli/bad.c" "$t/build/x/ignored.c"
    run -1 "$root/tests/lint_format.sh" "$t"
    [ "${lines[0]}" = "lint_format: src/cli/bad.c is not laid out as .clang-format says (clang-format -i src/cli/bad.c)" ]
    [ "${lines[1]}" = "lint_format: 1 of 2 C files to reformat" ]
    [ "${#lines[@]}" -eq 2 ]
    # the same lines, kept as written on purpose
    { echo '/* clang-format off */'; cat "$t/src/cli/bad.c"; echo '/* clang-format on */'; } >"$t/src/cli/kept.h"
    (cd "$t" && clang-format --style="file:$root/.clang-format" -i src/cli/bad.c)
    run -0 "$root/tests/lint_format.sh" "$t"
    [ "$output" = "lint_format: 3 C files, laid out as .clang-format says" ]
}

@test "lint_format: the real tree is laid out as .clang-format says" {
    run -0 "$root/tests/lint_format.sh"
    [[ "$output" == "lint_format: "*" C files, laid out as .clang-format says" ]]
}
