#!/usr/bin/python3
"""Which level should the tracking probes give? Replay error under each basis.

validate --in-situ track and interleave time 1-sequence decode steps on the
served decoder during the run and scale each iteration's predicted cost by
the level they measured around its start (calib/in_situ_refresh.h). Each
probe's level is its time over what the refreshed profile predicts for it
(in its placement), smoothed with its neighbours; report.json keeps them all
(in_situ.tracked.probes). This script takes a point's replay predictions
back to the refresh alone (dividing out the level it was given) and prints
the iteration MAPE and bias (all predicted time / all measured - 1) with
each basis:

  none        the refresh's prediction, no tracking (--in-situ refresh);
  as measured the smoothed level itself (interleave's basis);
  run median  the smoothed level over its median through the run (track's).

Usage: experiments/validation_cpu/level_basis.py POINT_DIR [POINT_DIR ...]
(a point: a validate --out folder with report_replay.json, iterations.csv
and measured/iterations.csv)
"""
import argparse
import bisect
import csv
import json
import os
import statistics


def level_at(times, levels, t):
    """Linear between the probes around t, the nearest one's outside (calib/in_situ_refresh.cpp: level_at)."""
    if not times:
        return 1.0
    if t <= times[0]:
        return levels[0]
    if t >= times[-1]:
        return levels[-1]
    hi = bisect.bisect_right(times, t)
    lo = hi - 1
    w = (t - times[lo]) / (times[hi] - times[lo])
    return levels[lo] + w * (levels[hi] - levels[lo])


def errors(pairs):
    ratios = [p / m - 1 for p, m in pairs]
    total = sum(p for p, _ in pairs) / sum(m for _, m in pairs) - 1
    return statistics.mean(abs(r) for r in ratios), total


def point_rows(point):
    with open(os.path.join(point, "report_replay.json")) as f:
        report = json.load(f)
    tracked = report.get("in_situ", {}).get("tracked")
    if not tracked or not tracked["probes"]:
        raise SystemExit(f"{point}: no tracking probes in report_replay.json (validate --in-situ track|interleave)")
    probes = tracked["probes"]
    times = [p["time_s"] for p in probes]
    given = [p["level"] for p in probes]
    smoothed = [p["smoothed"] for p in probes]
    with open(os.path.join(point, "measured", "iterations.csv")) as f:
        starts = [float(r["start_s"]) for r in csv.DictReader(f)]
    with open(os.path.join(point, "iterations.csv")) as f:
        rows = [(float(r["predicted_s"]), float(r["measured_s"])) for r in csv.DictReader(f)]
    base = [(p / level_at(times, given, t), m) for (p, m), t in zip(rows, starts)]
    median = statistics.median(smoothed)
    bases = {
        "none": base,
        "as measured": [(p * level_at(times, smoothed, t), m) for (p, m), t in zip(base, starts)],
        "run median": [(p * level_at(times, smoothed, t) / median, m) for (p, m), t in zip(base, starts)],
    }
    return {name: errors(pairs) for name, pairs in bases.items()}, probes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("points", nargs="+")
    a = ap.parse_args()
    names = ["none", "as measured", "run median"]
    print("| point | probes | probes' batch sizes | " + " | ".join(f"{n}: MAPE (bias)" for n in names) + " |")
    print("| --- | ---: | --- |" + " ---: |" * len(names))
    for point in a.points:
        result, probes = point_rows(point)
        sizes = sorted({p.get("sequences", 1) for p in probes})
        cells = " | ".join(f"{result[n][0]:.1%} ({result[n][1]:+.1%})" for n in names)
        print(f"| {os.path.basename(os.path.normpath(point))} | {len(probes)} | {', '.join(map(str, sizes))} | {cells} |")


if __name__ == "__main__":
    main()
