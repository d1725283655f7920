#!/usr/bin/env python3
"""tests/lint_layers.py [--source DIR] BUILD: the command line uses the
library only through pglock.h, and src/common/ for what both share.
`make lint` runs it after a build.

Two rules, each finding one line:
- no object of src/cli references (nm: undefined) a pglock__ symbol that
  an object of src/lib defines: an internal of the library's is a back
  door (what both sides need is a compiled module of src/common/);
- no file of src/cli includes a header of src/lib/ (by its name, or by a
  path that leads there).
The objects are the build's own, BUILD/CMakeFiles/*.dir/src/**.o, whose
source is still in the tree (DIR, by default this script's ../), read as
tests/lint_cycles.py reads them.  Exit status 1 with findings, 0 with
none, 2 when the check could not run (no objects of src/cli or src/lib).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lint_cycles import build_args, objects, symbols  # noqa: E402

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def back_doors(objs):
    """[(cli source, symbol, lib source)] for each pglock__ back door."""
    owner = {}
    for src, obj in objs.items():
        if src.startswith("src/lib/"):
            for name in symbols(obj)[0]:
                owner.setdefault(name, src)
    found = []
    for src, obj in sorted(objs.items()):
        if src.startswith("src/cli/"):
            for name in sorted(symbols(obj)[1]):
                if name.startswith("pglock__") and name in owner:
                    found.append((src, name, owner[name]))
    return found


def lib_includes(source):
    """[(cli file, included name)] for each include of a src/lib header."""
    lib = os.path.join(source, "src", "lib")
    headers = {f for f in os.listdir(lib) if f.endswith(".h")} if os.path.isdir(lib) else set()
    found = []
    for top, _, files in sorted(os.walk(os.path.join(source, "src", "cli"))):
        for f in sorted(files):
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(top, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            for name in INCLUDE.findall(text):
                target = os.path.normpath(os.path.join(top, name))
                if (os.path.basename(name) in headers and "/" not in name) or \
                        os.path.dirname(target) == os.path.normpath(lib):
                    found.append((os.path.relpath(path, source), name))
    return found


def main(argv):
    args = build_args(argv, "lint_layers.py")
    if args is None:
        return 2
    source, build = args
    objs = objects(build, source)
    ncli = sum(1 for s in objs if s.startswith("src/cli/"))
    nlib = sum(1 for s in objs if s.startswith("src/lib/"))
    if not ncli or not nlib:
        print(f"lint_layers: error: no object files of src/cli and src/lib under {build}",
              file=sys.stderr)
        return 2
    bad = 0
    for src, name, lib in back_doors(objs):
        print(f"lint_layers: {src} uses {name}, an internal of {lib}: "
              "use pglock.h, or move what both need to src/common/")
        bad += 1
    for src, name in lib_includes(source):
        print(f"lint_layers: {src} includes \"{name}\", a header of src/lib/")
        bad += 1
    if bad:
        print(f"lint_layers: {bad} finding(s)")
        return 1
    print(f"lint_layers: {ncli} objects of src/cli use no internal of src/lib's {nlib}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
