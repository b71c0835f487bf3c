#!/usr/bin/python3
"""Re-runs a study into a scratch folder and compares its CSVs with the committed ones, byte for byte.

A difference means the simulator's predictions changed: re-run the study
(its run.py) and commit the new results with the change that caused them.
"""
import argparse
import csv
import filecmp
import math
import os
import subprocess
import sys

parser = argparse.ArgumentParser()
parser.add_argument("--servesim", required=True)
parser.add_argument("--study", required=True)
parser.add_argument("--committed", required=True)
parser.add_argument("--scratch", required=True)
parser.add_argument("--files", nargs="*", help="the CSVs to compare (default: every committed CSV); measured "
                                               "results cannot reproduce and are left out this way")
parser.add_argument("--rel-tol", type=float, default=0.0,
                    help="compare numbers within this relative tolerance instead of byte for byte (results that "
                         "go through Eigen or libm may differ in the last bits between optimisation levels)")
parser.add_argument("--study-args", nargs=argparse.REMAINDER, default=[],
                    help="arguments for the study after --servesim and --out (give it last)")
opts = parser.parse_args()

os.makedirs(opts.scratch, exist_ok=True)
subprocess.run([sys.executable, opts.study, "--servesim", opts.servesim, "--out", opts.scratch, *opts.study_args],
               check=True, stderr=subprocess.DEVNULL)
csvs = opts.files or sorted(f for f in os.listdir(opts.committed) if f.endswith(".csv"))
if not csvs:
    sys.exit(f"{opts.committed}: no committed CSV results")


def same_within(a_path, b_path, rel_tol):
    """Same rows and columns; text cells equal, numbers within rel_tol."""
    with open(a_path) as fa, open(b_path) as fb:
        a, b = list(csv.reader(fa)), list(csv.reader(fb))
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        if len(ra) != len(rb):
            return False
        for x, y in zip(ra, rb):
            if x == y:
                continue
            try:
                fx, fy = float(x), float(y)
            except ValueError:
                return False
            if not math.isclose(fx, fy, rel_tol=rel_tol, abs_tol=0.0):
                return False
    return True


def same(name):
    a, b = os.path.join(opts.committed, name), os.path.join(opts.scratch, name)
    return same_within(a, b, opts.rel_tol) if opts.rel_tol > 0 else filecmp.cmp(a, b, shallow=False)


stale = [f for f in csvs if not same(f)]
if stale:
    sys.exit(f"{', '.join(stale)} in {opts.committed} differ from a fresh run of {opts.study}; "
             f"re-run it and commit the results")
print(f"{len(csvs)} result files reproduce " + (f"within {opts.rel_tol:g}" if opts.rel_tol > 0 else "exactly"))
