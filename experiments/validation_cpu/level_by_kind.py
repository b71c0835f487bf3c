#!/usr/bin/python3
"""Does the tracked level carry to every kind of iteration?

For the points of `--in-situ interleave` runs given (validate output
folders), re-costs each iteration with and without the level its timings
between served iterations gave (their smoothed measured / predicted,
interpolated in time as validate does: probe_interval.py's levels_at),
and prints, per iteration kind (decode, prefill, mixed) pooled over the
points, the MAPE and the mean of predicted / measured - 1 both ways.

Folders whose predictions already leave a kind unlevelled (validate since
the commit that scales decode-only iterations only) are re-costed from
what their report says was applied: `in_situ.tracked.levelled`.

Usage: experiments/validation_cpu/level_by_kind.py POINT_DIR [POINT_DIR ...]
"""
import csv
import json
import os
import statistics
import sys

from probe_interval import levels_at

KINDS = ["decode", "prefill", "mixed"]


def main(points):
    errors = {k: {"with": [], "without": []} for k in KINDS}
    used = 0
    for point in points:
        if not all(os.path.isfile(os.path.join(point, f))
                   for f in ("report_replay.json", "iterations.csv", os.path.join("measured", "iterations.csv"))):
            continue
        with open(os.path.join(point, "report_replay.json")) as f:
            tracked = json.load(f)["in_situ"].get("tracked")
        if not tracked or tracked.get("basis") != "refresh":
            continue
        levelled = tracked.get("levelled", KINDS)  # kinds whose predictions carry the level
        used += 1
        probes = sorted((p["time_s"], p["measured_over_predicted"]) for p in tracked["probes"])
        with open(os.path.join(point, "iterations.csv")) as f:
            its = list(csv.DictReader(f))
        with open(os.path.join(point, "measured", "iterations.csv")) as f:
            starts = [float(r["start_s"]) for r in csv.DictReader(f)]
        for r, level in zip(its, levels_at(starts, probes, 1, 3)):
            kind, predicted, measured = r["kind"], float(r["predicted_s"]), float(r["measured_s"])
            bare = predicted / level if kind in levelled else predicted
            errors[kind]["with"].append(bare * level / measured - 1)
            errors[kind]["without"].append(bare / measured - 1)
    print(f"{used} interleave points")
    print("| kind | iterations | MAPE with the level | without | bias with | without |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for k in KINDS:
        w, wo = errors[k]["with"], errors[k]["without"]
        if not w:
            continue
        print(f"| {k} | {len(w)} | {statistics.mean(map(abs, w)):.2%} | {statistics.mean(map(abs, wo)):.2%} | "
              f"{statistics.mean(w):+.2%} | {statistics.mean(wo):+.2%} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
