#!/usr/bin/python3
"""Does the tracked level carry to every kind of iteration?

For the points of `--host-drift interleave` runs given (validate output
folders), re-costs each iteration with and without the level its timings
between served iterations gave (their smoothed measured / predicted,
interpolated in time as validate does: probe_interval.py's levels_at),
and prints, per iteration kind (decode, prefill, mixed) pooled over the
points, the MAPE and the mean of predicted / measured - 1 both ways.

Folders whose predictions already leave a kind unlevelled (validate since
the commit that scales decode-only iterations only) are re-costed from
what their report says was applied: `host_drift.refresh.tracked.levelled`
(`in_situ.tracked` in reports written before --host-drift).

Folders with prefill timings (`tracked.prefill_probes`, validate
--interleave-prefill-interval) add a third column for prefill and mixed
iterations: each scaled by the prefill timings' level instead. That level
is the one the run applied (the report's `level` of each prefill timing:
until 30e73a8 the median over 2 neighbours on each side,
since then unsmoothed), or with --prefill-smooth W the median over W
timings around each (W = 1: unsmoothed; 5: the earlier rule), to compare
the two rules on the same iterations. With --prefill-every K only every
K-th prefill timing is kept (unsmoothed unless --prefill-smooth says
otherwise): the same iterations costed as if the run had timed its
prefills K times less often, a within-run test of
--interleave-prefill-interval.

Usage: experiments/diagnostics/level_by_kind.py [--prefill-smooth W] [--prefill-every K] POINT_DIR [POINT_DIR ...]
"""
import argparse
import csv
import json
import os
import statistics
import sys

from probe_interval import levels_at, tracked_of

KINDS = ["decode", "prefill", "mixed"]


def errors_by_kind(points, prefill_smooth=0, prefill_every=1):
    """Per kind, each iteration's predicted / measured - 1 with the decode
    level ("with"), without a level ("without") and, for prefill and mixed
    iterations of runs with prefill timings, with the prefill level
    ("prefill level"); and the number of interleave points used."""
    errors = {k: {"with": [], "without": [], "prefill level": []} for k in KINDS}
    used = 0
    for point in points:
        if not all(os.path.isfile(os.path.join(point, f))
                   for f in ("report_replay.json", "iterations.csv", os.path.join("measured", "iterations.csv"))):
            continue
        with open(os.path.join(point, "report_replay.json")) as f:
            tracked = tracked_of(json.load(f))
        if not tracked or tracked.get("basis") != "refresh":
            continue
        # Kinds whose predictions carry a level, and which: the decode
        # timings' ("decode", or every kind before a47a17f) or, with prefill
        # timings, the prefill timings' for prefill and mixed iterations.
        levelled = tracked.get("levelled", KINDS)
        prefill_levelled = "prefill and mixed" in levelled
        used += 1
        probes = sorted((p["time_s"], p["measured_over_predicted"]) for p in tracked["probes"])
        prefill_probes = sorted(tracked.get("prefill_probes", []), key=lambda p: p["time_s"])
        with open(os.path.join(point, "iterations.csv")) as f:
            its = list(csv.DictReader(f))
        with open(os.path.join(point, "measured", "iterations.csv")) as f:
            starts = [float(r["start_s"]) for r in csv.DictReader(f)]
        # The prefill level as the run applied it (each timing's `level`,
        # already smoothed) divides out of the predictions; the column's is
        # that one or, with --prefill-smooth or --prefill-every, re-derived
        # from the timings kept.
        applied_prefill = (levels_at(starts, [(p["time_s"], p["level"]) for p in prefill_probes], 1, 1)
                           if prefill_probes else [None] * len(starts))
        rederive = prefill_probes and (prefill_smooth or prefill_every > 1)
        prefill_levels = (levels_at(starts, [(p["time_s"], p["measured_over_predicted"]) for p in prefill_probes],
                                    prefill_every, prefill_smooth or 1) if rederive else applied_prefill)
        for r, level, applied, prefill_level in zip(its, levels_at(starts, probes, 1, 3), applied_prefill,
                                                    prefill_levels):
            kind, predicted, measured = r["kind"], float(r["predicted_s"]), float(r["measured_s"])
            if kind != "decode" and prefill_levelled:
                bare = predicted / applied
            else:
                bare = predicted / level if kind in levelled else predicted
            errors[kind]["with"].append(bare * level / measured - 1)
            errors[kind]["without"].append(bare / measured - 1)
            if prefill_level is not None and kind != "decode":
                errors[kind]["prefill level"].append(bare * prefill_level / measured - 1)
    return errors, used


def main(points, prefill_smooth, prefill_every):
    errors, used = errors_by_kind(points, prefill_smooth, prefill_every)
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
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefill-smooth", type=int, default=0,
                    help="median over W prefill timings around each (odd; 1: unsmoothed); "
                         "default 0: the level the run applied")
    ap.add_argument("--prefill-every", type=int, default=1,
                    help="keep every K-th prefill timing (K > 1: the level re-derived from those, "
                         "unsmoothed unless --prefill-smooth)")
    ap.add_argument("points", nargs="+")
    a = ap.parse_args()
    if a.prefill_smooth < 0 or (a.prefill_smooth and a.prefill_smooth % 2 == 0):
        sys.exit("--prefill-smooth: an odd number of timings, or 0 for the level the run applied")
    if a.prefill_every < 1:
        sys.exit("--prefill-every: keep every K-th prefill timing, K at least 1")
    main(a.points, a.prefill_smooth, a.prefill_every)
