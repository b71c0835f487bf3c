#!/usr/bin/python3
"""Prefill iterations by how many sequences they prefill.

The CUDA decoder runs every prefill chunk of an iteration in one attention
launch, while the calibration times one chunk per launch; a cost model
that sums the chunks' table times pays the launch's fixed cost once per
chunk (sim/cost/profile_model.h: a profile with attention_launches
"two_launches" pays it once). For each
model of a GPU run (experiments/gpu/run.sh's work folder, or
results.tar.gz unpacked) this joins every validation point's
iterations.csv (measured_s, predicted_s) with its measured run's
(prefill_sequences) and tabulates the iterations of kind prefill by their
number of sequences: how many, their median tokens, the median predicted /
measured, and the median of (predicted - measured) / (sequences - 1) /
layers, in microseconds, beside the profile's prefill table's smallest
time (one launch's fixed cost): a model that pays the launch once per
chunk shows an excess per extra sequence close to it. For a profile that
pays it per chunk, the last column is what paying it once would give:
the median of (predicted - (sequences - 1) x that time x layers) /
measured, an estimate that takes every chunk to have two or more tokens.

Usage: experiments/gpu/prefill_sequences.py WORK_DIR
"""
import csv
import glob
import json
import os
import statistics
import sys


def launch_cost(model_dir):
    """(the prefill table's smallest seconds, layers, whether it pays the launch once) of the profile, or None."""
    path = os.path.join(model_dir, "profile.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        p = json.load(f)
    seconds = [s for row in p["tables"]["prefill_attention"]["seconds"] for s in row]
    return min(seconds), int(p["model"]["num_hidden_layers"]), p.get("attention_launches") == "two_launches"


def prefills(model_dir):
    """[(sequences, tokens, measured_s, predicted_s)] of every point's prefill iterations."""
    rows = []
    for path in sorted(glob.glob(os.path.join(model_dir, "*", "iterations.csv"))):
        measured = os.path.join(os.path.dirname(path), "measured", "iterations.csv")
        if not os.path.exists(measured):
            continue
        with open(measured) as f:
            sequences = {r["index"]: int(r["prefill_sequences"]) for r in csv.DictReader(f)}
        with open(path) as f:
            for r in csv.DictReader(f):
                if r["kind"] == "prefill" and r["index"] in sequences:
                    rows.append((sequences[r["index"]], int(r["prefill_tokens"]), float(r["measured_s"]),
                                 float(r["predicted_s"])))
    return rows


def table(rows, layers, once_s=None):
    """once_s: the launch's seconds per layer to take off each extra sequence (None: no such column)."""
    by_count = {}
    for n, tokens, measured, predicted in rows:
        by_count.setdefault(n, []).append((tokens, measured, predicted))
    out = ["| sequences | iterations | tokens (median) | predicted / measured | "
           "excess per extra sequence and layer (us) | paid once |",
           "|---:|---:|---:|---:|---:|---:|"]
    for n in sorted(by_count):
        its = by_count[n]
        ratio = statistics.median(p / m for _, m, p in its)
        excess = (f"{1e6 * statistics.median((p - m) / (n - 1) / layers for _, m, p in its):.1f}"
                  if n > 1 and layers else "-")
        once = (f"{statistics.median((p - (n - 1) * once_s * layers) / m for _, m, p in its):.3f}"
                if once_s is not None and layers else "-")
        out.append(f"| {n} | {len(its)} | {statistics.median(t for t, _, _ in its):.0f} | {ratio:.3f} | {excess} | "
                   f"{once} |")
    return "\n".join(out)


def prefill_sequences(work):
    out = []
    for model_dir in sorted(glob.glob(os.path.join(work, "validation", "*"))):
        rows = prefills(model_dir)
        if not rows:
            continue
        cost = launch_cost(model_dir)
        layers = cost[1] if cost else 0
        head = f"\n{os.path.basename(model_dir)}: prefill iterations by their sequences"
        if cost:
            head += (f"; the prefill table's smallest time (one launch) {1e6 * cost[0]:.1f} us per layer, "
                     f"the profile {'pays it once' if cost[2] else 'pays it per chunk'}")
        once_s = cost[0] if cost and not cost[2] else None
        out += [head + "\n", table(rows, layers, once_s)]
    return "\n".join(out) if out else "prefill sequences: no validation with prefill iterations"


def main():
    if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
        sys.exit(__doc__)
    print(prefill_sequences(sys.argv[1]))


if __name__ == "__main__":
    main()
