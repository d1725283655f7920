#!/usr/bin/env python3
"""tests/lint_state.py [--source DIR] BUILD: the command line keeps no
mutable state at file scope but the few objects that cannot live
anywhere else.  `make lint` runs it after a build.

A mutable file-scope object is a data object (objdump -t: flag O) of an
object file of src/cli in a writable section: .data, .bss, their .tdata
and .tbss (thread-local) forms and their -fdata-sections splits, or a
common symbol.  A constant table is not one: it sits in .rodata, or in
.data.rel.ro when it holds pointers (written once, by the loader).  A
function's `static` counts as its file's: it outlives the call just as
much.  The objects kept, each for its reason, are in KEPT; every other
is one finding, named with its file and section.  The objects are the
build's own, BUILD/CMakeFiles/*.dir/src/**.o, whose source is still in
the tree (DIR, by default this script's ../), read as
tests/lint_cycles.py reads them.  Exit status 1 with findings, 0 with
none, 2 when the check could not run (no object of src/cli).
"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from lint_cycles import build_args, objects  # noqa: E402

# (source, symbol): why it stays at file scope.
KEPT = {
    ("src/cli/run/run_signals.c", "stop_signal"):
        "a signal handler can reach nothing else",
    ("src/cli/run/run_signals.c", "event_pipe"):
        "the self-pipe a signal handler writes to",
    ("src/cli/run/run_signals.c", "interrupt_pipe"):
        "the self-pipe a signal handler writes to",
    ("src/cli/status/cmd_status.c", "interrupted"):
        "status --watch's signal handler can reach nothing else",
    ("src/cli/core/messages.c", "cli_quiet"):
        "-q, read by every message of every command",
    ("src/cli/core/messages.c", "cli_verbosity"):
        "-v, read by every message of every command",
}

# objdump -t: VALUE FLAGS(7) SECTION\tSIZE NAME
ENTRY = re.compile(r"^[0-9a-fA-F]+ (.{7}) (\S+)\t[0-9a-fA-F]+\s+(\S+)$")
WRITABLE = re.compile(r"^(\.data|\.bss|\.tdata|\.tbss)(\..*)?$|^\*COM\*$")


def mutable_objects(obj):
    """[(section, symbol)]: the object file's mutable data objects."""
    out = subprocess.run(["objdump", "-t", obj], check=True,
                         capture_output=True, text=True).stdout
    found = []
    for line in out.splitlines():
        m = ENTRY.match(line)
        if not m or m.group(1)[6] != "O":
            continue
        section, name = m.group(2), m.group(3)
        if section.startswith(".data.rel.ro") or not WRITABLE.match(section):
            continue
        # gcc names a function's static NAME.N: the source says NAME
        found.append((section, re.sub(r"\.\d+$", "", name)))
    return found


def main(argv):
    args = build_args(argv, "lint_state.py")
    if args is None:
        return 2
    source, build = args
    objs = {s: o for s, o in objects(build, source).items()
            if s.startswith("src/cli/")}
    if not objs:
        print(f"lint_state: error: no object files of src/cli under {build}",
              file=sys.stderr)
        return 2
    bad = kept = 0
    for src, obj in sorted(objs.items()):
        for section, name in mutable_objects(obj):
            if (src, name) in KEPT:
                kept += 1
                continue
            print(f"lint_state: {src} keeps {name} at file scope ({section}): "
                  "give it an owner (a struct the caller passes), or say in "
                  "tests/lint_state.py why it cannot have one")
            bad += 1
    if bad:
        print(f"lint_state: {bad} finding(s)")
        return 1
    print(f"lint_state: {len(objs)} objects of src/cli keep {kept} mutable "
          "file-scope objects, each for its reason")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
