#!/usr/bin/python3
"""How far above its noise floor does a point's iteration MAPE sit, and how
often does it meet the targets, by floor?

The study's gate (run.py --max-floor) reruns a point whose noise floor
(validate's iteration_mape.floor: how far the run's measured / predicted
iteration times stray from their own rolling median) is above a bound, and
keeps the attempt nearest to passing. The MAPE cannot be much below that
floor, so the bound decides how much room a kept point has under the 5%
target. This reads validate output folders (report_replay.json and
report_predict.json) and prints, for each band of floors:

  points        how many points have their floor in the band;
  excess        the MAPE less the floor, median and largest;
  MAPE > 5%     how many points miss the MAPE target;
  errors > 10%  how many TTFT and TPOT P50 and P90 errors, replay and
                predict (eight a point), are outside +-10%;
  every target  how many points meet the MAPE target and all eight errors.

Usage: experiments/diagnostics/floor_bands.py [--bands 0.03,0.035,...]
       [--json] POINT_DIR [POINT_DIR ...]
"""
import argparse
import json
import os
import statistics
import sys

import bands as bands_of  # experiments/diagnostics/bands.py

MAPE_TARGET = 0.05  # the bound on per-iteration MAPE
ERROR_TARGET = 0.10  # the bound on P50 and P90 TTFT and TPOT errors


def read_point(point):
    """(floor, MAPE, [eight rel_errors]) of one validate folder; None for a
    folder whose run reported no floor (validate before the floor existed)."""
    reports = []
    for mode in ("replay", "predict"):
        path = os.path.join(point, f"report_{mode}.json")
        try:
            with open(path) as f:
                reports.append(json.load(f))
        except FileNotFoundError:
            sys.exit(f"{point}: no report_{mode}.json (not a validate output folder)")
        except json.JSONDecodeError as e:
            sys.exit(f"{path}: not JSON ({e})")
    try:
        mape = reports[0]["iteration_mape"]
        errors = [float(r[metric]["rel_error"][q]) for r in reports
                  for metric in ("ttft_s", "tpot_s") for q in ("p50", "p90")]
        if mape.get("floor") is None:
            return None
        return float(mape["floor"]), float(mape["all"]), errors
    except (AttributeError, KeyError, TypeError, ValueError) as e:
        sys.exit(f"{point}: a report without iteration_mape.all or ttft_s/tpot_s rel_error p50/p90 ({e})")


def bands(points, edges):
    """One row per band [lo, hi) of floors, from 0 to the last edge and
    above it (floor_to None); bands without points are left out."""
    rows = []
    for lo, hi in bands_of.bounds(edges):
        inside = [p for p in points if bands_of.inside(p[0], lo, hi)]
        if not inside:
            continue
        excess = [mape - floor for floor, mape, _ in inside]
        rows.append({
            "floor_from": lo, "floor_to": hi, "points": len(inside),
            "excess_median": statistics.median(excess), "excess_max": max(excess),
            "mape_misses": sum(mape > MAPE_TARGET for _, mape, _ in inside),
            "errors": sum(len(e) for _, _, e in inside),
            "errors_outside": sum(abs(x) > ERROR_TARGET for _, _, e in inside for x in e),
            "every_target": sum(mape <= MAPE_TARGET and all(abs(x) <= ERROR_TARGET for x in e)
                                for _, mape, e in inside),
        })
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("points", nargs="+", metavar="POINT_DIR", help="validate output folders")
    ap.add_argument("--bands", default="0.03,0.035,0.04,0.045,0.05",
                    help="the floors between bands, ascending (default %(default)s)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    opts = ap.parse_args()
    edges = bands_of.parse_edges(opts.bands, "--bands", "floors")

    read = [read_point(p) for p in opts.points]
    points = [p for p in read if p is not None]
    if not points:
        sys.exit("none of the folders reported a noise floor (iteration_mape.floor)")
    rows = bands(points, edges)
    if opts.json:
        print(json.dumps({"points": len(points), "without_floor": len(read) - len(points), "bands": rows},
                         indent=1))
        return
    print(f"{len(points)} points with a floor ({len(read) - len(points)} without, left out)")
    print(f"{'floor':>13}  {'points':>6}  {'excess p50':>10}  {'excess max':>10}  "
          f"{'MAPE > 5%':>9}  {'errors > 10%':>12}  {'every target':>12}")
    for r in rows:
        band = f"{r['floor_from']:.1%}-" + (f"{r['floor_to']:.1%}" if r["floor_to"] is not None else "")
        print(f"{band:>13}  {r['points']:>6}  {r['excess_median']:>+10.2%}  {r['excess_max']:>+10.2%}  "
              f"{r['mape_misses']:>9}  {r['errors_outside']:>5} of {r['errors']:<4}  "
              f"{r['every_target']:>5} of {r['points']:<4}")


if __name__ == "__main__":
    main()
