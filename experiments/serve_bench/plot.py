#!/usr/bin/python3
"""The serve study's per-request TPOT, one row per load: on the left the
prediction (a simulation of the same requests at the same times) against
the client's measurement; on the right the same requests on the server's
own steps, each step at its predicted cost (validate --measured
--iteration-log), against the server's measurement. Points off the
diagonal on the left but on it on the right missed because the simulated
schedule diverged, not because a step was mis-costed.

Usage: experiments/serve_bench/plot.py [--results DIR] [--out PNG]
"""
import argparse
import csv
import os

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LOADS = ["light", "near-saturation"]


def rows(path):
    with open(path) as f:
        return list(csv.DictReader(f))


def panel(ax, measured, predicted, title, ylabel):
    ms = [x * 1e3 for x in measured]
    ps = [x * 1e3 for x in predicted]
    top = max(ms + ps) * 1.05
    ax.plot([0, top], [0, top], color="black", linewidth=0.8)
    ax.fill_between([0, top], [0, top * 0.9], [0, top * 1.1], color="grey", alpha=0.2, label="±10%")
    ax.scatter(ms, ps, s=14)
    ax.set_xlim(0, top)
    ax.set_ylim(0, top)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("measured TPOT (ms)")
    ax.set_ylabel(ylabel)
    ax.legend(loc="upper left", fontsize=8)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--results", default=os.path.join(ROOT, "experiments/results/serve_bench"))
    ap.add_argument("--out", help="default: RESULTS/tpot_per_request.png")
    a = ap.parse_args()
    fig, axes = plt.subplots(len(LOADS), 2, figsize=(9, 4.3 * len(LOADS)))
    for row, load in zip(axes, LOADS):
        folder = os.path.join(a.results, load, "validate")
        client = [r for r in rows(os.path.join(folder, "requests.csv")) if r["measured_tpot_s"] and r["predicted_tpot_s"]]
        panel(row[0], [float(r["measured_tpot_s"]) for r in client], [float(r["predicted_tpot_s"]) for r in client],
              f"{load}: prediction vs the client", "predicted TPOT (ms)")
        server = rows(os.path.join(folder, "server_requests.csv"))
        panel(row[1], [float(r["measured_tpot_s"]) for r in server], [float(r["replayed_tpot_s"]) for r in server],
              f"{load}: the server's steps at predicted cost vs the server", "replayed TPOT (ms)")
    fig.tight_layout()
    out = a.out or os.path.join(a.results, "tpot_per_request.png")
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main()
