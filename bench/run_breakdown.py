#!/usr/bin/env python3
"""run_breakdown.py RUNS PGLOCK CONNINFO KEY — where `pglock run --try KEY --
true` spends its time, from `strace -f -ttt` of RUNS runs (medians).

Phases are cut at system calls: exec, connect(), each answer from the
server (recvfrom), the fork of the watchdog, the exec of the command, the
command's exit, pglock's exit.  strace slows every system call, so the
phases are inflated (most where there are many calls: dynamic loading);
read them for proportions, and the hyperfine table for the wall time.
Prints a markdown table.
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile

runs, pglock, conninfo, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
LINE = re.compile(r"(\d+)\s+(\d+\.\d+) (.*)")
phases = {}
order = []


def add(name, ms):
    if name not in phases:
        phases[name] = []
        order.append(name)
    phases[name].append(ms)


with tempfile.TemporaryDirectory() as tmp:
    for i in range(runs):
        out = os.path.join(tmp, "trace")
        subprocess.run(["strace", "-f", "-ttt", "-o", out,
                        "-e", "trace=execve,connect,sendto,recvfrom,clone,clone3,exit_group",
                        pglock, "run", "-d", conninfo, "--try", key, "--", "true"],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ev = []
        for line in open(out):
            m = LINE.match(line)
            if m:
                ev.append((int(m.group(1)), float(m.group(2)) * 1000, m.group(3)))
        main = ev[0][0]
        t0, end = ev[0][1], ev[-1][1]
        conn = next(t for p, t, s in ev if p == main and s.startswith("connect("))
        answers = [t for p, t, s in ev
                   if p == main and s.startswith("recvfrom(") and "EAGAIN" not in s]
        sends = [t for p, t, s in ev if p == main and s.startswith("sendto(")]
        fork = next(t for p, t, s in ev if p == main and s.startswith("clone"))
        exec_true = [t for p, t, s in ev
                     if p != main and s.startswith("execve(") and s.endswith("= 0")]
        if not exec_true:  # "<unfinished ...>" then "resumed": take the start
            exec_true = [t for p, t, s in ev if p != main and "execve(\"/usr/bin/true\"" in s]
        job_exit = min(t for p, t, s in ev if p != main and s.startswith("exit_group"))
        after = [t for t in sends if t > job_exit]
        add("exec, dynamic loading (libpq and its 24 libraries), option parsing", conn - t0)
        add("connect, backend start, authentication", answers[0] - conn)
        add("session setup: pooler/standby checks, lease settings (1 round trip)",
            answers[1] - answers[0])
        add("the try-lock (1 round trip)", answers[2] - answers[1])
        add("start the watchdog, which starts the command", exec_true[0] - answers[2])
        add("the command (`true`) runs", job_exit - exec_true[0])
        add("command gone to the release sent", after[0] - job_exit)
        add("the release (its answer the last ownership check), exit", end - after[0])
        add("total (under strace)", end - t0)

print("strace -f, %d runs, median ms per phase (strace inflates every system call):\n" % runs)
print("| phase of `pglock run --try K -- true` | median ms |")
print("|---|---:|")
for name in order:
    print("| %s | %.2f |" % (name, statistics.median(phases[name])))
print()
