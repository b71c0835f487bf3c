#!/usr/bin/python3
"""How many requests does a light point need for its TTFT P50 and P90 to be
a fair test of the cost model?

At light load a request's TTFT is about its own prefill, and on the 2-core
VMs single prefills run 0.88-1.16x their point's level (10th-90th
percentile over the Xeon VM's light points) in spells too short for
the run's timings to follow. The P50 and P90 of a handful of requests then
move with which requests those spells hit. This reads the committed light
points (validate output folders: requests.csv), and from them:

  noise   each request's measured / replayed TTFT over its point's median of
          that ratio (the scatter within a point);
  bias    each point's median ratio (the level between points: it includes
          the scatter of a median of that point's few requests, so the
          "noise + bias" column overstates the misses somewhat);
  ttft    a line of replayed TTFT on prompt tokens.

It then draws light points of N requests -- prompt lengths uniform over
--prompt-len, measured TTFT the line times a noise draw (times one bias
draw per point for the second estimate) -- and prints, for each N, the
share of points whose P50 or P90 error (the line's percentile over the
measured one, less 1) is outside +-10% and the error's standard deviation.
Beside the draws it counts, for the points given, grouped by their number
of requests, the TTFT P50 and P90 errors (replay and predict, from
requests.csv as validate computes them) outside +-10%.

Usage: experiments/diagnostics/light_sample_size.py [--sizes 16,32,48]
       [--draws 20000] [--prompt-len 16:256] [--json] POINT_DIR [POINT_DIR ...]
"""
import argparse
import csv
import json
import os
import sys

import numpy as np

TARGET = 0.10  # the bound on P50 and P90 errors


def read_point(point):
    """(prompt tokens, measured TTFT s, replayed TTFT s, predicted TTFT s)
    of each request of one validate folder."""
    path = os.path.join(point, "requests.csv")
    try:
        with open(path) as f:
            rows = list(csv.DictReader(f))
        if not rows:
            sys.exit(f"{path}: no requests")
        return [(int(r["prompt_tokens"]), float(r["measured_ttft_s"]), float(r["replay_ttft_s"]),
                 float(r["predict_ttft_s"])) for r in rows]
    except FileNotFoundError:
        sys.exit(f"{point}: no requests.csv (not a validate output folder)")
    except (KeyError, ValueError) as e:
        sys.exit(f"{path}: expected prompt_tokens, measured_ttft_s, replay_ttft_s and predict_ttft_s columns ({e})")


def pools(points):
    """(noise, bias, (intercept s, s per token)) from the points' requests:
    see the module's docstring."""
    noise, bias, lengths, replayed = [], [], [], []
    for requests in points:
        ratios = np.array([m / r for _, m, r, _ in requests if r > 0 and m > 0])
        if len(ratios) == 0:
            continue
        median = float(np.median(ratios))
        bias.append(median)
        noise += list(ratios / median)
        lengths += [t for t, _, _, _ in requests]
        replayed += [r for _, _, r, _ in requests]
    if len(set(lengths)) < 2:
        sys.exit("need requests of at least two prompt lengths to fit TTFT on prompt tokens")
    per_token, intercept = np.polyfit(lengths, replayed, 1)
    return np.array(noise), np.array(bias), (float(intercept), float(per_token))


def misses(noise, bias, line, n, draws, prompt_range, rng):
    """{p50, p90: (share of draws outside +-TARGET, standard deviation of the
    error)} for points of n requests; bias None leaves the level out."""
    lo, hi = prompt_range
    lengths = rng.integers(lo, hi + 1, size=(draws, n))
    predicted = line[0] + line[1] * lengths
    measured = predicted * rng.choice(noise, size=(draws, n))
    if bias is not None:
        measured = measured * rng.choice(bias, size=(draws, 1))
    out = {}
    for q in (50, 90):
        error = np.percentile(predicted, q, axis=1) / np.percentile(measured, q, axis=1) - 1
        out[f"p{q}"] = (float(np.mean(np.abs(error) > TARGET)), float(np.std(error)))
    return out


def observed(points):
    """{requests per point: (points, errors, errors outside +-TARGET)} over
    each point's TTFT P50 and P90 errors, replay and predict (validate's
    rel_error: the predicted percentile over the measured one, less 1)."""
    out = {}
    for requests in points:
        measured = np.array([m for _, m, _, _ in requests])
        replayed = np.array([r for _, _, r, _ in requests])
        predicted = np.array([p for _, _, _, p in requests])
        errors = [np.percentile(modelled, q) / np.percentile(measured, q) - 1
                  for modelled in (replayed, predicted) for q in (50, 90)]
        n, count, outside = out.get(len(requests), (0, 0, 0))
        out[len(requests)] = (n + 1, count + len(errors), outside + sum(bool(abs(e) > TARGET) for e in errors))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("points", nargs="+", metavar="POINT_DIR", help="validate output folders of light points")
    ap.add_argument("--sizes", default="16,24,32,48,64", help="requests per point to draw (default %(default)s)")
    ap.add_argument("--draws", type=int, default=20000, help="points drawn per size (default %(default)s)")
    ap.add_argument("--prompt-len", default="16:256", help="LO:HI prompt tokens, uniform (default %(default)s)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    opts = ap.parse_args()
    try:
        sizes = [int(s) for s in opts.sizes.split(",")]
        prompt_range = tuple(int(x) for x in opts.prompt_len.split(":"))
        if len(prompt_range) != 2 or not 0 < prompt_range[0] <= prompt_range[1]:
            raise ValueError
    except ValueError:
        sys.exit(f"--sizes N,N,... and --prompt-len LO:HI (0 < LO <= HI) expected "
                 f"(got '{opts.sizes}', '{opts.prompt_len}')")
    if min(sizes) < 2 or opts.draws < 1:
        sys.exit("--sizes: at least 2 requests a point; --draws: at least 1")

    points = [read_point(p) for p in opts.points]
    noise, bias, line = pools(points)
    seen = observed(points)
    rng = np.random.default_rng(opts.seed)
    rows = [{"requests": n, "noise": misses(noise, None, line, n, opts.draws, prompt_range, rng),
             "noise_and_bias": misses(noise, bias, line, n, opts.draws, prompt_range, rng)} for n in sizes]
    if opts.json:
        print(json.dumps({"points": len(bias), "requests": len(noise), "ttft_line_s": line,
                          "noise_p10_p90": list(np.percentile(noise, [10, 90])),
                          "bias_p10_p50_p90": list(np.percentile(bias, [10, 50, 90])), "sizes": rows,
                          "observed": [{"requests": n, "points": p, "errors": e, "outside": o}
                                       for n, (p, e, o) in sorted(seen.items())]}, indent=1))
        return
    print(f"{len(bias)} points, {len(noise)} requests; replayed TTFT ~ {line[0] * 1e3:.1f} ms + "
          f"{line[1] * 1e6:.0f} us/token")
    print(f"measured / replayed over the point's median: p10 {np.percentile(noise, 10):.3f}, "
          f"p90 {np.percentile(noise, 90):.3f}; points' medians p10 / p50 / p90: "
          + " / ".join(f"{b:.3f}" for b in np.percentile(bias, [10, 50, 90])))
    print(f"share of drawn points with |error| > {TARGET:.0%} (standard deviation of the error):")
    print(f"{'requests':>8}  {'P50, noise':>16}  {'P90, noise':>16}  {'P50, + bias':>16}  {'P90, + bias':>16}")
    for r in rows:
        cells = [r[k][q] for k in ("noise", "noise_and_bias") for q in ("p50", "p90")]
        print(f"{r['requests']:>8}  " + "  ".join(f"{m:>6.1%} ({sd:.3f})".rjust(16) for m, sd in cells))
    print(f"the points given: TTFT P50 and P90 errors, replay and predict, outside {TARGET:.0%}:")
    for n, (p, e, o) in sorted(seen.items()):
        print(f"{n:>8}  {p} points: {o} of {e} ({o / e:.1%})")


if __name__ == "__main__":
    main()
