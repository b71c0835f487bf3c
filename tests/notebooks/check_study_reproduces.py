#!/usr/bin/python3
"""Re-runs a study into a scratch folder and compares its CSVs with the committed ones, byte for byte.

A difference means the simulator's predictions changed: re-run the study
(its run.py) and commit the new results with the change that caused them.
"""
import argparse
import filecmp
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
parser.add_argument("--study-args", nargs=argparse.REMAINDER, default=[],
                    help="arguments for the study after --servesim and --out (give it last)")
opts = parser.parse_args()

os.makedirs(opts.scratch, exist_ok=True)
subprocess.run([sys.executable, opts.study, "--servesim", opts.servesim, "--out", opts.scratch, *opts.study_args],
               check=True, stderr=subprocess.DEVNULL)
csvs = opts.files or sorted(f for f in os.listdir(opts.committed) if f.endswith(".csv"))
if not csvs:
    sys.exit(f"{opts.committed}: no committed CSV results")
stale = [f for f in csvs if not filecmp.cmp(os.path.join(opts.committed, f), os.path.join(opts.scratch, f), shallow=False)]
if stale:
    sys.exit(f"{', '.join(stale)} in {opts.committed} differ from a fresh run of {opts.study}; "
             f"re-run it and commit the results")
print(f"{len(csvs)} result files reproduce exactly")
