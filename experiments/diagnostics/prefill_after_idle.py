#!/usr/bin/python3
"""Do prefills that start after the engine sat idle run slower than their
replayed cost?

At light load most prefills start after an idle wait (the previous
request finished before this one arrived), and with --host-drift interleave
the prefill level they are costed with was timed before that wait, between
served iterations. This reads validate output folders (iterations.csv: each
iteration's measured and replayed seconds; measured/iterations.csv: its
start) and groups the prefill-only iterations by the gap between the end of
the iteration before them and their start (the run's clock, which stops
during interleaved timings, so a prefill right after a timing has no gap).
Per band of gaps: how many prefills, and the median, mean and 90th
percentile of measured / replayed seconds.

Usage: experiments/diagnostics/prefill_after_idle.py [--gaps 0.001,0.1,0.5,2]
       [--json] POINT_DIR [POINT_DIR ...]
"""
import argparse
import csv
import json
import os
import sys

import numpy as np

import bands as bands_of  # experiments/diagnostics/bands.py


def read_rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def read_point(point):
    """[(gap before s, measured / replayed)] of a folder's prefill-only
    iterations after its first."""
    paths = [os.path.join(point, "iterations.csv"), os.path.join(point, "measured", "iterations.csv")]
    try:
        costed, measured = [read_rows(p) for p in paths]
    except FileNotFoundError as e:
        sys.exit(f"{point}: no {os.path.relpath(e.filename, point)} (not a validate output folder)")
    if len(costed) != len(measured):
        sys.exit(f"{point}: iterations.csv has {len(costed)} iterations, measured/iterations.csv {len(measured)}")
    out, previous_end = [], None
    try:
        for c, m in zip(costed, measured):
            start, duration = float(m["start_s"]), float(m["duration_s"])
            if c["kind"] == "prefill" and previous_end is not None and float(c["predicted_s"]) > 0:
                # max: back-to-back iterations can differ by a rounding error.
                out.append((max(0.0, start - previous_end), float(c["measured_s"]) / float(c["predicted_s"])))
            previous_end = start + duration
    except (KeyError, ValueError) as e:
        sys.exit(f"{point}: expected kind, measured_s, predicted_s in iterations.csv and start_s, duration_s in "
                 f"measured/iterations.csv ({e})")
    return out


def bands(prefills, edges):
    """One row per band [lo, hi) of gaps, from 0 to the last edge and above
    it (gap_to None); bands without prefills are left out."""
    rows = []
    for lo, hi in bands_of.bounds(edges):
        ratios = np.array([r for gap, r in prefills if bands_of.inside(gap, lo, hi)])
        if len(ratios) == 0:
            continue
        rows.append({"gap_from_s": lo, "gap_to_s": hi, "prefills": len(ratios),
                     "median": float(np.median(ratios)), "mean": float(np.mean(ratios)),
                     "p90": float(np.percentile(ratios, 90))})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("points", nargs="+", metavar="POINT_DIR", help="validate output folders")
    ap.add_argument("--gaps", default="0.001,0.1,0.5,2", help="the gaps between bands in seconds, ascending "
                                                              "(default %(default)s)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    opts = ap.parse_args()
    edges = bands_of.parse_edges(opts.gaps, "--gaps", "seconds")
    prefills = [p for point in opts.points for p in read_point(point)]
    if not prefills:
        sys.exit("no prefill-only iterations after a folder's first in the folders given")
    rows = bands(prefills, edges)
    if opts.json:
        print(json.dumps({"points": len(opts.points), "prefills": len(prefills), "bands": rows}, indent=1))
        return
    print(f"{len(prefills)} prefill-only iterations in {len(opts.points)} points; measured / replayed seconds:")
    print(f"{'gap before (s)':>14}  {'prefills':>8}  {'median':>6}  {'mean':>6}  {'p90':>6}")
    for r in rows:
        band = f"{r['gap_from_s']:g}-" + (f"{r['gap_to_s']:g}" if r["gap_to_s"] is not None else "")
        print(f"{band:>14}  {r['prefills']:>8}  {r['median']:>6.3f}  {r['mean']:>6.3f}  {r['p90']:>6.3f}")


if __name__ == "__main__":
    main()
