#!/usr/bin/python3
"""Which reading of the prefill timings' level suits iterations with a prefill?

validate scales each prefill and mixed iteration by the prefill timings'
level at the iteration's start (linear between the timings around it, each
unsmoothed). On a VM whose compute speed moves in spells shorter than a
long prefill, the speed an iteration met is its average over its own span,
and a timing a moment before may have caught a spell the iteration mostly
missed. For the interleave points given (validate output folders with
prefill timings), this re-costs every prefill and mixed iteration with the
level read:

  start     at its start, as validate does (from each timing's
            measured / predicted, unsmoothed)
  span      averaged over its predicted span (start to start + the
            start-levelled prediction, 8 samples)
  blend     0.7 x start + 0.3 x the median over 5 timings at its start
  none      no level (the refreshed profile alone)

and prints, per kind and bin of prefill tokens, the MAPE of each, and
`slope`: the least-squares slope of log(measured / bare prediction) on
log(level at start). With a level that carried in full to that bin's
iterations the slope would be 1 less the dilution by the timings' own
noise; a smaller one says long iterations follow the level less.

Usage: experiments/diagnostics/prefill_level_moment.py POINT_DIR [POINT_DIR ...]
"""
import csv
import json
import math
import os
import statistics
import sys

from probe_interval import levels_at, tracked_of

BINS = [(0, 200), (200, 320), (320, 100000)]
SPAN_SAMPLES = 8
VARIANTS = ["start", "span", "blend", "none"]


def iterations_with_levels(point):
    """Each prefill or mixed iteration of one point: (kind, prefill tokens,
    measured s, bare predicted s, {variant: level}); [] for a point
    without prefill timings."""
    try:
        with open(os.path.join(point, "report_replay.json")) as f:
            tracked = tracked_of(json.load(f)) or {}
        with open(os.path.join(point, "iterations.csv")) as f:
            its = list(csv.DictReader(f))
        with open(os.path.join(point, "measured", "iterations.csv")) as f:
            starts = [float(r["start_s"]) for r in csv.DictReader(f)]
    except FileNotFoundError:
        return []
    timings = sorted(tracked.get("prefill_probes", []), key=lambda p: p["time_s"])
    if tracked.get("basis") != "refresh" or not timings:
        return []
    applied = levels_at(starts, [(p["time_s"], p["level"]) for p in timings], 1, 1)
    raw = [(p["time_s"], p["measured_over_predicted"]) for p in timings]
    at_start = levels_at(starts, raw, 1, 1)
    median5 = levels_at(starts, raw, 1, 5)
    out = []
    for r, start, applied_level, level, smooth in zip(its, starts, applied, at_start, median5):
        if r["kind"] == "decode":
            continue
        bare = float(r["predicted_s"]) / applied_level  # the run's prediction without its level
        span = bare * level
        over_span = statistics.mean(levels_at([start + span * (k + 0.5) / SPAN_SAMPLES for k in range(SPAN_SAMPLES)],
                                              raw, 1, 1))
        out.append((r["kind"], int(r["prefill_tokens"]), float(r["measured_s"]), bare,
                    {"start": level, "span": over_span, "blend": 0.7 * level + 0.3 * smooth, "none": 1.0}))
    return out


def slope(records):
    """Least-squares slope of log(measured / bare) on log(level at start)."""
    xs = [math.log(lv["start"]) for _, _, _, _, lv in records]
    ys = [math.log(m / b) for _, _, m, b, _ in records]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx > 0 else float("nan")


def table(records):
    """Rows (kind, bin, n, {variant: MAPE}, slope) per kind and prefill-token bin, then all tokens."""
    rows = []
    for kind in ("prefill", "mixed"):
        for lo, hi in BINS + [(0, BINS[-1][1])]:
            sel = [r for r in records if r[0] == kind and lo <= r[1] < hi]
            if not sel:
                continue
            mape = {v: statistics.mean(abs(b * lv[v] / m - 1) for _, _, m, b, lv in sel) for v in VARIANTS}
            rows.append((kind, (lo, hi), len(sel), mape, slope(sel)))
    return rows


def main(points):
    records = [r for p in points for r in iterations_with_levels(p)]
    if not records:
        sys.exit("no prefill or mixed iterations with prefill timings in the folders given")
    print("| kind | prefill tokens | iterations | MAPE, level at start | over its span | blend | none | slope |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for kind, (lo, hi), n, mape, s in table(records):
        tokens = "all" if (lo, hi) == (0, BINS[-1][1]) else (f"{lo}+" if hi == BINS[-1][1] else f"{lo}-{hi - 1}")
        print(f"| {kind} | {tokens} | {n} | " + " | ".join(f"{mape[v]:.2%}" for v in VARIANTS) + f" | {s:.2f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0 if len(sys.argv) > 1 else 2)
    main(sys.argv[1:])
