#!/usr/bin/env python3
"""targets.py REPORT: the report's last section, a table that says for each
goal whether this run met it (the goals of docs/performance.md), read
from the tables the report already holds, so that every run shows the
truth and nobody has to pick one.

Each ratio is judged beside the same run's A/A control (raw libpq, or the
floor, against itself): what the machine alone moves a ratio by.
"""
import re
import sys

SPREAD = re.compile(r'([0-9.]+) \(([0-9.]+)[–-]([0-9.]+)\)')


def cells(line):
    return [c.strip() for c in line.strip().strip('|').split('|')]


def sections(lines):
    """{heading: [lines]} for '## ' and '### ' headings and the 'X:' lines
    that name bench_ops's tables ('Unix socket: ...', 'TCP loopback: ...')."""
    out, name = {}, ''
    for line in lines:
        if line.startswith('## ') or line.startswith('### '):
            name = line.lstrip('#').strip()
        elif re.match(r'^(Unix socket|TCP loopback): ', line):
            name = name.split(' / ')[0] + ' / ' + line.split(':')[0]
        out.setdefault(name, []).append(line)
    return out


def spread(text):
    """(median, min, max) of 'M (A–B)', or of a lone 'M' (one repetition),
    or None."""
    m = SPREAD.search(text)
    if m:
        return tuple(float(g) for g in m.groups())
    m = re.match(r'\s*([0-9.]+)\b', text)
    return (float(m.group(1)),) * 3 if m else None


def find(secs, prefix, suffix=''):
    return next((v for k, v in secs.items()
                 if k.startswith(prefix) and k.endswith(suffix)), [])


def rows(lines):
    return [cells(l) for l in lines if l.startswith('| ') and '---' not in l]


def main(path):
    lines = open(path, encoding='utf-8').read().splitlines()
    secs = sections(lines)
    goals = []  # (goal, figure, control, met)

    def goal(name, figure, control, met):
        goals.append((name, figure, control,
                      'n/a' if met is None else 'met' if met else '**missed**'))

    # §1: lock + unlock against raw libpq's (at most 1.03x: the library
    # adds no round trip and next to no work to the raw statement).
    for where in ('Unix socket', 'TCP loopback'):
        for r in rows(find(secs, '1–2. One client', ' / ' + where)):
            if r[0] == 'pglock_lock (wait) + pglock_unlock':
                s = spread(r[3])
                goal('§1 lock + unlock ≤ 1.03× raw libpq (%s)' % where,
                     '%.3f× (%.3f–%.3f)' % s if s else r[3], '–',
                     s[0] <= 1.03 if s else None)

    # §3 and §4: throughput against raw libpq (medians at least 0.97x, no
    # repetition below 0.90x); under contention (§3)
    # also no lower than the A/A control's worst repetition, what the
    # machine alone does to raw libpq.
    for title, prefix, ncol, aa_bound in (
            ('§3 one key', 'pglock against raw libpq alone', 2, True),
            ('§4 distinct keys', '4. No contention', 1, False)):
        table = rows(find(secs, prefix))
        for r in table:
            if len(r) <= ncol or r[ncol] != 'pglock':
                continue
            aa = next((x for x in table if x[0] == r[0] and
                       x[ncol].endswith('(A/A control)')), None)
            s, c = spread(r[-1]), spread(aa[-1]) if aa else None
            met = None
            if s:
                met = s[0] >= 0.97 and s[1] >= 0.90
                if aa_bound:
                    met = met and c is not None and s[0] >= c[1]
            goal('%s, %s processes: median ≥ 0.97× raw, no repetition < 0.90×%s'
                 % (title, r[0], ', median ≥ the A/A control\'s lowest' if aa_bound else ''),
                 '%.2f× (%.2f–%.2f)' % s if s else r[-1],
                 '%.2f× (%.2f–%.2f)' % c if c else '–', met)

    # §5: run --try against the minimal libpq program (at most 1.15x: the
    # command adds its fork and the lease's settings, no round trip more).
    for r in rows(find(secs, '5. The command line')):
        for label, where in (('pglock run --try K -- true ÷', 'Unix socket'),
                             ('pglock run --try K -- true over TCP loopback ÷',
                              'TCP loopback')):
            if r[0].startswith(label):
                m = re.match(r'([0-9.]+) ×', r[-1])
                v = float(m.group(1)) if m else None
                goal('§5 `pglock run --try K -- true` ≤ 1.15× the floor, %s '
                     '(interleaved pairs)' % where,
                     r[-1], '–', v <= 1.15 if v is not None else None)

    # §7: a heartbeat costs what the floor does, within the floor's own A/A
    # spread: a holder costs the server no more than an idle ping.
    table = rows(find(secs, '7. Server cost per holder'))
    for r in table:
        if len(r) < 4 or not r[1].startswith('pglock heartbeat,'):
            continue
        aa = next((x for x in table if x[0] == r[0] and x[1].endswith('(A/A control)')), None)
        s, c = spread(r[3]), spread(aa[3]) if aa else None
        goal('§7 %s, %s other locks: median × floor within the A/A control\'s spread'
             % (r[1].replace('pglock heartbeat, ', 'heartbeat in '), r[0]),
             '%.2f× (%.2f–%.2f)' % s if s else r[3],
             '%.2f× (%.2f–%.2f)' % c if c else '–',
             s[0] <= max(1.0, c[2]) if s and c else None)

    print('## Targets')
    print()
    print('Each goal, judged on this run alone: median (min–max) over its repetitions, beside the')
    print('A/A control of the same run where there is one.')
    print()
    print('| goal | this run | A/A control | |')
    print('|---|---:|---:|---|')
    for g in goals:
        print('| %s | %s | %s | %s |' % g)
    met = sum(1 for g in goals if g[3] == 'met')
    missed = sum(1 for g in goals if g[3] == '**missed**')
    print()
    print('%d of %d goals met, %d missed%s.' % (
        met, len(goals), missed,
        '' if met + missed == len(goals) else
        ', %d not judged (a figure was not found)' % (len(goals) - met - missed)))


if __name__ == '__main__':
    main(sys.argv[1])
