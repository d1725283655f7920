#!/usr/bin/env bats
# The Debian packages (make deb), installed for real, used and purged:
# tests/deb/check.sh runs this file as root, in a harness of its own, with
# PGLOCK_DEB_DIR (the .debs) and PGLOCK_BUILD (a source build, installed
# into a temporary /usr/local to show that a source install beside the
# packages changes nothing; the machine's own /usr/local is never
# touched).  The tests run in order: the last one purges.

load ../cli/helpers
bats_require_minimum_version 1.5.0

setup_file() {
    export SRC MA LIBPKG STATE
    SRC=$(cd "$BATS_TEST_DIRNAME/../.." && pwd)
    MA=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
    STATE=$BATS_FILE_TMPDIR
    local deb debs=()
    for deb in "$PGLOCK_DEB_DIR"/*.deb; do
        case $deb in *-dbgsym_*) continue ;; esac
        debs+=("$deb")
    done
    [ ${#debs[@]} -eq 3 ] || { echo "expected 3 packages in $PGLOCK_DEB_DIR: ${debs[*]}"; return 1; }
    LIBPKG=$(basename "$(printf '%s\n' "${debs[@]}" | grep '/libpglock[0-9]')")
    LIBPKG=${LIBPKG%%_*}
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
        "${debs[@]}" </dev/null >"$STATE/install.log" 2>&1 ||
        { cat "$STATE/install.log"; return 1; }
    local p
    for p in pglock "$LIBPKG" libpglock-dev; do dpkg -L "$p"; done | sort -u >"$STATE/paths"
    # A source install of the same tree, for the tests that put it on
    # /usr/local (in a mount namespace of their own).
    cmake --install "$PGLOCK_BUILD" --prefix "$STATE/local" >"$STATE/src-install.log" 2>&1 ||
        { cat "$STATE/src-install.log"; return 1; }
}

teardown_file() {
    # (whatever failed: the machine keeps no package of ours)
    local p
    for p in pglock "$LIBPKG" libpglock-dev; do
        if dpkg -s "$p" >/dev/null 2>&1; then
            DEBIAN_FRONTEND=noninteractive apt-get purge -y -q "$p" </dev/null >/dev/null 2>&1 || true
        fi
    done
}

setup() {
    need PGLOCK_TEST_PRIMARY PGLOCK_DEB_DIR PGLOCK_BUILD
    out=$BATS_TEST_TMPDIR
    K="deb-$BATS_TEST_NUMBER-$$-$RANDOM"
}

# with_source_install CMD...: CMD with the source install on /usr/local,
# as on a machine that has both.
with_source_install() {
    unshare -m sh -c 'mount --bind "$1" /usr/local && shift && exec "$@"' sh "$STATE/local" "$@"
}

# runs_packaged_library PROGRAM: PROGRAM needs the package's SONAME, and
# the dynamic loader finds it in /usr/lib/MULTIARCH, which the package's
# ldconfig trigger registered.  (A source install that an ldconfig run
# registered under /usr/local/lib comes first, as /usr/local always does:
# then that one is what runs, and we say so.)
runs_packaged_library() {
    local soname
    soname=$(objdump -p "/usr/lib/$MA/libpglock.so" | awk '$1 == "SONAME" { print $2 }')
    objdump -p "$1" | awk '$1 == "NEEDED" { print $2 }' | grep -qx "$soname"
    # (/lib is /usr/lib on a merged-/usr system, and ldconfig says /lib)
    ldconfig -p | grep -qE " => (/usr)?/lib/$MA/$soname\$"
    run -0 ldd "$1"
    echo "$output"
    if ldconfig -p | grep -q " => /usr/local/lib/$soname\$"; then
        echo "note: this machine's source install /usr/local/lib/$soname shadows the package's at run time" >&3
    else
        [[ "$output" =~ $soname\ =\>\ (/usr)?/lib/$MA/$soname\  ]]
    fi
}

header_version() { sed -n 's/^#define PGLOCK_VERSION "\(.*\)"/\1/p' "$SRC/include/pglock.h"; }

@test "the packages carry the header's version, and the library's package is named after its SONAME" {
    local v
    v=$(header_version)
    [ -n "$v" ]
    for p in pglock "$LIBPKG" libpglock-dev; do
        [ "$(dpkg-query -W -f '${Version}' "$p")" = "$v" ]
    done
    [ "$(/usr/bin/pglock --version | awk '{print $2}')" = "$v" ]
    local lib soname
    lib=$(dpkg -L "$LIBPKG" | grep -E '/libpglock\.so\.[0-9.]+$' | head -1)
    soname=$(objdump -p "$lib" | awk '$1 == "SONAME" { print $2 }')
    echo "SONAME $soname, package $LIBPKG"
    [ "$LIBPKG" = "${soname/.so./}" ]
    [ -e "/usr/lib/$MA/$soname" ]
}

@test "the quick start against /usr/bin/pglock: one run --try holds, a second is refused with 75, status shows the holder" {
    /usr/bin/pglock run --try "$K" -- sleep 60 >"$out/first.out" 2>&1 &
    local first=$!
    echo "$first" >"$out/first.pid"
    wait_until 15 held "$K"
    run -75 /usr/bin/pglock run --try "$K" -- true
    echo "$output"
    run -0 /usr/bin/pglock status "$K"
    echo "$output"
    [[ "$output" == *"$K"* ]]
    [[ "$output" == *holds* ]]
    run -0 /usr/bin/pglock status -q "$K"
    kill -TERM "$first"
    local status=0
    wait "$first" || status=$?
    [ "$status" = 143 ]
    wait_until 10 not_held "$K"
    run -1 /usr/bin/pglock status -q "$K"
}

@test "each package's copyright file is debian/copyright: the PostgreSQL Licence" {
    local p
    for p in pglock libpglock1 libpglock-dev; do
        cmp "$SRC/debian/copyright" "/usr/share/doc/$p/copyright"
    done
    grep -qx 'License: PostgreSQL' /usr/share/doc/pglock/copyright
}

@test "the packaged examples are docs/examples/, name /usr/bin/pglock and pass systemd-analyze verify with it" {
    local ex=/usr/share/doc/pglock/examples n=0 f
    for f in "$SRC"/docs/examples/*; do
        cmp "$f" "$ex/${f##*/}"
        n=$((n + 1))
    done
    # the cron.d file, the units, the timer and the Kubernetes Deployment
    [ "$n" = 5 ]
    for f in "$ex"/*.cron "$ex"/*.service; do
        grep -q '/usr/bin/pglock ' "$f"
        run ! grep -n '/usr/local/bin/pglock ' "$f"
    done
    command -v systemd-analyze >/dev/null || skip "systemd-analyze is not installed (Debian's systemd package)"
    for f in "$ex"/*.service "$ex"/*.timer; do
        run -0 systemd-analyze verify "$f"
    done
}

@test "pkg-config (PKG_CONFIG_LIBDIR pinned): a consumer builds against the package, not a source install on /usr/local, and locks" {
    local pcdirs="/usr/lib/$MA/pkgconfig:/usr/share/pkgconfig"
    # unpinned, the source install on /usr/local wins: the pin matters
    run -0 with_source_install pkg-config --variable=pcfiledir pglock
    [ "$output" = /usr/local/lib/pkgconfig ]
    run -0 with_source_install env PKG_CONFIG_LIBDIR="$pcdirs" pkg-config --variable=pcfiledir pglock
    [ "$output" = "/usr/lib/$MA/pkgconfig" ]
    run -0 with_source_install env PKG_CONFIG_LIBDIR="$pcdirs" pkg-config --variable=includedir pglock
    [ "$(realpath "$output")" = /usr/include ]
    run -0 with_source_install env PKG_CONFIG_LIBDIR="$pcdirs" pkg-config --variable=libdir pglock
    [ "$(realpath "$output")" = "/usr/lib/$MA" ]
    run -0 env PKG_CONFIG_LIBDIR="$pcdirs" pkg-config --modversion pglock
    [ "$output" = "$(header_version)" ]
    with_source_install sh -c 'cc -std=c11 -Wall -Wextra -Werror -o "$1" "$2" $(PKG_CONFIG_LIBDIR="$3" pkg-config --cflags --libs pglock)' \
        sh "$out/consumer" "$SRC/tests/data/consumer/consumer.c" "$pcdirs"
    runs_packaged_library "$out/consumer"
    run -0 "$out/consumer" "$PGLOCK_TEST_PRIMARY" "$K"
    [[ "$output" == "held by "[0-9]* ]]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = t ]
}

@test "find_package(pglock) with CMAKE_PREFIX_PATH=/usr: a consumer builds against the package, not a source install on /usr/local, and locks" {
    with_source_install cmake -S "$SRC/tests/data/consumer" -B "$out/cbuild" \
        -DCMAKE_PREFIX_PATH=/usr >"$out/cmake.log" 2>&1 || { cat "$out/cmake.log"; false; }
    run -0 sed -n 's/^pglock_DIR:PATH=//p' "$out/cbuild/CMakeCache.txt"
    [ "$output" = "/usr/lib/$MA/cmake/pglock" ]
    with_source_install cmake --build "$out/cbuild" >"$out/build.log" 2>&1 || { cat "$out/build.log"; false; }
    runs_packaged_library "$out/cbuild/consumer"
    run -0 "$out/cbuild/consumer" "$PGLOCK_TEST_PRIMARY" "$K"
    [[ "$output" == "held by "[0-9]* ]]
    [ "$(q "select pg_try_advisory_lock($(name_sql "$K"))")" = t ]
}

@test "libpglock-dev ships a page per exported function: man finds each, pglock_FUNCTION(3), and it renders cleanly" {
    command -v man >/dev/null || skip "man is not installed"
    local s page warnings
    while read -r s; do
        page=$(dpkg -L libpglock-dev | grep -E "/man3/$s\\.3(\\.gz)?\$") ||
            { echo "libpglock-dev has no page for $s"; false; }
        run -0 env MANPATH=/usr/share/man man -w "$s"
        [ "$output" = "$page" ] || { echo "man -w $s: $output, not $page"; false; }
        warnings=$(LC_ALL=C.UTF-8 MANROFFSEQ='' MANWIDTH=80 man --warnings -E UTF-8 -l "$page" 2>&1 >/dev/null)
        [ -z "$warnings" ] || { echo "$s(3): $warnings"; false; }
    done < <(grep -v '^#' "$SRC/tests/data/exports.txt")
}

@test "apt-get purge leaves nothing: every dpkg -L path is gone (but directories other packages own), no stray file" {
    DEBIAN_FRONTEND=noninteractive apt-get purge -y -q pglock "$LIBPKG" libpglock-dev </dev/null
    local p left=0
    for p in pglock "$LIBPKG" libpglock-dev; do
        run ! dpkg -s "$p"
    done
    while IFS= read -r p; do
        [ -e "$p" ] || [ -L "$p" ] || continue
        # a directory that is still there must be another package's, or
        # hold what is not ours (the find below looks for ours)
        if [ -d "$p" ] && [ ! -L "$p" ]; then
            dpkg -S "$p" >/dev/null 2>&1 && continue
            [ -z "$(ls -A "$p")" ] || continue
        fi
        echo "left behind: $p"
        left=$((left + 1))
    done <"$STATE/paths"
    [ "$left" = 0 ]
    run -0 find /usr /etc /var/lib/dpkg/info -path /usr/local -prune -o -name '*pglock*' -print
    [ -z "$output" ]
}
