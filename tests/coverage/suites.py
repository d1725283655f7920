"""tests/coverage/suites.py BUILD COUNTS — from the gcov counts that
tests/coverage/run.sh collected (COUNTS/SUITE/<BUILD's path>/...gcda), the
lines of src/ each suite ran, and the CLI suites the ASan+UBSan pass can
leave out: taken greedily, most expensive first, as long as every line
that any CLI suite runs is still run by a C test or a kept CLI suite."""
import glob
import json
import os
import shutil
import subprocess
import sys

# Not in the ASan pass whatever they run: our tooling and packaging.
TOOLING = {"harness.bats", "library_install.bats", "examples.bats", "examples_docs.bats"}
OBJECT_DIRS = ("pglock_exe.dir", "pglock_objects.dir", "pglock_cli.dir")


def lines_run(build, root):
    """Every src/FILE:LINE that ran at least once under ROOT."""
    ran = set()
    for gcda in glob.glob(root + "/**/*.gcda", recursive=True):
        if not any(d in gcda for d in OBJECT_DIRS):
            continue
        rel = os.path.relpath(gcda, root)
        shutil.copy(os.path.join(build, rel[:-5] + ".gcno"), gcda[:-5] + ".gcno")
        out = subprocess.run(["gcov", "--json-format", "--stdout",
                              os.path.basename(gcda)], cwd=os.path.dirname(gcda),
                             capture_output=True, text=True, check=True).stdout
        for doc in filter(None, (l.strip() for l in out.splitlines())):
            for f in json.loads(doc)["files"]:
                name = f["file"]
                if "src/" not in name:
                    continue
                name = name[name.index("src/"):]
                ran.update(f"{name}:{l['line_number']}"
                           for l in f["lines"] if l["count"] > 0)
    return ran


def suite_cpu(build):
    """Each suite's CPU seconds in the last run (its line in the log)."""
    cpu = {}
    with open(os.path.join(build, "coverage-run.log")) as log:
        for line in log:
            words = line.split()
            if len(words) > 3 and words[-1] == "CPU" and words[0] in ("ok", "FAIL"):
                cpu[words[2]] = float(words[-2].rstrip("s"))
    return cpu


def main():
    build, counts = os.path.abspath(sys.argv[1]), sys.argv[2]
    ran = {s: lines_run(build, os.path.join(counts, s) + build)
           for s in sorted(os.listdir(counts))}
    base = ran.pop("ctests", set())
    cli = {s: v for s, v in ran.items() if s not in TOOLING}
    every = set().union(base, *cli.values())
    cpu = suite_cpu(build)
    print(f"lines of src/ run: {len(every)}; by the C tests: {len(base)}")
    kept = set(cli)
    for s in sorted(cli, key=lambda s: -cpu.get(s, 0)):
        rest = set().union(base, *(cli[t] for t in kept if t != s))
        if rest >= every:
            kept.discard(s)
            print(f"leave out of ASan: {s} ({cpu.get(s, 0):.1f} s CPU)")
    for s in sorted(kept):
        others = set().union(base, *(cli[t] for t in kept if t != s))
        print(f"keep: {s}: {len(cli[s] - others)} lines no other runs")


main()
