#!/usr/bin/env python3
"""cli_table.py JSON NAMES — hyperfine's --export-json as a markdown table:
median, min–max, and each command's ratio (medians) to the libpq floor."""
import json
import statistics
import sys

runs = json.load(open(sys.argv[1]))["results"]
names = open(sys.argv[2]).read().splitlines()
floor = None
for name, r in zip(names, runs):
    if name.startswith("minimal libpq: connect, try-lock, run true"):
        floor = statistics.median(r["times"])
print("hyperfine, no shell (-N); %d runs each; wall time in ms.\n" % len(runs[0]["times"]))
print("| command | median ms | min–max ms | ratio (medians) to the libpq floor |")
print("|---|---:|---:|---:|")
for name, r in zip(names, runs):
    t = r["times"]
    med = statistics.median(t)
    ratio = "%.2f ×" % (med / floor) if floor else "–"
    print("| %s | %.2f | %.2f–%.2f | %s |" % (name, med * 1e3, min(t) * 1e3, max(t) * 1e3, ratio))
print()
