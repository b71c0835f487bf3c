#!/usr/bin/python3
"""Prefills and mixed iterations by the cuBLASLt algorithm bucket of their tokens.

The CUDA backend runs a GEMM of T rows with the algorithm chosen for T's
bucket (1, 2, 4, multiples of 8 to 256, then four steps per octave: 320,
384, 448, 512, 640, ...; kernels/decoder/gemm_buckets.h), so an
iteration's time steps at each bucket's edge. For each model of a GPU run
(experiments/gpu/run.sh's work folder, or results.tar.gz unpacked) this
reads every validation point's iterations.csv (kind, prefill_tokens,
decode_tokens, measured_s, predicted_s) and tabulates the iterations that
are not plain decode steps (decode_buckets.py has those) per bucket of
their token count: how many, the median measured time, the median
predicted / measured, and that median in the bucket's lower and upper
half. A profile whose GEMM tables were timed at powers of two only shows
as a ratio that drops just past an edge (the bucket's algorithm, not the
one below it) and as a measured time that jumps there, up or down.

Usage: experiments/gpu/gemm_buckets.py WORK_DIR [--min-tokens N]
"""
import argparse
import csv
import glob
import os
import statistics

MIN_ITERATIONS = 3


def bucket(t):
    """The T a product of t rows runs with the algorithm of (kernels/decoder/gemm_buckets.h)."""
    if t <= 1:
        return 1
    if t <= 2:
        return 2
    if t <= 4:
        return 4
    if t <= 256:
        return (t + 7) // 8 * 8
    octave = 256
    while octave * 2 < t:
        octave *= 2
    step = octave // 4
    return (t + step - 1) // step * step


def bucket_bottom(top):
    """The smallest T of the bucket whose top is `top`."""
    t = top
    while t > 1 and bucket(t - 1) == top:
        t -= 1
    return t


def iterations(model_dir):
    """[(tokens, measured_s, predicted_s)] of every point's prefill and mixed iterations."""
    rows = []
    for path in sorted(glob.glob(os.path.join(model_dir, "*", "iterations.csv"))):
        with open(path) as f:
            reader = csv.DictReader(f)
            if not {"prefill_tokens", "decode_tokens"} <= set(reader.fieldnames or []):
                continue  # a run older than its token columns
            for r in reader:
                if r["kind"] != "decode":
                    tokens = int(r["prefill_tokens"]) + int(r["decode_tokens"])
                    rows.append((tokens, float(r["measured_s"]), float(r["predicted_s"])))
    return rows


def median_ratio(rows):
    return f"{statistics.median(p / m for _, m, p in rows):.3f}" if rows else "-"


def table(rows, min_tokens=1):
    by_bucket = {}
    for t, measured, predicted in rows:
        if t >= min_tokens:
            by_bucket.setdefault(bucket(t), []).append((t, measured, predicted))
    out = ["| bucket (tokens) | iterations | measured (ms) | predicted / measured | lower half | upper half |",
           "|---|---:|---:|---:|---:|---:|"]
    for top in sorted(by_bucket):
        its = by_bucket[top]
        if len(its) < MIN_ITERATIONS:
            continue
        lo = bucket_bottom(top)
        middle = (lo + top) / 2
        name = str(top) if lo == top else f"{lo}-{top}"
        lower = [r for r in its if r[0] <= middle]
        upper = [r for r in its if r[0] > middle]
        out.append(f"| {name} | {len(its)} | {1e3 * statistics.median(m for _, m, _ in its):.2f} | "
                   f"{median_ratio(its)} | {median_ratio(lower)} | {median_ratio(upper)} |")
    return "\n".join(out)


def gemm_buckets(work, min_tokens=1):
    out = []
    for model_dir in sorted(glob.glob(os.path.join(work, "validation", "*"))):
        rows = iterations(model_dir)
        if rows:
            out.append(f"\n{os.path.basename(model_dir)}: prefill and mixed iterations by the GEMM algorithm "
                       f"bucket of their tokens ({MIN_ITERATIONS} or more iterations)\n")
            out.append(table(rows, min_tokens))
    return "\n".join(out) if out else "GEMM buckets: no validation with prefill or mixed iterations"


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", help="experiments/gpu/run.sh's work folder (with validation/<model>/)")
    parser.add_argument("--min-tokens", type=int, default=1, help="leave out iterations of fewer tokens")
    opts = parser.parse_args()
    if not os.path.isdir(opts.work):
        parser.error(f"{opts.work}: not a folder")
    if opts.min_tokens < 1:
        parser.error("--min-tokens must be >= 1")
    print(gemm_buckets(opts.work, opts.min_tokens))


if __name__ == "__main__":
    main()
