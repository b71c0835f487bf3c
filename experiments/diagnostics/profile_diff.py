#!/usr/bin/python3
"""How far apart are two CPU profiles' tables, and the iterations they cost?

Two calibrations of the same model on the same machine never agree exactly:
the host's level moves between them. This prints, table by table, how far
profile B's measured points sit from profile A's at the points both timed
(median and P90 of |B / A - 1|, and the median signed), then what that does
to whole iterations as the profile model costs them: the kernel sum
(layers x (GEMMs + elementwise + attention) + LM head + sampling, times the
whole-model factors f(T) or g(B)) of decode steps of B sequences at context
128 and of prefills of T tokens with nothing cached. Run it on two profiles
made the same way to see the run-to-run spread, then on a profile made
another way (other --min-time, --repetitions, grids) against both: a
setting whose differences stay within the run-to-run spread costs nothing
that two calibrations can tell.

Usage: experiments/diagnostics/profile_diff.py A.json B.json [C.json ...] [--json]
       (every later profile against the first)
"""
import argparse
import json
import os
import statistics
import sys

import numpy

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from grid_thinning import interpolate as log_log_inside  # noqa: E402

ONE_D = ["gemm_qkv", "gemm_o", "gemm_gate_up", "gemm_down", "elementwise", "lm_head", "sampling"]
TWO_D = ["prefill_attention", "decode_attention"]
DECODE_BATCHES = [1, 2, 3, 4, 8, 16, 32]
DECODE_CONTEXT = 128
PREFILL_TOKENS = [16, 64, 128, 512, 2048]


def interpolate(xs, ys, x):
    """The profile model's rule: log-log between grid points (grid_thinning's), clamped at the ends."""
    return ys[0] if x <= xs[0] else ys[-1] if x >= xs[-1] else log_log_inside(xs, ys, x)


def points(table):
    """{x or (x, y): seconds} of a 1-D or 2-D table."""
    if isinstance(table["seconds"][0], list):
        return {(x, y): s for x, row in zip(table["x"], table["seconds"]) for y, s in zip(table["y"], row)}
    return dict(zip(table["x"], table["seconds"]))


def at_2d(table, x, y):
    """Bilinear in log-log over a 2-D table (x and y on its grid or between)."""
    xs, ys = table["x"], table["y"]
    rows = [interpolate(ys, row, y) for row in table["seconds"]]
    return interpolate(xs, rows, x)


def factor(table, name, x):
    t = table.get(name)
    return float(numpy.interp(x, t["x"], t["factor"])) if t else 1.0  # linear, flat outside


def decode_step(profile, b):
    t, layers = profile["tables"], profile["model"]["num_hidden_layers"]
    per_layer = sum(interpolate(t[n]["x"], t[n]["seconds"], b) for n in ONE_D[:5])
    per_layer += at_2d(t["decode_attention"], b, DECODE_CONTEXT)
    head = sum(interpolate(t[n]["x"], t[n]["seconds"], b) for n in ONE_D[5:])
    return (layers * per_layer + head) * factor(t, "decode_in_situ", b)


def prefill(profile, tokens):
    t, layers = profile["tables"], profile["model"]["num_hidden_layers"]
    per_layer = sum(interpolate(t[n]["x"], t[n]["seconds"], tokens) for n in ONE_D[:5])
    per_layer += at_2d(t["prefill_attention"], tokens, 1)
    head = sum(interpolate(t[n]["x"], t[n]["seconds"], 1) for n in ONE_D[5:])
    return (layers * per_layer + head) * factor(t, "gemm_in_situ", tokens)


def compare(a, b):
    rows = []
    for name in ONE_D + TWO_D:
        pa, pb = points(a["tables"][name]), points(b["tables"][name])
        ratios = [pb[k] / pa[k] - 1 for k in pa if k in pb and pa[k] > 0]
        if not ratios:
            continue
        absolute = sorted(abs(r) for r in ratios)
        rows.append({"table": name, "points": len(ratios), "median_abs": statistics.median(absolute),
                     "p90_abs": absolute[min(len(absolute) - 1, int(0.9 * len(absolute)))],
                     "median_signed": statistics.median(ratios)})
    iterations = [{"iteration": f"decode B={n}", "ratio": decode_step(b, n) / decode_step(a, n)}
                  for n in DECODE_BATCHES]
    iterations += [{"iteration": f"prefill T={n}", "ratio": prefill(b, n) / prefill(a, n)} for n in PREFILL_TOKENS]
    return rows, iterations


def settings_text(p):
    s = p.get("metadata", {}).get("settings", {})
    return (f"{s.get('mode', '?')}, {s.get('threads', '?')} threads, min_time {s.get('min_time_s', '?')} s, "
            f"{s.get('repetitions', '?')} repetitions, {s.get('wall_time_s', float('nan')):.1f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("profiles", nargs="+", help="two or more profile JSON files; each later one against the first")
    ap.add_argument("--json", action="store_true", help="JSON lines instead of tables")
    opts = ap.parse_args()
    if len(opts.profiles) < 2:
        sys.exit("profile_diff.py: give at least two profiles")
    loaded = []
    for path in opts.profiles:
        try:
            with open(path) as f:
                p = json.load(f)
            if not all(n in p.get("tables", {}) for n in ONE_D + TWO_D):
                raise ValueError("not a CPU profile with every kernel table")
            loaded.append(p)
        except (OSError, ValueError) as e:
            sys.exit(f"profile_diff.py: {path}: {e}")
    a = loaded[0]
    for path, b in zip(opts.profiles[1:], loaded[1:]):
        rows, iterations = compare(a, b)
        if opts.json:
            print(json.dumps({"a": opts.profiles[0], "b": path, "tables": rows, "iterations": iterations}))
            continue
        print(f"A = {opts.profiles[0]} ({settings_text(a)})")
        print(f"B = {path} ({settings_text(b)})")
        print(f"  {'table':<18} {'points':>6} {'median |B/A-1|':>14} {'P90':>7} {'median B/A-1':>13}")
        for r in rows:
            print(f"  {r['table']:<18} {r['points']:>6} {100 * r['median_abs']:>13.1f}% {100 * r['p90_abs']:>6.1f}% "
                  f"{100 * r['median_signed']:>+12.1f}%")
        print("  iterations as costed (kernel sums x f or g), B / A: " +
              ", ".join(f"{i['iteration']} {i['ratio']:.3f}" for i in iterations))
        print()


if __name__ == "__main__":
    main()
