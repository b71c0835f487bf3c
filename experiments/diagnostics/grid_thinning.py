#!/usr/bin/python3
"""Which points of a full CPU calibration does the profile model need?

Reads a profile measured on dense grids and its raw Google Benchmark JSON
(NAME.benchmarks.json beside it), keeps only a candidate grid of each 1-D
table (the GEMMs, elementwise, lm_head, sampling), predicts every dropped
point the way the profile model does inside a grid (linear in log seconds
against log x between neighbouring kept points: sim/cost/profile_model.h)
and prints, per table, how far those predictions are from the measured
points beside how far the measured points' own repetitions spread. A grid
whose interpolation error stays inside the repetitions' spread loses
nothing that the timings could tell. Last, what the candidate grids change
in an iteration's kernel sum (layers x (GEMMs + elementwise) at T tokens,
plus lm_head and sampling at S rows; attention left out, so the share is an
upper bound): a decode step of B sequences (T = S = B) and a prefill of T
tokens (S = 1), over every T of the dense grid.

Usage: experiments/diagnostics/grid_thinning.py PROFILE [--grid TABLE=1,2,4,...] [--json]
       (default candidates: every table on its own doubling grid from 8 with
        1, 2, 4, 7, 8 below it)
"""
import argparse
import bisect
import json
import math
import os
import re
import statistics
import sys

TABLES = ["gemm_qkv", "gemm_o", "gemm_gate_up", "gemm_down", "elementwise", "lm_head", "sampling"]
UNIT = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def ints(text):
    return [int(x) for x in text.split(",") if x]


def interpolate(xs, ys, x):
    """log-log interpolation between the neighbouring points of (xs, ys), xs ascending, x inside."""
    i = bisect.bisect_left(xs, x)
    if xs[i] == x:
        return ys[i]
    x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
    w = (math.log(x) - math.log(x0)) / (math.log(x1) - math.log(x0))
    return math.exp((1 - w) * math.log(y0) + w * math.log(y1))


def repetition_spread(benchmarks_path):
    """{(table, x): half the range of a point's repetitions / their median}."""
    reps = {}
    with open(benchmarks_path) as f:
        for b in json.load(f)["benchmarks"]:
            if b.get("run_type") != "iteration":
                continue
            m = re.match(r"([a-z_]+)/[A-Za-z]+:(\d+)/", b["name"])
            if m:
                reps.setdefault((m.group(1), int(m.group(2))), []).append(b["real_time"] * UNIT[b["time_unit"]])
    return {k: (max(v) - min(v)) / 2 / statistics.median(v) for k, v in reps.items() if len(v) > 1}


def default_grid(xs):
    top = int(xs[-1])
    grid = {1, 2, 4, 7, 8, top}
    x = 16
    while x < top:
        grid.add(x)
        x *= 2
    return sorted(g for g in grid if g <= top)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profile")
    ap.add_argument("--grid", action="append", default=[], metavar="TABLE=X,X,...",
                    help="the kept points of one table (repeatable); the table's first and last points are always kept")
    ap.add_argument("--json", action="store_true", help="one JSON object per table instead of the table")
    opts = ap.parse_args()

    with open(opts.profile) as f:
        profile = json.load(f)
    raw = profile.get("raw_benchmarks_file")
    if not raw:
        sys.exit(f"{opts.profile}: no raw_benchmarks_file (calibrate with --out writes one beside the profile)")
    spread = repetition_spread(os.path.join(os.path.dirname(os.path.abspath(opts.profile)), raw))
    grids = {}
    for g in opts.grid:
        name, _, values = g.partition("=")
        if name not in TABLES:
            sys.exit(f"--grid {g}: unknown table {name!r} (one of {', '.join(TABLES)})")
        grids[name] = ints(values)

    rows, thinned = [], {}
    for name in TABLES:
        table = profile["tables"].get(name)
        if not table:
            continue
        xs = [int(x) for x in table["x"]]
        ys = table["seconds"]
        keep = set(grids.get(name, default_grid(xs))) | {xs[0], xs[-1]}
        kept = [(x, y) for x, y in zip(xs, ys) if x in keep]
        missing = sorted(keep - set(xs))
        if missing:
            sys.exit(f"--grid {name}: {missing} not on the profile's grid")
        kx, ky = [k[0] for k in kept], [k[1] for k in kept]
        thinned[name] = (kx, ky)
        errors, spreads = [], []
        worst = (0.0, None)
        for x, y in zip(xs, ys):
            if x in keep:
                continue
            e = interpolate(kx, ky, x) / y - 1
            errors.append(abs(e))
            spreads.append(spread.get((name, x), float("nan")))
            if abs(e) > abs(worst[0]):
                worst = (e, x)
        row = {"table": name, "points": len(xs), "kept": len(kx), "dropped": len(errors),
               "median_abs_error": statistics.median(errors) if errors else 0.0,
               "p90_abs_error": sorted(errors)[int(0.9 * (len(errors) - 1))] if errors else 0.0,
               "worst_error": worst[0], "worst_at": worst[1],
               "median_repetition_half_range": statistics.median(spreads) if spreads else float("nan"),
               "kept_grid": kx}
        rows.append(row)
    effect = iteration_effect(profile, thinned)
    if opts.json:
        for r in rows:
            print(json.dumps(r))
        print(json.dumps({"iteration_effect": effect}))
        return
    print(f"{'table':<13} {'points':>6} {'kept':>5} {'median |err|':>12} {'P90 |err|':>10} {'worst (at x)':>16} "
          f"{'repetitions +-':>14}")
    for r in rows:
        worst = f"{100 * r['worst_error']:+.1f}% ({r['worst_at']})" if r["worst_at"] else "-"
        print(f"{r['table']:<13} {r['points']:>6} {r['kept']:>5} {100 * r['median_abs_error']:>11.1f}% "
              f"{100 * r['p90_abs_error']:>9.1f}% {worst:>16} {100 * r['median_repetition_half_range']:>13.1f}%")
    for kind, (change, at) in effect.items():
        print(f"{kind}: the kernel sum moves by at most {100 * change:+.2f}% (at {at})")


def iteration_effect(profile, thinned):
    """{kind: (largest relative change of the kernel sum, at which x)} for decode steps and prefills."""
    tables = profile["tables"]
    layers = profile["model"]["num_hidden_layers"]

    def at(name, x, thin):
        xs, ys = thinned[name] if thin else ([int(v) for v in tables[name]["x"]], tables[name]["seconds"])
        return interpolate(xs, ys, x)

    def kernel_sum(t, s, thin):
        per_layer = sum(at(n, t, thin) for n in TABLES[:5])
        return layers * per_layer + at("lm_head", s, thin) + at("sampling", s, thin)

    out = {}
    tokens = [int(x) for x in tables["gemm_qkv"]["x"]]
    # Every decode batch both the token and the row axes reach (sampling,
    # thinner since, is interpolated alike in both sums).
    rows = set(int(x) for x in tables["lm_head"]["x"])
    for kind, shapes in (("decode step", [(b, b) for b in tokens if b in rows]), ("prefill", [(t, 1) for t in tokens])):
        worst = (0.0, None)
        for t, s in shapes:
            change = kernel_sum(t, s, True) / kernel_sum(t, s, False) - 1
            if abs(change) >= abs(worst[0]):
                worst = (change, f"T = {t}, S = {s}")
        out[kind] = worst
    return out


if __name__ == "__main__":
    main()
