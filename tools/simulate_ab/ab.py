#!/usr/bin/python3
"""Wall time of `servesim simulate -q ARGS` for two or more builds, side by
side: the builds take turns, run after run, so a slow spell of a shared VM
falls on all of them alike. Prints each build's median and fastest run in
ms. With `--out X` among ARGS, each run writes into a fresh scratch folder
(deleted afterwards) in place of X.

Usage: /usr/bin/python3 tools/simulate_ab/ab.py RUNS SERVESIM [SERVESIM ...] -- ARGS
"""
import shutil
import statistics
import subprocess
import sys
import tempfile
import time


def main():
    if "--" not in sys.argv or len(sys.argv) < 4:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    try:
        runs = int(sys.argv[1])
    except ValueError:
        sys.exit(f"ab: RUNS must be a whole number (got '{sys.argv[1]}')")
    builds, args = sys.argv[2:split], sys.argv[split + 1:]
    if runs < 1 or not builds:
        sys.exit(__doc__)
    walls = {b: [] for b in builds}
    for _ in range(runs):
        for build in builds:
            run_args = list(args)
            scratch = None
            if "--out" in run_args:
                scratch = tempfile.mkdtemp(prefix="servesim_ab_")
                run_args[run_args.index("--out") + 1] = scratch
            start = time.perf_counter()
            p = subprocess.run([build, "simulate", "-q", *run_args], stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True)
            walls[build].append((time.perf_counter() - start) * 1000)
            if scratch:
                shutil.rmtree(scratch, ignore_errors=True)
            if p.returncode != 0:
                sys.exit(f"ab: {build} simulate failed ({p.returncode}): {p.stderr[-1000:]}")
    for build in builds:
        print(f"{build}: median {statistics.median(walls[build]):.1f} ms, fastest {min(walls[build]):.1f} ms")


if __name__ == "__main__":
    main()
