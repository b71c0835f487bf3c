#!/usr/bin/python3
"""How closely must `--host-drift interleave` time the device to follow its level?

For each validate output folder of an interleave run, recomputes the
iteration MAPE as if only every K-th of its timings between served
iterations had been taken (K = 1 is the run as it was: an interval of
--interleave-interval; K = 5 after a 0.1 s run is a 0.5 s one), each
timing's level smoothed as validate smooths it (the median of it and its
neighbours, SMOOTH timings wide) and interpolated in time between timings
(in_situ_refresh.cpp, with the host-drift code: track_levels, level_at).
The predictions of iterations.csv carry the run's own levels; they are
divided out first. A
within-run comparison: the same iterations and the same timings, fewer of
them.

Usage: experiments/diagnostics/probe_interval.py [--every 1,2,5] [--smooth 3] POINT_DIR [...]
"""
import argparse
import csv
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import drift_gate  # noqa: E402  (experiments/drift_gate.py)


def tracked_of(report):
    """A report's timings between served iterations: host_drift.refresh.tracked
    (in_situ.tracked in reports written before --host-drift); None without."""
    return drift_gate.host_drift(report, "refresh").get("tracked")


def levels_at(times, probes, every, smooth):
    """The level at each time from every `every`-th probe (time, measured/predicted)."""
    kept = probes[::every]
    half = smooth // 2
    ratios = [r for _, r in kept]
    smoothed = [statistics.median(ratios[max(0, i - half):i + half + 1]) for i in range(len(kept))]
    ts = [t for t, _ in kept]
    out = []
    for t in times:
        if t <= ts[0]:
            out.append(smoothed[0])
        elif t >= ts[-1]:
            out.append(smoothed[-1])
        else:
            hi = next(i for i, x in enumerate(ts) if x > t)
            w = (t - ts[hi - 1]) / (ts[hi] - ts[hi - 1])
            out.append(smoothed[hi - 1] + w * (smoothed[hi] - smoothed[hi - 1]))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--every", default="1,2,5", help="keep every K-th timing, for each K listed")
    ap.add_argument("--smooth", type=int, default=3, help="timings in each level's median (odd; validate: 3)")
    ap.add_argument("points", nargs="+")
    a = ap.parse_args()
    every = [int(k) for k in a.every.split(",")]
    print("| point | timings | " + " | ".join(f"MAPE, every {k}" for k in every) + " |")
    print("| --- | ---: | " + " | ".join("---:" for _ in every) + " |")
    for point in a.points:
        with open(os.path.join(point, "report_replay.json")) as f:
            tracked = tracked_of(json.load(f))
        if not tracked or tracked.get("basis") != "refresh":
            print(f"| {os.path.basename(os.path.normpath(point))} | not an interleave run | |")
            continue
        probes = sorted((p["time_s"], p["measured_over_predicted"]) for p in tracked["probes"])
        with open(os.path.join(point, "iterations.csv")) as f:
            its = list(csv.DictReader(f))
        with open(os.path.join(point, "measured", "iterations.csv")) as f:
            starts = [float(r["start_s"]) for r in csv.DictReader(f)]
        run_levels = levels_at(starts, probes, 1, 3)  # what validate applied
        base = [float(r["predicted_s"]) / lv for r, lv in zip(its, run_levels)]
        measured = [float(r["measured_s"]) for r in its]
        cells = []
        for k in every:
            lv = levels_at(starts, probes, k, a.smooth)
            cells.append(f"{statistics.mean(abs(b * l / m - 1) for b, l, m in zip(base, lv, measured)):.1%}")
        print(f"| {os.path.basename(os.path.normpath(point))} | {len(probes)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
