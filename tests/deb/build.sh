#!/usr/bin/env bash
# tests/deb/build.sh REF OUT — `make deb`: the Debian packages of commit
# REF, built by dpkg-buildpackage -us -uc -b from a `git archive` export
# (a clean tree: no build directory, no uncommitted change), then checked
# by lintian, which must report no error and no warning (a tag that stays
# is overridden with its reason in debian/*.lintian-overrides).  The .debs,
# .changes and .buildinfo go to OUT; the build log to OUT/build.log.
set -euo pipefail
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: tests/deb/build.sh REF OUT" >&2; exit 64; }
ref=$1
mkdir -p "$2"
out=$(cd "$2" && pwd)

for tool in dpkg-buildpackage dh lintian; do
    command -v "$tool" >/dev/null || {
        echo "deb: error: $tool is not installed (apt-get install dpkg-dev debhelper lintian)" >&2
        exit 69
    }
done

# Unprivileged: the packages need no root to build (Rules-Requires-Root:
# no), so under root (CI) the build and lintian run as nobody.  Root's
# TMPDIR may be private to root (TMPDIR=/tmp/x make deb), so then the work
# directory is made in /tmp, and nobody gets a TMPDIR of its own in it
# (dpkg-deb and lintian write their temporary files there).
as_builder=()
if [ "$(id -u)" = 0 ] && id nobody >/dev/null 2>&1; then
    tmp=$(mktemp -d -p /tmp)
    trap 'rm -rf "$tmp"' EXIT
    mkdir "$tmp/tmp"
    chown nobody: "$tmp" "$tmp/tmp"
    as_builder=(runuser -u nobody -- env TMPDIR="$tmp/tmp")
else
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
fi
commit=$(git -C "$SRC" rev-parse --verify "$ref^{commit}")
if [ -n "$(git -C "$SRC" status --porcelain --untracked-files=no)" ] && [ "$ref" = HEAD ]; then
    echo "deb: note: uncommitted changes are not in the packages (they are built from $commit)"
fi
# dpkg-buildpackage writes the packages next to the source directory.
mkdir "$tmp/pglock"
git -C "$SRC" archive --format=tar "$commit" | tar -x -C "$tmp/pglock"
[ ${#as_builder[@]} -eq 0 ] || chown -R nobody: "$tmp/pglock"

# No stale package in OUT, whatever happens below.
rm -f "$out"/*.deb "$out"/*.changes "$out"/*.buildinfo
start=$SECONDS
echo "deb: building the packages of $commit${as_builder[*]:+ (as nobody)}"
if ! (cd "$tmp/pglock" && "${as_builder[@]}" dpkg-buildpackage -us -uc -b -j"$(nproc)") \
    >"$out/build.log" 2>&1; then
    tail -40 "$out/build.log"
    echo "deb: error: dpkg-buildpackage failed (the whole log: $out/build.log)" >&2
    exit 1
fi
echo "deb: built in $((SECONDS - start)) s"

# lintian on the .changes (the .debs and the .buildinfo), before they go
# to OUT (which nobody may not be able to read).  Info tags are shown, not
# failed on.
changes=("$tmp"/*.changes)
if ! (cd "$tmp" && "${as_builder[@]}" lintian --fail-on error,warning --display-info "${changes[0]}"); then
    echo "deb: error: lintian reported an error or a warning (above); the packages stay out of $out" >&2
    exit 1
fi
echo "deb: lintian: no error, no warning"

for f in "$tmp"/*.deb "$tmp"/*.changes "$tmp"/*.buildinfo; do
    [ ${#as_builder[@]} -eq 0 ] || chown 0:0 "$f"
    mv "$f" "$out/"
done
echo "deb: the packages, in $out:"
(cd "$out" && ls -1 ./*.deb)
