#!/usr/bin/python3
"""Plots servesim_placement_watch's CSV: the decode step and the GEMM probe
over time, each probe coloured by where the threads were (placement.h, with the host-drift code),
and prints each placement's medians.

Usage: experiments/diagnostics/placement/plot.py WATCH.csv OUT.png
"""
import sys

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

COLOURS = {"near": "tab:blue", "far": "tab:orange", "unknown": "tab:gray"}


def main(csv_path, png_path):
    w = pd.read_csv(csv_path)
    if w.empty:
        sys.exit(f"{csv_path}: no probes")
    fig, (decode, gemm) = plt.subplots(2, 1, figsize=(9, 5.5), sharex=True)
    for placement, rows in w.groupby("placement"):
        c = COLOURS.get(placement, "black")
        decode.scatter(rows.elapsed_s, rows.decode_step_s * 1e3, s=8, color=c, label=f"threads {placement}")
        gemm.scatter(rows.elapsed_s, rows.gemm_flops_per_s / 1e9, s=8, color=c)
        print(f"{placement:8} {len(rows):4} probes: decode step median {rows.decode_step_s.median() * 1e3:.2f} ms, "
              f"GEMM median {rows.gemm_flops_per_s.median() / 1e9:.0f} GFLOP/s, core-to-core latency median "
              f"{rows.core_latency_before_ns.median():.0f} ns")
    decode.set_ylabel("decode step (ms)")
    decode.legend(loc="upper right")
    gemm.set_ylabel("GEMM probe (GFLOP/s)")
    gemm.set_xlabel("time (s)")
    decode.set_title("speed of this machine against where its threads were (near: shared L3; far: two CCDs)")
    fig.tight_layout()
    fig.savefig(png_path, dpi=110)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
