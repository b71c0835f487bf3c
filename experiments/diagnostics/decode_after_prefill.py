#!/usr/bin/python3
"""Predicted / measured time of decode steps by how many decode steps came
since the last iteration with a prefill, from validation iterations.csv files.

Usage: experiments/diagnostics/decode_after_prefill.py ITERATIONS_CSV [...]

Each file is one `servesim validate` run's iterations.csv (execution order).
Prints, per file, the median ratio of decode steps of 1 sequence and of
2 or more, in the placement most of them ran in, bucketed by the number of
decode steps since the last prefill or mixed iteration (1 = the first step
after it). A ratio that grows with the bucket means the first steps after
a prefill run slower than the steady ones, and a calibration that times a
few steps after other work measures the slower ones.
"""
import sys

import pandas as pd

BUCKETS = [0, 1, 3, 10, 30, 100_000]
LABELS = ["1", "2-3", "4-10", "11-30", "31+"]


def steps_since_prefill(kinds):
    since, k = [], 0
    for kind in kinds:
        k = 0 if kind != "decode" else k + 1
        since.append(k)
    return since


def main(paths):
    rows = []
    for path in paths:
        d = pd.read_csv(path)
        d["since"] = steps_since_prefill(d["kind"])
        d["ratio"] = d["predicted_s"] / d["measured_s"]
        d = d[d["kind"] == "decode"]
        if "placement" in d and d["placement"].notna().any():
            d = d[d["placement"] == d["placement"].mode()[0]]
        d = d.assign(bucket=pd.cut(d["since"], BUCKETS, labels=LABELS),
                     batch=["1 sequence" if s == 1 else "2+ sequences" for s in d["sequences"]])
        for (batch, bucket), g in d.groupby(["batch", "bucket"], observed=True):
            rows.append({"file": path, "batch": batch, "steps since prefill": bucket,
                         "count": len(g), "median ratio": round(g["ratio"].median(), 3)})
    table = pd.DataFrame(rows)
    table["steps since prefill"] = pd.Categorical(table["steps since prefill"], LABELS, ordered=True)
    print(table.pivot_table(index=["file", "batch"], columns="steps since prefill", values="median ratio",
                            observed=True).to_string())


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
