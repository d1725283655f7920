#!/usr/bin/env bats
# The installed library is usable by another project: `cmake --install`
# into a temporary prefix, then a small consumer (tests/data/consumer)
# built with pkg-config and with CMake's find_package(pglock) takes a lock
# that pg_locks shows.  Also: the exported symbols are exactly the list in
# tests/data/exports.txt, the CMake package's version rule is the SONAME's,
# the README's library example builds, links and runs as written, and
# every command has its installed man page, which names each of its
# options, and every exported function its page, pglock_FUNCTION(3),
# generated from pglock(3) (cmake/man3_pages.awk).

load helpers
bats_require_minimum_version 1.5.0

setup() {
    need PGLOCK_TEST_PRIMARY PGLOCK_BUILD
    out=$BATS_TEST_TMPDIR
    SRC=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    CONSUMER=$SRC/tests/data/consumer
    K="install-test-$$-$RANDOM"
    command -v cmake >/dev/null || skip "cmake is not installed"
}

@test "the library exports exactly tests/data/exports.txt, each declared in pglock.h and documented in pglock(3)" {
    command -v nm >/dev/null || skip "nm is not installed"
    local so=("$PGLOCK_BUILD"/libpglock.so)
    [ -e "${so[0]}" ]
    nm -D --defined-only "${so[0]}" | awk 'NF == 3 { print $3 }' |
        LC_ALL=C sort >"$out/syms"
    [ -s "$out/syms" ]
    grep -v '^#' "$SRC/tests/data/exports.txt" >"$out/listed"
    # The list is kept sorted, so that a diff of it reads well.
    LC_ALL=C sort -c "$out/listed"
    diff -u "$out/listed" "$out/syms" || {
        echo "libpglock.so's exports (+) differ from tests/data/exports.txt (-)" >&2
        false
    }
    # The Debian symbols file lists the same (dpkg-gensymbols checks the
    # built library against it; new symbols come with this list's).
    grep '^ ' "$SRC/debian/libpglock1.symbols" | sed 's/^ \([^@]*\)@Base .*/\1/' |
        LC_ALL=C sort >"$out/debian"
    diff -u "$out/listed" "$out/debian" || {
        echo "debian/libpglock1.symbols (+) differs from tests/data/exports.txt (-)" >&2
        false
    }
    local s bad=0
    while read -r s; do
        grep -Eq "^PGLOCK_EXPORT .*[^a-z_]$s\(" "$SRC/include/pglock.h" ||
            { echo "$s is exported but not declared with PGLOCK_EXPORT in pglock.h" >&2; bad=1; }
        grep -Eq "[^a-z_]$s\(" "$SRC/docs/pglock.3" ||
            { echo "$s is exported but pglock(3) does not name it" >&2; bad=1; }
    done <"$out/syms"
    [ "$bad" -eq 0 ]
}

@test "the licence: LICENSE's terms are debian/copyright's PostgreSQL Licence, word for word, and the README names it" {
    local root=$BATS_TEST_DIRNAME/../..
    # debian/copyright's stand-alone License paragraph: its text, indented
    # by one space, "." for a blank line
    awk '/^License: PostgreSQL$/ { n++; next } n == 2 && /^ / { print } n == 2 && !/^ / { exit }' \
        "$root/debian/copyright" | sed -e 's/^ //' -e 's/^\.$//' >"$out/copyright.txt"
    [ -s "$out/copyright.txt" ]
    # LICENSE: the same terms after its name and copyright line
    diff <(sed -n '/^Permission to use/,$p' "$root/LICENSE") "$out/copyright.txt"
    grep -qx 'Copyright (c) 2026, The pglock Developers' "$root/LICENSE"
    grep -qx 'Copyright: 2026, The pglock Developers' "$root/debian/copyright"
    grep -q 'PostgreSQL Licence.*(LICENSE)' "$root/README.md"
}

@test "the installed header compiles alone, strictly, and points into no source tree" {
    install_to "$out/prefix"
    # It is read where no source tree is: no "see src/lib/...".
    run -1 grep -nE '(^|[^a-z_])(src|tests|bench|debian|docs)/' "$out/prefix/include/pglock.h"
    # Its licence, on its first line, and the pkg-config file's, as a
    # comment (every pkg-config) and as pkgconf's License field
    [ "$(head -1 "$out/prefix/include/pglock.h")" = '/* SPDX-License-Identifier: PostgreSQL */' ]
    local pc
    pc=$(find "$out/prefix" -name pglock.pc)
    [ "$(head -1 "$pc")" = '# SPDX-License-Identifier: PostgreSQL' ]
    grep -qx 'License: PostgreSQL' "$pc"
    printf '#include <pglock.h>\nint f(void);\nint f(void) { return PGLOCK_OK; }\n' >"$out/alone.c"
    local flags libpq_cflags
    flags=$(pkg-config --cflags libpq)
    read -ra libpq_cflags <<<"$flags"
    cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$out/prefix/include" \
        "${libpq_cflags[@]}" -c "$out/alone.c" -o "$out/alone.o"
}

@test "the README's library example builds and links as written, and runs: one holder bills, a second finds it busy (75)" {
    command -v pkg-config >/dev/null || skip "pkg-config is not installed"
    install_to "$out/prefix"
    doc_block README.md readme-library >"$out/example.c"
    # pglock(3)'s EXAMPLE is the same program
    diff <(doc_block docs/pglock.3 man3-example) "$out/example.c"
    grep -q 'pglock_hold_start' "$out/example.c"
    grep -q 'int main' "$out/example.c"
    # strictly, against the installed header
    local flags libpq_cflags pglock_flags libdir
    flags=$(pkg-config --cflags libpq)
    read -ra libpq_cflags <<<"$flags"
    cc -std=c11 -pedantic -Wall -Wextra -Werror -I"$out/prefix/include" \
        "${libpq_cflags[@]}" -c "$out/example.c" -o "$out/example.o"
    # then linked as the README says (pkg-config), with the prefix's rpath
    libdir=$(dirname "$(find "$out/prefix" -name 'libpglock.so' | head -1)")
    flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs pglock)
    read -ra pglock_flags <<<"$flags"
    cc -std=c11 ${PGLOCK_SANITIZE:+-fsanitize=address,undefined} -o "$out/example" \
        "$out/example.c" "${pglock_flags[@]}" "-Wl,-rpath,$libdir"
    # It connects through libpq's PG* variables (the harness's server).
    [ -n "$PGHOST" ] && [ -n "$PGDATABASE" ]
    run -0 env -u LD_LIBRARY_PATH "$out/example"
    [ "$(grep -c '^billed a customer$' <<<"$output")" = 3 ]
    [ "$(q "select pg_try_advisory_lock($(name_sql nightly-billing))")" = t ]
    # held elsewhere: 75, nothing billed
    "$PGLOCK_BIN" run nightly-billing -- sh -c 'echo held; exec sleep 30' >"$out/holder" 2>&1 &
    local holder=$!
    wait_until 10 grep -q held "$out/holder"
    run -75 env -u LD_LIBRARY_PATH "$out/example"
    [[ "$output" != *billed* ]]
    kill -TERM "$holder"
    wait "$holder" || true
}

@test "docs/library.md's transaction-lock example builds as written and runs: it holds the lock in its transaction, a second finds it busy (75)" {
    command -v pkg-config >/dev/null || skip "pkg-config is not installed"
    install_to "$out/prefix"
    doc_block docs/library.md library-xact >"$out/xact.c"
    diff <(doc_block docs/pglock.3 man3-xact-example) "$out/xact.c"
    local libdir flags pglock_flags
    libdir=$(dirname "$(find "$out/prefix" -name 'libpglock.so' | head -1)")
    flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs pglock)
    read -ra pglock_flags <<<"$flags"
    cc -std=c11 -pedantic -Wall -Wextra -Werror -o "$out/xact" "$out/xact.c" \
        "${pglock_flags[@]}" "-Wl,-rpath,$libdir"
    run -0 env -u LD_LIBRARY_PATH "$out/xact"
    [ "$output" = "rebuilt the report, holding 1 lock" ]
    # the COMMIT freed it
    [ "$(q "select pg_try_advisory_lock(42, 1001)")" = t ]
    q "select pg_advisory_unlock(42, 1001)" >/dev/null
    "$PGLOCK_BIN" run 42:1001 -- sh -c 'echo held; exec sleep 30' >"$out/holder" 2>&1 &
    local holder=$!
    wait_until 10 grep -q held "$out/holder"
    run -75 env -u LD_LIBRARY_PATH "$out/xact"
    [[ "$output" != *rebuilt* ]]
    kill -TERM "$holder"
    wait "$holder" || true
}

@test "pkg-config: a consumer builds against the installed pglock.pc and locks" {
    command -v pkg-config >/dev/null || skip "pkg-config is not installed"
    install_to "$out/prefix"
    local pcdir
    pcdir=$(dirname "$(find "$out/prefix" -name pglock.pc)")
    export PKG_CONFIG_PATH=$pcdir
    [ "$(pkg-config --modversion pglock)" = "$("$PGLOCK_BUILD/pglock" --version | awk '{print $2}')" ]
    # The flags point into the prefix we installed to, not the configured one.
    [[ "$(pkg-config --cflags pglock)" == *"$out/prefix"* ]] ||
        [[ "$(pkg-config --cflags pglock)" == *"$pcdir/"* ]]
    local flags pglock_flags
    flags=$(pkg-config --cflags --libs pglock)
    read -ra pglock_flags <<<"$flags"
    cc -std=c11 -Wall -Wextra -Werror ${PGLOCK_SANITIZE:+-fsanitize=address,undefined} \
        -o "$out/consumer" "$CONSUMER/consumer.c" "${pglock_flags[@]}"
    LD_LIBRARY_PATH=$(dirname "$(find "$out/prefix" -name 'libpglock.so' | head -1)") \
        run "$out/consumer" "$PGLOCK_TEST_PRIMARY" "$K"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == "held by "[0-9]* ]]
    # The consumer closed its client: the lock is free at once.
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = t ]
}

# header_version HEADER: "MAJOR MINOR PATCH" of a pglock.h.
header_version() {
    awk '/^#define PGLOCK_VERSION_(MAJOR|MINOR|PATCH) / { printf "%s ", $3 }' "$1"
}

# The SONAME rule (pglock.h, "ABI and SONAME policy"), as the versions a
# program may ask find_package for, given the installed MAJOR MINOR PATCH:
# before 1.0 each MINOR is an ABI of its own, from 1.0 on each MAJOR.
accepted_versions() {
    if [ "$1" -eq 0 ]; then
        echo "0.$2 0.$2.$3"
    else
        echo "$1.0 $1.$2 $1.$2.$3"
    fi
}
refused_versions() {
    if [ "$1" -eq 0 ]; then
        echo "0.$(($2 + 1)) 1.0"
        [ "$2" -eq 0 ] || echo "0.$(($2 - 1))"
    else
        echo "$(($1 + 1)).0 $1.$(($2 + 1))"
        [ "$1" -eq 1 ] && echo "0.$2" || echo "$(($1 - 1)).$2"
    fi
}

# find_pglock PREFIX VERSION: configures a project that asks find_package
# for VERSION (tests/data/find_version) against the package in PREFIX; the
# log is $out/find-VERSION.log.  A fresh build directory each time: a
# cached pglock_DIR would be reused.
find_pglock() {
    rm -rf "$out/find-$2"
    cmake -S "$SRC/tests/data/find_version" -B "$out/find-$2" -DCMAKE_PREFIX_PATH="$1" \
        -DPGLOCK_WANT="$2" >"$out/find-$2.log" 2>&1
}

# check_version_rule PREFIX MAJOR MINOR PATCH: the package in PREFIX, of
# that version, accepts and refuses what the SONAME rule says.
check_version_rule() {
    local v
    for v in $(accepted_versions "$2" "$3" "$4"); do
        find_pglock "$1" "$v" || {
            cat "$out/find-$v.log"
            echo "find_package(pglock $v) refused $2.$3.$4" >&2
            return 1
        }
    done
    for v in $(refused_versions "$2" "$3" "$4"); do
        if find_pglock "$1" "$v"; then
            echo "find_package(pglock $v) accepted $2.$3.$4:" \
                "$(grep '^pglock_DIR' "$out/find-$v/CMakeCache.txt")" >&2
            return 1
        fi
        # Refused for its version, not for anything else (CMake wraps
        # its message: read it as one line).
        local said
        said=$(tr -s ' \n' ' ' <"$out/find-$v.log")
        [[ "$said" == *"compatible with requested version \"$v\""* &&
            "$said" == *"version: $2.$3.$4"* ]] || {
            cat "$out/find-$v.log"
            return 1
        }
    done
}

@test "find_package(pglock VERSION): the installed package accepts and refuses versions by the SONAME rule" {
    install_to "$out/prefix"
    local ver
    ver=$(header_version "$out/prefix/include/pglock.h")
    # shellcheck disable=SC2086 # three words
    check_version_rule "$out/prefix" $ver
}

# The rule is computed from the version in CMakeLists.txt: the same tree,
# its header saying 0.3.0 and then 1.3.0, writes a package version file
# with the rule of each, which find_package then applies.
@test "find_package(pglock VERSION): the rule follows the version, SameMinorVersion before 1.0 and SameMajorVersion after" {
    mkdir "$out/tree"
    cp -R "$SRC/CMakeLists.txt" "$SRC/include" "$SRC/src" "$SRC/cmake" "$SRC/docs" "$out/tree/"
    local ver major minor
    for ver in 0.3.0 1.3.0; do
        IFS=. read -r major minor _ <<<"$ver"
        sed -i -e "s/^#define PGLOCK_VERSION_MAJOR .*/#define PGLOCK_VERSION_MAJOR $major/" \
            -e "s/^#define PGLOCK_VERSION_MINOR .*/#define PGLOCK_VERSION_MINOR $minor/" \
            -e "s/^#define PGLOCK_VERSION_PATCH .*/#define PGLOCK_VERSION_PATCH 0/" \
            -e "s/^#define PGLOCK_VERSION \".*/#define PGLOCK_VERSION \"$ver\"/" \
            "$out/tree/include/pglock.h"
        [ "$(header_version "$out/tree/include/pglock.h")" = "$major $minor 0 " ]
        cmake -S "$out/tree" -B "$out/tree-$ver" -DPGLOCK_TESTS=OFF \
            >"$out/tree-$ver.log" 2>&1 || { cat "$out/tree-$ver.log"; false; }
        grep -q "^set(PACKAGE_VERSION \"$ver\")" "$out/tree-$ver/pglockConfigVersion.cmake"
        # A package of that version: its version file, and a config that
        # stands for the library (only configuring is asked of it).
        local pkg=$out/fake-$ver/lib/cmake/pglock
        mkdir -p "$pkg"
        cp "$out/tree-$ver/pglockConfigVersion.cmake" "$pkg/"
        echo 'add_library(pglock::pglock INTERFACE IMPORTED)' >"$pkg/pglockConfig.cmake"
        check_version_rule "$out/fake-$ver" "$major" "$minor" 0
    done
}

@test "find_package(pglock): a CMake consumer builds against the installed package and locks" {
    # the consumer's CMakeLists.txt has the README's two lines, its target
    # named consumer instead of myapp (and the version it may ask for,
    # empty here, left out)
    local line
    while IFS= read -r line; do
        sed 's/ ${PGLOCK_WANT}//' "$CONSUMER/CMakeLists.txt" | grep -qxF "${line//myapp/consumer}" ||
            { echo "the consumer lacks the README's line: $line"; false; }
    done < <(doc_block README.md readme-cmake)
    install_to "$out/prefix"
    local ver
    read -r -a ver <<<"$(header_version "$out/prefix/include/pglock.h")"
    # An ASan build's library needs an ASan consumer (PGLOCK_SANITIZE).
    cmake -S "$CONSUMER" -B "$out/cbuild" -DCMAKE_PREFIX_PATH="$out/prefix" \
        -DPGLOCK_WANT="${ver[0]}.${ver[1]}" \
        ${PGLOCK_SANITIZE:+-DCMAKE_C_FLAGS=-fsanitize=address,undefined} \
        >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; false; }
    cmake --build "$out/cbuild" >"$out/build.log" 2>&1 || { cat "$out/build.log"; false; }
    # CMake's install RPATH handling: the build tree binary finds the lib.
    LD_LIBRARY_PATH=$(dirname "$(find "$out/prefix" -name 'libpglock.so' | head -1)") \
        run "$out/cbuild/consumer" "$PGLOCK_TEST_PRIMARY" "$K"
    echo "$output"
    [ "$status" -eq 0 ]
    [[ "$output" == "held by "[0-9]* ]]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = t ]
}

@test "a custom prefix: the tool needs nothing more; a consumer linked with its rpath and man with MANPATH find the rest (README)" {
    command -v pkg-config >/dev/null || skip "pkg-config is not installed"
    install_to "$out/prefix"
    # the tool: libpglock is linked in, only libpq comes from the system
    run -0 env -u LD_LIBRARY_PATH "$out/prefix/bin/pglock" key nightly-billing
    [[ "$output" == *-3003901418071974465* ]]
    run -0 ldd "$out/prefix/bin/pglock"
    [[ "$output" != *libpglock* ]]
    # what it needs besides libc (and a sanitizer's runtime), as the
    # README's Install section says: libpq and libcrypto
    run -0 objdump -p "$out/prefix/bin/pglock"
    [ "$(awk '$1 == "NEEDED" { print $2 }' <<<"$output" | grep -vE '^lib(c|m|asan|ubsan|gcc_s|stdc\+\+)\.so' | sort | xargs)" = "libcrypto.so.3 libpq.so.5" ]
    tr '\n' ' ' <"$BATS_TEST_DIRNAME/../../README.md" |
        grep -q 'at run time it needs only libpq and OpenSSL.s libcrypto, `libpq.so.5` and `libcrypto.so.3`'
    # a consumer linked with -Wl,-rpath,$PREFIX/lib runs without LD_LIBRARY_PATH
    local libdir flags pglock_flags
    libdir=$(dirname "$(find "$out/prefix" -name 'libpglock.so' | head -1)")
    flags=$(PKG_CONFIG_PATH=$libdir/pkgconfig pkg-config --cflags --libs pglock)
    read -ra pglock_flags <<<"$flags"
    cc -std=c11 ${PGLOCK_SANITIZE:+-fsanitize=address,undefined} -o "$out/consumer" \
        "$CONSUMER/consumer.c" "${pglock_flags[@]}" "-Wl,-rpath,$libdir"
    run -0 env -u LD_LIBRARY_PATH "$out/consumer" "$PGLOCK_TEST_PRIMARY" "$K"
    [[ "$output" == "held by "[0-9]* ]]
    # the man pages, with MANPATH
    if command -v man >/dev/null; then
        run -0 env MANPATH="$out/prefix/share/man:" man -w pglock
        [ "$output" = "$out/prefix/share/man/man1/pglock.1" ]
    fi
}

# roff_warnings PAGE...: groff's warnings (all of them, -ww) on rendering
# the man pages at 80 columns, as man does (UTF-8 input through preconv,
# -k; tables, -t), in one call for all: man runs half a dozen processes a
# page.  preconv hides the file's name, so when there are warnings each
# page is rendered again alone to name it.
roff_warnings() {
    local page said
    said=$(groff -k -t -man -Tutf8 -ww -z -rLL=78n "$@" 2>&1)
    [ -n "$said" ] || return 0
    for page in "$@"; do
        said=$(groff -k -t -man -Tutf8 -ww -z -rLL=78n "$page" 2>&1)
        [ -z "$said" ] || echo "${page##*/}: $said"
    done
}

# unnamed_options PAGE OPTION...: prints each OPTION that the man page
# (roff) does not write as --OPTION, not only as the start of a longer one
# (--host is not --host-label).  One perl for all of a page's options.
unnamed_options() {
    perl -e 'my $page = shift; open(my $f, "<", $page) or die; local $/; my $text = <$f>;
             for my $o (@ARGV) { (my $r = $o) =~ s/-/\\-/g;
                 print "$o\n" unless $text =~ /\Q$r\E(?![a-z]|\\-[a-z])/ }' "$@"
}

@test "every command has an installed man page that renders cleanly, names each option of its --help, and --help names the page" {
    install_to "$out/prefix"
    local man1=$out/prefix/share/man/man1 cmd cmds page warnings missing
    [ -f "$man1/pglock.1" ]
    cmds=$("$PGLOCK_BIN" --help | awk '/^Commands:/ { c = 1; next } c && /^  [a-z]/ { print $1 } c && /^$/ { exit }')
    [ "$(wc -w <<<"$cmds")" -ge 10 ]
    warnings=$(roff_warnings "$man1"/*.1)
    [ -z "$warnings" ] || { echo "$warnings"; false; }
    for cmd in $cmds; do
        page=$man1/pglock-$cmd.1
        [ -f "$page" ] || { echo "no page pglock-$cmd(1) installed"; false; }
        [ "$("$PGLOCK_BIN" "$cmd" --help | tail -1)" = "See pglock-$cmd(1)." ]
        # shellcheck disable=SC2046 # one option a word
        missing=$(unnamed_options "$page" $("$PGLOCK_BIN" "$cmd" --help |
            grep -oE '^ +(-., )?--[a-z][a-z-]*' | grep -oE -- '--[a-z-]+'))
        [ -z "$missing" ] || { echo "pglock-$cmd(1) does not name:" $missing; false; }
    done
}

@test "every exported function has its page, pglock_FUNCTION(3), and every such page is an exported function's: man and whatis find it, and it renders cleanly" {
    install_to "$out/prefix"
    local man=$out/prefix/share/man s warnings rendered synopsis description
    grep -v '^#' "$SRC/tests/data/exports.txt" >"$out/listed"
    find "$man/man3" -name '*.3' ! -name pglock.3 -printf '%f\n' | sed 's/\.3$//' |
        LC_ALL=C sort >"$out/pages"
    diff -u "$out/listed" "$out/pages" || {
        echo "the installed man3 pages (+) differ from tests/data/exports.txt (-):" \
            "each function needs its SYNOPSIS lines in pglock(3) and its name in a" \
            "'.\\\" man3 pages:' comment under the heading of the section that describes it" >&2
        false
    }
    command -v man >/dev/null || skip "man is not installed"
    # man finds every page by its name, in one call.  Rendering each page
    # through man costs half a dozen processes a page (preconv, tbl,
    # nroff...), twice over (the warnings, then the text): 300 processes,
    # 17 CPU-s.  groff runs man's pipeline over every page in one call:
    # the warnings, then the text, wide so that no name is hyphenated
    # across two lines, split into $out/rendered/NAME at each page's
    # header line.
    local names
    mapfile -t names <"$out/listed"
    run -0 env MANPATH="$man:" man -w "${names[@]}"
    [ "$output" = "$(sed "s|.*|$man/man3/&.3|" "$out/listed")" ] ||
        { echo "man -w found:"; echo "$output"; false; }
    local pages=("${names[@]/#/$man/man3/}")
    pages=("${pages[@]/%/.3}")
    warnings=$(roff_warnings "${pages[@]}")
    [ -z "$warnings" ] || { echo "$warnings"; false; }
    mkdir "$out/rendered"
    groff -k -t -man -Tutf8 -P-cbou -rLL=2000n "${pages[@]}" |
        awk -v dir="$out/rendered" 'match($0, /^pglock_[a-z0-9_]+\(3\) /) {
            name = substr($0, 1, RLENGTH - 4); if (name != page) { page = name; close(file); file = dir "/" page } }
            file { print > file }'
    for s in "${names[@]}"; do
        rendered=$(cat "$out/rendered/$s" 2>/dev/null) || { echo "man $s rendered no page"; false; }
        [[ $rendered =~ $'\n'\ +$s\ -\ [a-z] ]] ||
            { echo "$s(3) has no NAME line for it"; false; }
        [[ $rendered == *$'\n'SYNOPSIS$'\n'*$'\n'DESCRIPTION$'\n'*$'\n'SEE\ ALSO$'\n'* ]] ||
            { echo "$s(3) lacks SYNOPSIS, DESCRIPTION or SEE ALSO"; false; }
        synopsis=${rendered#*$'\n'SYNOPSIS$'\n'} synopsis=${synopsis%%$'\n'DESCRIPTION$'\n'*}
        [[ $synopsis =~ [\ *]$s\( ]] ||
            { echo "$s(3)'s SYNOPSIS does not declare it"; false; }
        description=${rendered#*$'\n'DESCRIPTION$'\n'} description=${description%%$'\n'SEE ALSO$'\n'*}
        [[ $description == *"$s()"* ]] ||
            { echo "$s(3)'s DESCRIPTION (its section of pglock(3)) does not name it"; false; }
    done
    # whatis and apropos read the NAME lines, once mandb has indexed them
    # (on a copy: mandb writes its index into the tree it is given).
    if command -v mandb >/dev/null && command -v whatis >/dev/null; then
        cp -R "$man" "$out/indexed"
        mandb -q "$out/indexed"
        # shellcheck disable=SC2046 # one name a word
        whatis -M "$out/indexed" $(cat "$out/listed") | awk '{ print $1 }' |
            LC_ALL=C sort >"$out/whatis"
        diff -u "$out/listed" "$out/whatis"
        run -0 apropos -M "$out/indexed" lease
        [[ "$output" == *"pglock_hold_start (3)"* ]]
    fi
}

@test "the per-function pages follow pglock(3) at the next build: a function renamed there has its page under the new name only" {
    mkdir "$out/tree"
    cp -R "$SRC/CMakeLists.txt" "$SRC/include" "$SRC/src" "$SRC/cmake" "$SRC/docs" "$out/tree/"
    cmake -S "$out/tree" -B "$out/tree-build" -DPGLOCK_TESTS=OFF >"$out/configure.log" 2>&1 ||
        { cat "$out/configure.log"; false; }
    cmake --build "$out/tree-build" --target pglock_man3 >"$out/build.log" 2>&1 ||
        { cat "$out/build.log"; false; }
    [ -f "$out/tree-build/man3/pglock_hold_start.3" ]
    sed -i 's/pglock_hold_start\b/pglock_hold_begin/g' "$out/tree/docs/pglock.3"
    cmake --build "$out/tree-build" --target pglock_man3 >"$out/build.log" 2>&1 ||
        { cat "$out/build.log"; false; }
    [ -f "$out/tree-build/man3/pglock_hold_begin.3" ]
    [ ! -e "$out/tree-build/man3/pglock_hold_start.3" ]
    grep -q '^pglock_hold_begin \\- ' "$out/tree-build/man3/pglock_hold_begin.3"
    # A function declared but in no section's list fails the build, saying so.
    sed -i '/^\.\\" man3 pages: .*pglock_hold_begin/s/ pglock_hold_begin//' "$out/tree/docs/pglock.3"
    run ! cmake --build "$out/tree-build" --target pglock_man3
    [[ "$output" == *"pglock_hold_begin is in the SYNOPSIS but no section lists it"* ]]
}
