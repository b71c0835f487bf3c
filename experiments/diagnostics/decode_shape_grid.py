#!/usr/bin/python3
"""Does a profile's decode error follow the batch, the context, or the
threads' placement?

Serves closed-loop batches of B sequences, each with a fixed prompt of P
tokens and O output tokens (`servesim validate --mode replay --host-drift
report`: each iteration's placement of the threads is recorded), for every
B and P given, and prints per (B, context bucket, placement) the decode
iterations' count, median measured time and median predicted / measured.
A bias that follows B at every context and placement is the model's; one
that follows the placement is the host's.

Usage: experiments/diagnostics/decode_shape_grid.py --profile P [--servesim BIN]
       [--batches 1,2,4,8,16] [--prompts 32,256,640] [--output 48] [--threads N] [--out DIR] [--json]
"""
import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def ints(text):
    return [int(x) for x in text.split(",") if x]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--profile", required=True)
    ap.add_argument("--batches", type=ints, default=[1, 2, 4, 8, 16])
    ap.add_argument("--prompts", type=ints, default=[32, 256, 640])
    ap.add_argument("--output", type=int, default=48)
    ap.add_argument("--host-drift", default="report", choices=["off", "report"])
    ap.add_argument("--threads", type=int, help="decoder threads (default: validate's); the profile's own")
    ap.add_argument("--out", default="/tmp/decode_shape_grid")
    ap.add_argument("--json", action="store_true")
    opts = ap.parse_args()

    cells = defaultdict(lambda: {"measured": [], "ratio": []})
    for p in opts.prompts:
        for b in opts.batches:
            folder = os.path.join(opts.out, f"b{b}_p{p}")
            cmd = [opts.servesim, "validate", "--device", "cpu", "--model", "small-110m", "--profile", opts.profile,
                   "--mode", "replay", "--scheduler", "continuous", "--arrival", "closed", "--concurrency", str(b),
                   "--num-requests", str(2 * b), "--prompt-len", f"fixed:{p}", "--output-len", f"fixed:{opts.output}",
                   "--predict-draws", "1", "--host-drift", opts.host_drift, "--quiet", "--out", folder]
            if opts.threads:
                cmd += ["--threads", str(opts.threads)]
            print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
            if subprocess.run(cmd, stdout=subprocess.DEVNULL).returncode != 0:
                sys.exit(f"failed: {' '.join(cmd)}")
            with open(os.path.join(folder, "iterations.csv")) as f:
                for row in csv.DictReader(f):
                    if row["kind"] != "decode" or int(row["sequences"]) != b:
                        continue
                    key = (b, p, row["placement"] or "-")
                    cells[key]["measured"].append(float(row["measured_s"]))
                    cells[key]["ratio"].append(float(row["predicted_s"]) / float(row["measured_s"]))
    rows = []
    for (b, p, placement), c in sorted(cells.items()):
        rows.append({"sequences": b, "prompt": p, "context": f"{p + 1}-{p + opts.output}", "placement": placement,
                     "count": len(c["ratio"]), "median_measured_ms": 1e3 * statistics.median(c["measured"]),
                     "median_ratio": statistics.median(c["ratio"])})
    if opts.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'B':>3} {'context':>9} {'placement':>9} {'count':>6} {'measured ms':>12} {'pred/meas':>10}")
    for r in rows:
        print(f"{r['sequences']:>3} {r['context']:>9} {r['placement']:>9} {r['count']:>6} "
              f"{r['median_measured_ms']:>12.2f} {r['median_ratio']:>10.3f}")


if __name__ == "__main__":
    main()
