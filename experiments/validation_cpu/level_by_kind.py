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

Folders with prefill timings (`in_situ.tracked.prefill_probes`, validate
--interleave-prefill-interval) add a third column for prefill and mixed
iterations: each scaled by the prefill timings' level instead (smoothed
over 5, as validate does).

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
    errors = {k: {"with": [], "without": [], "prefill level": []} for k in KINDS}
    used = 0
    for point in points:
        if not all(os.path.isfile(os.path.join(point, f))
                   for f in ("report_replay.json", "iterations.csv", os.path.join("measured", "iterations.csv"))):
            continue
        with open(os.path.join(point, "report_replay.json")) as f:
            tracked = json.load(f)["in_situ"].get("tracked")
        if not tracked or tracked.get("basis") != "refresh":
            continue
        # Kinds whose predictions carry a level, and which: the decode
        # timings' ("decode", or every kind before a47a17f) or, with prefill
        # timings, the prefill timings' for prefill and mixed iterations.
        levelled = tracked.get("levelled", KINDS)
        prefill_levelled = "prefill and mixed" in levelled
        used += 1
        probes = sorted((p["time_s"], p["measured_over_predicted"]) for p in tracked["probes"])
        prefill_probes = sorted((p["time_s"], p["measured_over_predicted"])
                                for p in tracked.get("prefill_probes", []))
        with open(os.path.join(point, "iterations.csv")) as f:
            its = list(csv.DictReader(f))
        with open(os.path.join(point, "measured", "iterations.csv")) as f:
            starts = [float(r["start_s"]) for r in csv.DictReader(f)]
        prefill_levels = levels_at(starts, prefill_probes, 1, 5) if prefill_probes else [None] * len(starts)
        for r, level, prefill_level in zip(its, levels_at(starts, probes, 1, 3), prefill_levels):
            kind, predicted, measured = r["kind"], float(r["predicted_s"]), float(r["measured_s"])
            if kind != "decode" and prefill_levelled:
                bare = predicted / prefill_level
            else:
                bare = predicted / level if kind in levelled else predicted
            errors[kind]["with"].append(bare * level / measured - 1)
            errors[kind]["without"].append(bare / measured - 1)
            if prefill_level is not None and kind != "decode":
                errors[kind]["prefill level"].append(bare * prefill_level / measured - 1)
    print(f"{used} interleave points")
    print("| kind | iterations | MAPE with the decode level | without | with the prefill level "
          "| bias with the decode level | without | with the prefill level |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")

    def both(e):  # MAPE and bias, or dashes
        return (f"{statistics.mean(map(abs, e)):.2%}", f"{statistics.mean(e):+.2%}") if e else ("-", "-")

    for k in KINDS:
        w, wo, pl = both(errors[k]["with"]), both(errors[k]["without"]), both(errors[k]["prefill level"])
        if not errors[k]["with"]:
            continue
        print(f"| {k} | {len(errors[k]['with'])} | {w[0]} | {wo[0]} | {pl[0]} | {w[1]} | {wo[1]} | {pl[1]} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
