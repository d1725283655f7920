#!/usr/bin/env python3
"""tests/lint_copies.py DIR...: no run of six or more lines is repeated
to the letter in the C files (*.c, *.h) under DIR.  `make lint` runs it
over src/.

Lines are compared with their whitespace collapsed.  Lines that carry no
logic of their own take no part: blank lines, lines of braces, brackets,
parentheses and semicolons alone (`}`, `};`, `})`, `{`), preprocessor
`#include` lines, and comments (`//` lines, and `/* ... */` however many
lines it spans).  Six counted lines in a row, the same in two places (in
one file or in two), are a copy; a longer copy is reported once, whole.
Exit status 1 on a copy, 0 on none, 2 on a usage error.
"""
import os
import re
import sys

RUN = 6
NOISE = re.compile(r"^[{}()\[\];,]*$")


def counted_lines(path):
    """[(line number, normalised text)] of the lines that count."""
    out = []
    in_comment = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, raw in enumerate(f, 1):
            text = raw.strip()
            if in_comment:
                if "*/" not in text:
                    continue
                in_comment = False
                text = text.split("*/", 1)[1].strip()
            # a comment opened on this line and not closed on it
            while "/*" in text:
                before, after = text.split("/*", 1)
                if "*/" in after:
                    text = (before + " " + after.split("*/", 1)[1]).strip()
                else:
                    text = before.strip()
                    in_comment = True
                    break
            if text.startswith("//") or text.startswith("#include"):
                continue
            text = " ".join(text.split())
            if not text or NOISE.match(text.replace(" ", "")):
                continue
            out.append((number, text))
    return out


def sources(dirs):
    for top in dirs:
        for root, _, names in os.walk(top):
            for name in sorted(names):
                if name.endswith((".c", ".h")):
                    yield os.path.join(root, name)


def copies(files):
    """[(length, [(path, first line, last line), ...])]: each maximal copy."""
    lines = {path: counted_lines(path) for path in files}
    windows = {}
    for path, ls in lines.items():
        for i in range(len(ls) - RUN + 1):
            key = tuple(t for _, t in ls[i:i + RUN])
            windows.setdefault(key, []).append((path, i))
    found = {}
    for places in windows.values():
        if len(places) < 2:
            continue
        # grow each pair of places as far as the lines stay the same, and
        # keep the run once, from where it starts
        for a in range(len(places)):
            for b in range(a + 1, len(places)):
                (pa, ia), (pb, ib) = places[a], places[b]
                la, lb = lines[pa], lines[pb]
                if ia > 0 and ib > 0 and la[ia - 1][1] == lb[ib - 1][1] and \
                        not (pa == pb and ia - 1 == ib):
                    continue  # not where this run starts
                n = RUN
                while ia + n < len(la) and ib + n < len(lb) and \
                        la[ia + n][1] == lb[ib + n][1] and \
                        not (pa == pb and ia + n == ib):
                    n += 1
                spots = tuple(sorted([(pa, la[ia][0], la[ia + n - 1][0]),
                                      (pb, lb[ib][0], lb[ib + n - 1][0])]))
                found[spots] = n
    return sorted(((n, list(spots)) for spots, n in found.items()),
                  key=lambda c: c[1])


def main(argv):
    dirs = argv[1:]
    if not dirs or any(d.startswith("-") for d in dirs):
        print("usage: tests/lint_copies.py DIR...", file=sys.stderr)
        return 2
    files = sorted(set(sources(dirs)))
    found = copies(files)
    for n, spots in found:
        where = " and ".join(f"{p}:{a}-{b}" for p, a, b in spots)
        print(f"lint_copies: {n} lines repeated to the letter: {where}")
    if found:
        print(f"lint_copies: {len(found)} copies in {len(files)} files: "
              "make one function serve both")
        return 1
    print(f"lint_copies: {len(files)} C files, no run of {RUN} lines repeated")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
