#!/usr/bin/python3
"""Draws a `servesim capacity --search` result: output tokens/s per GPU
against tokens/s per user (1 / TPOT P50 at capacity), one marker per
configuration, the TPOT Pareto front joined (search.csv's pareto_tpot), the
points that could not run listed under the figure.

Usage: /usr/bin/python3 scripts/plot_pareto.py DIR/search.csv OUT.png [--title TEXT]
(Debian's python3 with matplotlib; nothing is fitted or recomputed: every
number comes from the CSV.)"""
import argparse
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def label(row):
    q = "bf16" if row["quantization"] == "none" else row["quantization"]
    pp = f" PP{row['pipeline_parallel_size']}" if row["pipeline_parallel_size"] != "1" else ""
    return f"TP{row['tensor_parallel_size']}{pp} {q} {row['max_num_seqs']}/{row['max_num_batched_tokens']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("search_csv")
    ap.add_argument("out_png")
    ap.add_argument("--title", default="servesim capacity --search")
    args = ap.parse_args()
    with open(args.search_csv, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows or "pareto_tpot" not in rows[0]:
        sys.exit(f"{args.search_csv}: not a search.csv of `servesim capacity --search` (no pareto_tpot column)")
    ok = [r for r in rows if not r["error"]]
    failed = [r for r in rows if r["error"]]
    if not ok:
        sys.exit(f"{args.search_csv}: every point failed; nothing to draw")
    fig, ax = plt.subplots(figsize=(8, 5.5))
    # Configurations that predict the same point share one marker and one label.
    points = {}
    for r in ok:
        key = (1.0 / float(r["tpot_p50_s"]), float(r["output_tokens_per_s_per_gpu"]))
        points.setdefault(key, []).append(r)
    for (x, y), same in points.items():
        on = any(r["pareto_tpot"] == "1" for r in same)
        ax.scatter([x], [y], s=60 if on else 30, c="C1" if on else "C0", zorder=3)
        ax.annotate(" = ".join(label(r) for r in same), (x, y), textcoords="offset points", xytext=(5, 4),
                    fontsize=7)
    front = sorted((r for r in ok if r["pareto_tpot"] == "1"), key=lambda r: 1.0 / float(r["tpot_p50_s"]))
    ax.plot([1.0 / float(r["tpot_p50_s"]) for r in front], [float(r["output_tokens_per_s_per_gpu"]) for r in front],
            c="C1", lw=1, label="Pareto front (TPOT)")
    ax.set_xlabel("tokens/s per user (1 / TPOT P50 at capacity)")
    ax.set_ylabel("output tokens/s per GPU at capacity")
    ax.set_title(args.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    if failed:
        lines = [f"not run: {label(r)}: {r['error'][:110]}" for r in failed[:3]]
        if len(failed) > 3:
            lines.append(f"... and {len(failed) - 3} more (search.csv's error column)")
        fig.text(0.01, 0.01, "\n".join(lines), fontsize=6, va="bottom")
    fig.tight_layout(rect=(0, 0.025 * (min(len(failed), 4) + 1) if failed else 0, 1, 1))
    fig.savefig(args.out_png, dpi=110)
    print(f"wrote {args.out_png}: {len(ok)} points, {len(front)} on the front, {len(failed)} not run")


if __name__ == "__main__":
    main()
