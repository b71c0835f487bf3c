#!/usr/bin/python3
"""What costing each iteration in its placement changes (`validate
--host-drift interleave`; `--placement apply` before it): per point of a
study, the iteration MAPE and mean bias with the profile's placement ratios
(as validate costed them) and without them (each cost divided back by its
ratio), from the points' iterations.csv.

Usage: experiments/diagnostics/placement/without_ratios.py STUDY_DIR PROFILE.json
(STUDY_DIR holds POINT/iterations.csv, as run.py writes them)
"""
import json
import os
import sys

import numpy as np
import pandas as pd


def ratio(row, r):
    """As placement_ratios.h (with the host-drift code) has it: by sequences
    for a decode-only iteration, by tokens otherwise; linear in log x, the
    end values beyond."""
    if row.placement != r["other"]:
        return 1.0
    if row.prefill_tokens == 0:
        xs, ys, x = r["decode_batch"], r["decode_ratio"], row.sequences
    else:
        xs, ys, x = r["prefill_tokens"], r["prefill_ratio"], row.prefill_tokens + row.decode_tokens
    return float(np.interp(np.log(x), np.log(xs), ys))


def main(study, profile):
    with open(profile) as f:
        r = json.load(f).get("placement_ratios")
    if not r:
        sys.exit(f"{profile}: no placement_ratios")
    print("| point | iterations in the other placement | MAPE (bias) with the ratios | without |")
    print("| --- | ---: | ---: | ---: |")
    for point in sorted(os.listdir(study)):
        path = os.path.join(study, point, "iterations.csv")
        if "." in point or not os.path.isfile(path):
            continue
        it = pd.read_csv(path)
        if "placement" not in it:
            continue
        ratios = it.apply(lambda row: ratio(row, r), axis=1)
        with_ratios = it.predicted_s / it.measured_s - 1
        without = it.predicted_s / ratios / it.measured_s - 1
        print(f"| {point} | {np.mean(it.placement == r['other']):.0%} "
              f"| {np.mean(abs(with_ratios)):.1%} ({np.mean(with_ratios):+.1%}) "
              f"| {np.mean(abs(without)):.1%} ({np.mean(without):+.1%}) |")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
