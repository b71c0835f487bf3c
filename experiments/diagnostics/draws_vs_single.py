#!/usr/bin/python3
"""Predict over jittered draws against one simulation, run by run.

For each study folder (run.py's summary.csv, from a run with
--predict-draws N > 1), compares predict mode's TTFT and TPOT P50/P90
errors as predicted (the medians over the draws) with those of the one
simulation without jitter (summary.csv's single_* columns, from the same
run and the same profile): mean and largest |error|, errors over 10%, and
in how many of the errors the draws came closer; and, from each point's
report_predict.json, how often the measured statistic fell inside the
draws' 10th-90th percentile band (80% if the draws spread as the real run
does). Prints a markdown table, one row per run and one for all of them.

Usage: experiments/diagnostics/draws_vs_single.py STUDY_DIR [STUDY_DIR ...]
"""
import csv
import json
import os
import statistics
import sys

ERRORS = ["ttft_p50", "ttft_p90", "tpot_p50", "tpot_p90"]


def errors(folder):
    with open(os.path.join(folder, "summary.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["mode"] == "predict"]
    if not rows or "single_ttft_p50_rel_error" not in rows[0]:
        sys.exit(f"{folder}: no single_* columns (a run without --predict-draws)")
    drawn = [abs(float(r[f"{e}_rel_error"])) for r in rows for e in ERRORS]
    single = [abs(float(r[f"single_{e}_rel_error"])) for r in rows for e in ERRORS]
    inside = []
    for r in rows:
        report = os.path.join(folder, f"{r['scheduler']}_{r['load']}", "report_predict.json")
        if not os.path.isfile(report):
            continue
        with open(report) as f:
            j = json.load(f)
        for e in ERRORS:
            metric, q = e.split("_")
            band, measured = j[f"{metric}_s"]["draws"], j[f"{metric}_s"]["measured"][q]
            inside.append(band["p10"][q] <= measured <= band["p90"][q])
    return drawn, single, inside


def line(name, drawn, single, inside):
    closer = sum(d < s for d, s in zip(drawn, single))
    band = f"{sum(inside)} of {len(inside)}" if inside else "-"
    return (f"| {name} | {len(drawn)} | {statistics.mean(drawn):.1%} | {max(drawn):.1%} | "
            f"{sum(d > 0.10 for d in drawn)} | {statistics.mean(single):.1%} | {max(single):.1%} | "
            f"{sum(s > 0.10 for s in single)} | {closer} of {len(drawn)} | {band} |")


def main(folders):
    print("| run | errors | draws: mean \\|error\\| | largest | over 10% | one simulation: mean \\|error\\| "
          "| largest | over 10% | draws closer | measured inside the P10-P90 band |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    totals = [], [], []
    for folder in folders:
        parts = errors(folder)
        for total, part in zip(totals, parts):
            total += part
        print(line(os.path.basename(os.path.abspath(folder)), *parts))
    if len(folders) > 1:
        print(line("all", *totals))


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
