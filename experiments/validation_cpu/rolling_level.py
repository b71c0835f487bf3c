#!/usr/bin/python3
"""How much of a point's iteration error is a level that moves during the run?

For each validate output folder (its iterations.csv), prints the iteration
MAPE as reported, and the MAPE after dividing every prediction by the
rolling median of predicted / measured over the WINDOW iterations around it
(default 51): what the error would be if the cost model knew the machine's
speed at every moment of the run and nothing else changed. A large drop
says the remaining error is the machine drifting within the run; a small
one says it is iteration-to-iteration noise or the model's shape.

Usage: experiments/validation_cpu/rolling_level.py [--window N] POINT_DIR [POINT_DIR ...]
"""
import argparse
import csv
import os
import statistics


def mape(pairs):
    return statistics.mean(abs(p / m - 1) for p, m in pairs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--window", type=int, default=51, help="iterations in the rolling median (odd)")
    ap.add_argument("points", nargs="+")
    a = ap.parse_args()
    half = a.window // 2
    print("| point | iterations | MAPE | MAPE with the rolling level | rolling level min .. max |")
    print("| --- | ---: | ---: | ---: | --- |")
    for point in a.points:
        with open(os.path.join(point, "iterations.csv")) as f:
            rows = [(float(r["predicted_s"]), float(r["measured_s"])) for r in csv.DictReader(f)]
        ratios = [p / m for p, m in rows]
        levels = [statistics.median(ratios[max(0, i - half):i + half + 1]) for i in range(len(rows))]
        levelled = [(p / lv, m) for (p, m), lv in zip(rows, levels)]
        name = os.path.basename(os.path.normpath(point))
        print(f"| {name} | {len(rows)} | {mape(rows):.1%} | {mape(levelled):.1%} | "
              f"{min(levels):.3f} .. {max(levels):.3f} |")


if __name__ == "__main__":
    main()
