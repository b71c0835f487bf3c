#!/usr/bin/python3
"""How far apart are two real runs of the same workload?

Reads two or more held-out suite folders (experiments/heldout/run.py's, with
<workload>/report_predict.json, or compare_profiles.py's, with
<workload>/<profile>/report.json: the first profile's) whose runs served the
same drawn workloads (same seeds, same arrivals and lengths) at different
times, and prints, per workload and latency percentile (TTFT and TPOT, P50
and P90), each run's measured value and the spread between the runs: the
largest over the smallest, less 1. A prediction cannot be held to a
tolerance that the measurement itself does not repeat within: where two
real runs differ by more than 10%, no single prediction lands within 10% of
both. The suites must have served the same arrival rates (their
summary.csv's rate; run.py sets it from the profile's capacity, so give
compare_profiles.py the first suite's profile first): others are refused.

Usage: experiments/diagnostics/run_to_run.py SUITE_DIR SUITE_DIR... [--json]
"""
import argparse
import csv
import json
import os
import sys

STATS = [("ttft_s", "p50"), ("ttft_s", "p90"), ("tpot_s", "p50"), ("tpot_s", "p90")]


def rates_of(suite_dir):
    """{workload: its arrival rate, req/s ('' for a closed loop)} from summary.csv."""
    with open(os.path.join(suite_dir, "summary.csv")) as f:
        return {r["workload"]: r["rate"] for r in csv.DictReader(f)}


def measured_of(suite_dir):
    """{workload: {(metric, stat): measured seconds}} of one suite folder."""
    with open(os.path.join(suite_dir, "workloads.jsonl")) as f:
        names = [json.loads(line)["name"] for line in f if line.strip()]
    meta_path = os.path.join(suite_dir, "metadata.json")
    profiles = []
    if os.path.exists(meta_path):
        with open(meta_path) as f:
            profiles = list(json.load(f).get("profiles", {}))
    out = {}
    for name in names:
        candidates = [os.path.join(suite_dir, name, "report_predict.json")]
        candidates += [os.path.join(suite_dir, name, p, "report.json") for p in profiles[:1]]
        path = next((c for c in candidates if os.path.exists(c)), None)
        if path is None:
            sys.exit(f"{suite_dir}: no report for {name} (looked for {', '.join(candidates)})")
        with open(path) as f:
            report = json.load(f)
        try:
            out[name] = {(m, s): report[m]["measured"][s] for m, s in STATS}
        except (KeyError, TypeError) as e:
            sys.exit(f"{path}: no measured {e}")
    return out


def spreads(runs):
    """Rows: workload, metric, stat, the runs' measured values, their spread."""
    common = [w for w in runs[0] if all(w in r for r in runs[1:])]
    if not common:
        sys.exit("the folders share no workload")
    rows = []
    for w in common:
        for m, s in STATS:
            values = [r[w][(m, s)] for r in runs]
            ok = all(v is not None and v > 0 for v in values)
            rows.append({"workload": w, "metric": m, "stat": s, "measured_s": values,
                         "spread": (max(values) / min(values) - 1) if ok else None})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suites", nargs="+")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()
    if len(opts.suites) < 2:
        ap.error("name two or more suite folders")
    # The same workload means the same arrivals: run.py sets a workload's rate from its profile's
    # capacity, so suites calibrated apart served other rates unless they shared the profile that set it.
    rates = [rates_of(d) for d in opts.suites]
    for w, rate in rates[0].items():
        for d, other in zip(opts.suites[1:], rates[1:]):
            if w in other and other[w] != rate:
                sys.exit(f"{w}: {opts.suites[0]} served {rate or 'a closed loop'} req/s, {d} {other[w]}: not the "
                         f"same workload (give compare_profiles.py the first suite's profile first)")
    rows = spreads([measured_of(d) for d in opts.suites])
    if opts.json:
        json.dump(rows, sys.stdout, indent=1)
        print()
        return
    print(f"{'workload':<72} {'latency':<9} " + " ".join(f"{'run ' + str(i + 1):>9}" for i in
                                                        range(len(opts.suites))) + "    spread")
    for r in rows:
        values = " ".join(f"{1e3 * v:8.2f}m" if v is not None else f"{'-':>9}" for v in r["measured_s"])
        spread = f"{100 * r['spread']:8.1f}%" if r["spread"] is not None else "-"
        print(f"{r['workload']:<72} {r['metric'][:4] + ' ' + r['stat']:<9} {values} {spread}")
    wide = [r for r in rows if r["spread"] is not None and r["spread"] > 0.10]
    by_workload = sorted({r["workload"] for r in wide})
    print(f"{len(wide)} of {len(rows)} latencies spread more than 10% between the runs, at {len(by_workload)} of "
          f"{len({r['workload'] for r in rows})} workloads")


if __name__ == "__main__":
    main()
