#!/usr/bin/python3
"""How many requests must a held-out workload serve for its P50/P90 target
(within 10%) to test the cost model rather than the queue?

A profile that meets the per-iteration targets can still be a few percent
off in level: the held-out suite allows an iteration MAPE of 7% and every
bucket within 5%. With 40 requests, a uniform cost error of 1-3% moves a
loaded or bursty workload's TTFT or TPOT percentile by more than 10%, since
it changes which arrivals share an iteration and how large the batches
grow, and one or two requests set the percentile. This re-predicts a
committed suite's workloads offline at several request counts (workloads.py
extends the same draw: the first 40 requests are the same at every count)
and, per count, scales the profile's two in-situ factors by 1 + eps (f and
g, sim/cost/profile_model.h: every decode step exactly, a prefill's GEMM and
elementwise part) for each eps, with `servesim simulate` on each workload's
own scheduler, KV blocks and rate (report_predict.json's config, as
heldout_draws.py rebuilds it; at the suite's own count and eps = 0 it
checks that this is the committed prediction).

Per workload and count: each percentile's largest move over the eps within
+-`--within` (default 2%) and over all eps, against its value at eps = 0.
Then per count: how many of the workloads' P50/P90 TTFT and TPOT move by
more than 10% for a cost error that small, which a prediction off by that
level cannot avoid.

Usage: experiments/diagnostics/heldout_sample_size.py [--servesim BIN]
       [--requests 40,120,240] [--eps -0.03,...,0.03] [--within 0.02]
       [--csv FILE] SUITE_DIR
"""
import argparse
import copy
import json
import os
import sys
import tempfile

import heldout_draws  # experiments/diagnostics/heldout_draws.py: the suite's simulate flags
from heldout_draws import STATS, TARGET, ROOT, workloads


def request_counts(text):
    """--requests: counts >= 1. Raises ValueError naming what is wrong."""
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--requests: a comma-separated list of integers (got '{text}')") from None
    if min(values) < 1:
        raise ValueError(f"--requests: every count must be >= 1 (got '{text}')")
    return values


def cost_changes(text):
    """--eps: changes in (-0.5, 0.5), 0 among them. Raises ValueError naming what is wrong."""
    try:
        values = [float(v) for v in text.split(",")]
    except ValueError:
        raise ValueError(f"--eps: a comma-separated list of numbers (got '{text}')") from None
    if 0.0 not in values:
        raise ValueError(f"--eps: must include 0, the profile unscaled (got '{text}')")
    if min(values) <= -0.5 or max(values) >= 0.5:
        raise ValueError(f"--eps: every change must lie in (-0.5, 0.5) (got '{text}')")
    return values


def scaled_profile(base, eps, path):
    """`base` (a profile's JSON) with its in-situ factors f and g times 1 + eps, written to `path`."""
    p = copy.deepcopy(base)
    tables = p.get("tables", {})
    for name in ("gemm_in_situ", "decode_in_situ"):
        if name not in tables:
            sys.exit(f"the profile has no tables.{name}: not a calibrated profile with in-situ factors")
        tables[name]["factor"] = [x * (1 + eps) for x in tables[name]["factor"]]
    with open(path, "w") as f:
        json.dump(p, f)
    return path


def flags_at(config, w, requests, trace):
    """simulate flags of the workload `w` drawn with `requests` requests."""
    config = copy.deepcopy(config)
    config["workload"]["num_requests"] = requests
    workloads.write_trace(dict(w, requests=requests), trace)
    return heldout_draws.simulate_flags(config, trace)


def moves(values, eps_list, limit):
    """The largest |stat(eps) / stat(0) - 1| over the eps with |eps| <= limit, per stat."""
    base = values[0.0]
    return [max(abs(values[e][i] / base[i] - 1) for e in eps_list if abs(e) <= limit + 1e-12)
            for i in range(len(STATS))]


def workload_rows(servesim, folder, w, sizes, eps_list, within, scratch, profiles):
    with open(os.path.join(folder, w["name"], "report_predict.json")) as f:
        report = json.load(f)
    config = report["config"]
    rows = []
    for n in sizes:
        flags = flags_at(config, w, n, os.path.join(scratch, f"{w['name']}_{n}.csv"))
        values = {}
        for eps in eps_list:
            s = heldout_draws.simulate(servesim, profiles[eps], flags)
            values[eps] = [s[f"{m}_s"][q] for m, q in STATS]
        if n == w["requests"]:  # the suite's own workload: the committed prediction, or a wrong rebuild
            for (m, q), v in zip(STATS, values[0.0]):
                committed = report[f"{m}_s"]["predicted"][q]
                if abs(v / committed - 1) > heldout_draws.REPRODUCE_TOLERANCE:
                    sys.exit(f"{folder}/{w['name']}: simulate gives {m} {q} {v:.6g} s, the committed prediction "
                             f"{committed:.6g} s: not the same simulation (another build or profile?)")
        small, every = moves(values, eps_list, within), moves(values, eps_list, 1.0)
        row = {"workload": w["name"], "requests": n}
        for (m, q), a, b in zip(STATS, small, every):
            row[f"{m}_{q}_move_small"] = a
            row[f"{m}_{q}_move_all"] = b
        rows.append(row)
        print(f"    {w['name'][:9]} at {n} requests: moves within +-{within:.1%} "
              + " / ".join(f"{100 * a:.1f}%" for a in small), file=sys.stderr, flush=True)
    return rows


def table(rows, sizes, eps_list, within):
    span = f"{min(eps_list):+.0%} .. {max(eps_list):+.0%}"
    out = [f"Each cell: the largest move of TTFT P50 / P90, TPOT P50 / P90 (%) for cost errors within "
           f"+-{within:.1%}, then (in brackets) the largest over {span}.", "",
           "| workload | " + " | ".join(f"{n} requests" for n in sizes) + " |",
           "| --- |" + " --- |" * len(sizes)]
    names = list(dict.fromkeys(r["workload"] for r in rows))
    by = {(r["workload"], r["requests"]): r for r in rows}
    for name in names:
        cells = []
        for n in sizes:
            r = by[(name, n)]
            small = " / ".join(f"{100 * r[f'{m}_{q}_move_small']:.0f}" for m, q in STATS)
            every = max(r[f"{m}_{q}_move_all"] for m, q in STATS)
            cells.append(f"{small} ({100 * every:.0f})")
        out.append(f"| {name[:9]} | " + " | ".join(cells) + " |")
    out.append("")
    for n in sizes:
        at = [r for r in rows if r["requests"] == n]
        over = sum(r[f"{m}_{q}_move_small"] > TARGET for r in at for m, q in STATS)
        fragile = sum(any(r[f"{m}_{q}_move_small"] > TARGET for m, q in STATS) for r in at)
        out.append(f"{n} requests: {over} of {len(at) * len(STATS)} percentiles move by more than "
                   f"{TARGET:.0%} for a cost error within +-{within:.1%}, at {fragile} of {len(at)} workloads")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--requests", default="40,120,240", help="request counts to draw each workload at")
    ap.add_argument("--eps", default="-0.03,-0.02,-0.01,0,0.01,0.02,0.03",
                    help="cost scale changes (0 among them)")
    ap.add_argument("--within", type=float, default=0.02,
                    help="the cost errors counted as small: |eps| up to this (default 0.02)")
    ap.add_argument("--csv", help="write the rows here too")
    ap.add_argument("suite", metavar="SUITE_DIR")
    opts = ap.parse_args()
    try:
        sizes, eps_list = request_counts(opts.requests), cost_changes(opts.eps)
    except ValueError as e:
        ap.error(str(e))
    if not 0 <= opts.within < 0.5:
        ap.error(f"--within must lie in [0, 0.5) (got {opts.within})")
    if not os.path.isfile(opts.servesim):
        sys.exit(f"--servesim: {opts.servesim} does not exist (build it: make build-servesim)")
    jsonl = os.path.join(opts.suite, "workloads.jsonl")
    if not os.path.isfile(jsonl):
        sys.exit(f"{opts.suite}: no workloads.jsonl (not a held-out suite folder)")
    with open(jsonl) as f:
        drawn = [json.loads(line) for line in f if line.strip()]
    drawn = [w for w in drawn if os.path.isfile(os.path.join(opts.suite, w["name"], "report_predict.json"))]
    if not drawn:
        sys.exit(f"{opts.suite}: no workload folder with report_predict.json")
    with open(heldout_draws.suite_profile(opts.suite)) as f:
        base = json.load(f)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        profiles = {eps: scaled_profile(base, eps, os.path.join(scratch, f"profile_{i}.json"))
                    for i, eps in enumerate(eps_list)}
        for w in drawn:
            rows += workload_rows(opts.servesim, opts.suite, w, sizes, eps_list, opts.within, scratch, profiles)
    print(table(rows, sizes, eps_list, opts.within))
    if opts.csv:
        heldout_draws.write_rows(opts.csv, rows)


if __name__ == "__main__":
    main()
