#!/usr/bin/env python3
"""tests/lint_functions.py DIR...: no function of the C files (*.c) under
DIR is longer than 100 lines.  `make lint` runs it over src/.

The files are laid out by .clang-format (tests/lint_format.sh), so a
function's body opens with a "{" alone at the start of a line and
closes with the first "}" at the start of a line after it.  Its length
counts every line from the first of its declarator (the lines above the
"{" up to a blank line, a comment, a preprocessor line, a brace or the
end of a declaration) to that "}", both included.  Each function over the limit
is one finding, with its file, line and length.  Exit status 1 with
findings, 0 with none, 2 on a usage error.
"""
import os
import sys

LIMIT = 100


def declarator_start(lines, brace):
    """The index of the first line of the declarator above lines[brace]."""
    start = brace
    while start > 0:
        above = lines[start - 1]
        if (not above.strip() or above[0] in "#}" or
                above.startswith(("/*", "//")) or
                above.rstrip().endswith((";", "*/", "{", "}"))):
            break
        start -= 1
    return start


def long_functions(path):
    """[(line, length, first line)] of each function over LIMIT."""
    with open(path, encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    found = []
    start = None
    for i, line in enumerate(lines):
        if line.rstrip() == "{":
            start = declarator_start(lines, i)
        elif line.startswith("}") and start is not None:
            length = i - start + 1
            if length > LIMIT:
                found.append((start + 1, length, lines[start].strip()))
            start = None
    return found


def main(argv):
    if not argv or any(a.startswith("-") for a in argv):
        print("usage: lint_functions.py DIR...", file=sys.stderr)
        return 2
    bad = files = 0
    for root in argv:
        for top, dirs, names in os.walk(root):
            dirs.sort()
            for name in sorted(names):
                if not name.endswith(".c"):
                    continue
                files += 1
                path = os.path.join(top, name)
                for line, length, first in long_functions(path):
                    print(f"lint_functions: {path}:{line}: {length} lines, over "
                          f"{LIMIT}: {first}")
                    bad += 1
    if bad:
        print(f"lint_functions: {bad} function(s) over {LIMIT} lines")
        return 1
    print(f"lint_functions: no function over {LIMIT} lines in {files} files")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
