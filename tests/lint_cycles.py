#!/usr/bin/env python3
"""tests/lint_cycles.py [--source DIR] BUILD: no two files of src/
depend on each other in a circle.  `make lint` runs it after a build.

A file depends on another when its object file uses a symbol (nm's
undefined symbols) that the other's object defines.  The objects are those
of the build's own targets, BUILD/CMakeFiles/*.dir/src/**.o (the library,
the CLI and main.c), whose source is still in the tree (DIR, by default
this script's ../: an object left behind by a file since moved or removed
does not count); the tests' and fuzzers' objects are left out.  The file
graph's strongly connected components are its circles: each is printed
file by file, with the symbol that links each to the next, and the exit
status is 1.  0: no circle; 2: the check could not run.
"""
import glob
import os
import subprocess
import sys


def objects(build, source):
    """{source path (src/...): object path}, one object per source."""
    found = {}
    # The source's path is the object's below its target's directory, never
    # a split at "/src/": the checkout itself may live under a folder named
    # src (~/src/pglock), and so may the build.
    for target in sorted(glob.glob(os.path.join(glob.escape(build), "CMakeFiles", "*.dir"))):
        pattern = os.path.join(glob.escape(target), "src", "**", "*.o")
        for obj in sorted(glob.glob(pattern, recursive=True)):
            rel = os.path.relpath(obj, target).replace(os.sep, "/")
            src = rel[:-len(".o")]
            if os.path.isfile(os.path.join(source, src)):
                found.setdefault(src, obj)
    return found


def build_args(argv, name):
    """(source, build) from "[--source DIR] BUILD", or None after the usage
    line: the arguments of the checks that read the build's objects."""
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if len(argv) >= 2 and argv[0] == "--source":
        source, argv = argv[1], argv[2:]
    if len(argv) != 1:
        print(f"usage: {name} [--source DIR] BUILD", file=sys.stderr)
        return None
    return source, argv[0]


def symbols(obj):
    """(defined, undefined): the object's global symbols, from nm."""
    out = subprocess.run(["nm", "-P", obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) < 2:
            continue
        name, kind = fields[0], fields[1]
        if kind == "U":
            undefined.add(name)
        elif kind.isupper() or kind in "vw":
            defined.add(name)
    return defined, undefined


def graph(objs):
    """{file: {file it uses: a symbol it uses there}}."""
    table = {src: symbols(obj) for src, obj in objs.items()}
    owner = {}
    for src, (defined, _) in table.items():
        for name in defined:
            owner.setdefault(name, src)
    edges = {src: {} for src in table}
    for src, (_, undefined) in table.items():
        for name in sorted(undefined):
            dst = owner.get(name)
            if dst is not None and dst != src:
                edges[src].setdefault(dst, name)
    return edges


def components(edges):
    """Tarjan's strongly connected components, iteratively."""
    index, low, on_stack, stack, result = {}, {}, set(), [], []
    counter = 0
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                comp = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                result.append(sorted(comp))
    return result


def circle(edges, comp):
    """One circle through the component's first file: a shortest way back."""
    members = set(comp)
    start = comp[0]
    came = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(edges[node]):
            if nxt not in members:
                continue
            if nxt == start:
                path = [node]
                while came[path[-1]] is not None:
                    path.append(came[path[-1]])
                return list(reversed(path)) + [start]
            if nxt not in came:
                came[nxt] = node
                queue.append(nxt)
    return comp + [start]


def main(argv):
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    args = argv[1:]
    if len(args) == 3 and args[0] == "--source":
        source, args = args[1], args[2:]
    if len(args) != 1:
        print("usage: tests/lint_cycles.py [--source DIR] BUILD", file=sys.stderr)
        return 2
    objs = objects(args[0], source)
    if not objs:
        print(f"lint_cycles: error: no object files of {source}/src under {args[0]} "
              "(build first)", file=sys.stderr)
        return 2
    try:
        edges = graph(objs)
    except (OSError, subprocess.CalledProcessError) as e:
        print(f"lint_cycles: error: nm failed: {e}", file=sys.stderr)
        return 2
    cycles = [c for c in components(edges) if len(c) > 1]
    for comp in cycles:
        path = circle(edges, comp)
        steps = [path[0]] + [f"{b} ({edges[a][b]})" for a, b in zip(path, path[1:])]
        print("lint_cycles: a circle: " + " -> ".join(steps))
        if len(comp) > len(path) - 1:
            print(f"  (one of {len(comp)} files that depend on each other: {', '.join(comp)})")
    if cycles:
        print(f"lint_cycles: {len(cycles)} circle(s) among {len(objs)} files of src/; "
              "break each: move what both sides need into a file of its own")
        return 1
    print(f"lint_cycles: {len(objs)} files of src/, no circle")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
