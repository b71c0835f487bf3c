#!/usr/bin/python3
"""Decode steps by the CUDA-graph bucket they ran at.

The CUDA decoder pads a decode step to its bucket (1, 2, 4, then multiples
of 8; sim/cost/decode_padding.h), so a step's time follows the bucket, not
its batch. For each model of a GPU run (experiments/gpu/run.sh's work
folder, or results.tar.gz unpacked) this reads every validation point's
iterations.csv (kind, sequences, measured_s, predicted_s) and tabulates the
decode steps per bucket: how many, the median measured step, the median
predicted / measured over the bucket, and at the bucket's smallest and
largest batch seen (3 steps or more each). A cost model that costs the
batch and not the bucket shows as a ratio rising through each bucket and
a measured step that jumps between buckets.

Usage: experiments/gpu/decode_buckets.py WORK_DIR
"""
import csv
import glob
import json
import os
import statistics
import sys

# The CUDA decoder's rule (sim/cost/decode_padding.h, DecodePadding::cuda_graphs),
# for profiles written before they recorded it.
CUDA_GRAPHS = {"sizes": [1, 2, 4], "multiple": 8, "max_batch": 512}
MIN_AT_BATCH = 3


def bucket(n, rule):
    """The batch a decode step of n sequences runs at under `rule` (decode_padding's JSON)."""
    if n < 1 or n > rule["max_batch"]:
        return n
    for s in rule["sizes"]:
        if n <= s:
            return s
    m = rule["multiple"]
    return (n + m - 1) // m * m


def padding_rule(model_dir):
    """The profile's decode_padding, else the CUDA decoder's rule."""
    path = os.path.join(model_dir, "profile.json")
    if os.path.exists(path):
        with open(path) as f:
            rule = json.load(f).get("decode_padding")
        if rule:
            return rule
    return CUDA_GRAPHS


def decode_steps(model_dir):
    """[(sequences, measured_s, predicted_s)] of every point's decode iterations."""
    steps = []
    for path in sorted(glob.glob(os.path.join(model_dir, "*", "iterations.csv"))):
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["kind"] == "decode":
                    steps.append((int(r["sequences"]), float(r["measured_s"]), float(r["predicted_s"])))
    return steps


def table(steps, rule):
    by_bucket = {}
    for n, measured, predicted in steps:
        by_bucket.setdefault(bucket(n, rule), []).append((n, measured, predicted))
    out = ["| bucket | steps | measured step (ms) | predicted / measured | at its smallest batch | at its largest |",
           "|---:|---:|---:|---:|---|---|"]
    for b in sorted(by_bucket):
        rows = by_bucket[b]
        ratio = statistics.median(p / m for _, m, p in rows)
        at = {}
        for n, m, p in rows:
            at.setdefault(n, []).append(p / m)
        seen = sorted(n for n, v in at.items() if len(v) >= MIN_AT_BATCH)
        ends = [f"{n}: {statistics.median(at[n]):.3f}" for n in (seen[:1] + seen[-1:] if len(seen) > 1 else [])]
        out.append(f"| {b} | {len(rows)} | {1e3 * statistics.median(m for _, m, _ in rows):.2f} | {ratio:.3f} | "
                   + " | ".join(ends or ["-", "-"]) + " |")
    return "\n".join(out)


def decode_buckets(work):
    out = []
    for model_dir in sorted(glob.glob(os.path.join(work, "validation", "*"))):
        steps = decode_steps(model_dir)
        if steps:
            out.append(f"\n{os.path.basename(model_dir)}: decode steps by the bucket they ran at\n")
            out.append(table(steps, padding_rule(model_dir)))
    return "\n".join(out) if out else "decode buckets: no validation with decode steps"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(__doc__)
    print(decode_buckets(sys.argv[1]))


if __name__ == "__main__":
    main()
