#!/usr/bin/python3
"""Reduces servesim_allocation_watch's rows (allocation_watch.cpp, tools/) to
each copy's median ratio to copy 0, over the rounds in which every copy saw
the same placement.

Usage: experiments/diagnostics/placement/allocation.py ROWS.csv
"""
import csv
import statistics
import sys
from collections import defaultdict


def main(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    rounds = defaultdict(dict)
    for r in rows:
        rounds[int(r["round"])][int(r["copy"])] = (float(r["decode_step_s"]), r["placement"])
    copies = max(int(r["copy"]) for r in rows) + 1
    ratios = defaultdict(list)
    for probes in rounds.values():
        places = {p for _, p in probes.values()}
        if len(probes) != copies or len(places) != 1:
            continue
        (place,) = places
        for c in range(1, copies):
            ratios[(place, c)].append(probes[c][0] / probes[0][0])
    print("| placement | copy | rounds | decode step / copy 0's (median) | share of rounds slower |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for (place, c), v in sorted(ratios.items()):
        slower = sum(x > 1 for x in v) / len(v)
        print(f"| {place} | {c} | {len(v)} | {statistics.median(v):.3f} | {slower:.0%} |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
