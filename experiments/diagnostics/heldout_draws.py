#!/usr/bin/python3
"""Would predict over jittered draws have met the held-out suite's latency
target where its one simulation did not?

The held-out suite (experiments/heldout/run.py) predicts each workload from
one simulation (`--predict-draws 1`). With 40 requests a P50 or P90 is set
by one or two requests, and whether a request's last decode steps land
before or after the next burst's prefill is a knife edge, so one
simulation is one draw of the percentiles a run can have
(docs/validation.md, "Predict draws"). This re-predicts a committed suite
folder offline, without serving anything again: for every workload it
rebuilds the trace (workloads.py, deterministic per seed), rebuilds the
simulation from report_predict.json's config, checks that `servesim
simulate` reproduces the committed one-simulation prediction, then
simulates --draws more times with each iteration's cost times
exp(sigma z) and compares the medians over the draws, and the draws'
10th-90th percentile band, with the committed measured TTFT and TPOT P50
and P90.

sigma: `floor` (default) takes each workload's own noise floor
(iteration_mape.floor: the mean |measured / predicted / its rolling median
- 1| of that run's iterations) as the mean absolute deviation of the
jitter, sigma = floor * sqrt(pi / 2), the lognormal stand-in for
validate's resampled run noise; a number uses that sigma everywhere.

Prints a markdown table (one row per workload, then the counts) and,
with --csv, writes the rows.

Usage: experiments/diagnostics/heldout_draws.py [--servesim BIN] [--draws N]
       [--sigma floor|S] [--csv FILE] SUITE_DIR [SUITE_DIR ...]
"""
import argparse
import csv
import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "experiments", "heldout"))
import workloads  # noqa: E402

STATS = [("ttft", "p50"), ("ttft", "p90"), ("tpot", "p50"), ("tpot", "p90")]
TARGET = 0.10  # issue 32: P50/P90 TTFT and TPOT within 10%
REPRODUCE_TOLERANCE = 1e-6


def suite_profile(folder):
    """The suite's profile: its own profile.json, else metadata.json's --profile."""
    own = os.path.join(folder, "profile.json")
    if os.path.isfile(own):
        return own
    meta = os.path.join(folder, "metadata.json")
    if os.path.isfile(meta):
        with open(meta) as f:
            path = json.load(f).get("profile")
        if path:
            path = path if os.path.isabs(path) else os.path.join(ROOT, path)
            if os.path.isfile(path):
                return path
    sys.exit(f"{folder}: no profile.json and no metadata.json 'profile' that exists")


def simulate_flags(config, trace):
    """`servesim simulate` flags that rebuild the prediction of a validate report's config."""
    s, w = config["scheduler"], config["workload"]
    flags = ["--scheduler", s["policy"], "--max-num-batched-tokens", str(s["max_num_batched_tokens"]),
             "--num-gpu-blocks", str(s["num_gpu_blocks"]), "--max-model-len", str(s["max_model_len"]),
             "--block-size", str(s["block_size"]), "--max-num-seqs", str(s["max_num_seqs"]),
             "--seed", str(config["seed"])]
    if s.get("enable_prefix_caching"):
        flags.append("--enable-prefix-caching")
    if w["arrival"] == "closed":
        flags += ["--arrival", "closed", "--concurrency", str(w["concurrency"]), "--lengths-from-trace", trace,
                  "--trace-format", "csv", "--num-requests", str(w["num_requests"])]
    elif w["arrival"] == "trace":
        flags += ["--trace", trace, "--trace-format", "csv", "--rate-scale", repr(w["trace"]["rate_scale"])]
    else:
        raise ValueError(f"arrival '{w['arrival']}' is not one the held-out suite writes")
    return flags


def simulate(servesim, profile, flags, extra=()):
    cmd = [servesim, "simulate", "--profile", profile, "--json", "--quiet"] + flags + list(extra)
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"command failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr}")
    return json.loads(r.stdout)


def sigma_of(choice, report):
    if choice == "floor":
        floor = report["iteration_mape"].get("floor")
        if floor is None:
            return None
        return floor * math.sqrt(math.pi / 2)
    return float(choice)


def rel(predicted, measured):
    return predicted / measured - 1


def workload_row(servesim, profile, folder, name, w, draws, sigma_choice, scratch):
    with open(os.path.join(folder, name, "report_predict.json")) as f:
        report = json.load(f)
    trace = os.path.join(scratch, name + ".csv")
    workloads.write_trace(w, trace)
    flags = simulate_flags(report["config"], trace)
    single = simulate(servesim, profile, flags)
    for metric, q in STATS:
        committed = report[f"{metric}_s"]["predicted"][q]
        if abs(rel(single[f"{metric}_s"][q], committed)) > REPRODUCE_TOLERANCE:
            sys.exit(f"{folder}/{name}: simulate gives {metric} {q} {single[f'{metric}_s'][q]:.6g} s, the committed "
                     f"prediction {committed:.6g} s: not the same simulation (another build or profile?)")
    sigma = sigma_of(sigma_choice, report)
    if sigma is None:
        sys.exit(f"{folder}/{name}: the report has no noise floor; give --sigma")
    drawn = simulate(servesim, profile, flags, ["--draws", str(draws), "--cost-jitter", f"{sigma:.6g}"])
    row = {"suite": os.path.basename(os.path.normpath(folder)), "workload": name, "sigma": sigma}
    for metric, q in STATS:
        measured = report[f"{metric}_s"]["measured"][q]
        band = drawn["draws"][f"{metric}_s"]
        row[f"{metric}_{q}_single"] = rel(report[f"{metric}_s"]["predicted"][q], measured)
        row[f"{metric}_{q}_draws"] = rel(drawn[f"{metric}_s"][q], measured)
        row[f"{metric}_{q}_in_band"] = band["p10"][q] <= measured <= band["p90"][q]
    row["single_ok"] = all(abs(row[f"{m}_{q}_single"]) <= TARGET for m, q in STATS)
    row["draws_ok"] = all(abs(row[f"{m}_{q}_draws"]) <= TARGET for m, q in STATS)
    return row


def suite_rows(servesim, folder, draws, sigma_choice, scratch):
    with open(os.path.join(folder, "workloads.jsonl")) as f:
        drawn = [json.loads(line) for line in f if line.strip()]
    profile = suite_profile(folder)
    rows = []
    for w in drawn:
        if os.path.isfile(os.path.join(folder, w["name"], "report_predict.json")):
            rows.append(workload_row(servesim, profile, folder, w["name"], w, draws, sigma_choice, scratch))
    if not rows:
        sys.exit(f"{folder}: no workload folder with report_predict.json")
    return rows


def table(rows):
    def errs(r, kind):
        return " / ".join(f"{100 * r[f'{m}_{q}_{kind}']:+.1f}" for m, q in STATS)

    out = ["| suite | workload | sigma | single: TTFT P50 / P90, TPOT P50 / P90 (%) | draws' medians (%) | "
           "measured in the draws' P10-P90 band | within 10%: single / draws |",
           "| --- | --- | ---: | --- | --- | ---: | --- |"]
    for r in rows:
        band = sum(r[f"{m}_{q}_in_band"] for m, q in STATS)
        out.append(f"| {r['suite']} | {r['workload'][:9]} | {r['sigma']:.3f} | {errs(r, 'single')} | "
                   f"{errs(r, 'draws')} | {band} of 4 | {'yes' if r['single_ok'] else 'no'} / "
                   f"{'yes' if r['draws_ok'] else 'no'} |")
    single = [abs(r[f"{m}_{q}_single"]) for r in rows for m, q in STATS]
    drawn = [abs(r[f"{m}_{q}_draws"]) for r in rows for m, q in STATS]
    out.append("")
    out.append(f"{len(rows)} workloads: every P50/P90 within 10% at {sum(r['single_ok'] for r in rows)} (one "
               f"simulation) and {sum(r['draws_ok'] for r in rows)} (draws' medians); errors over 10%: "
               f"{sum(e > TARGET for e in single)} and {sum(e > TARGET for e in drawn)} of {len(single)}; mean "
               f"|error| {100 * sum(single) / len(single):.1f}% and {100 * sum(drawn) / len(drawn):.1f}%; the draws "
               f"closer in {sum(d < s for d, s in zip(drawn, single))}; measured inside the band in "
               f"{sum(r[f'{m}_{q}_in_band'] for r in rows for m, q in STATS)} of {len(single)}")
    return "\n".join(out)


def write_rows(path, rows):
    """The rows (dicts with the same keys) as a CSV with a header."""
    with open(path, "w", newline="") as f:
        c = csv.DictWriter(f, fieldnames=list(rows[0]))
        c.writeheader()
        c.writerows(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--draws", type=int, default=51)
    ap.add_argument("--sigma", default="floor", help="'floor' (each workload's noise floor) or a number in [0, 1]")
    ap.add_argument("--csv", help="write the rows here too")
    ap.add_argument("suites", nargs="+", metavar="SUITE_DIR")
    opts = ap.parse_args()
    if not 2 <= opts.draws <= 1000:
        ap.error("--draws must be in 2 .. 1000")
    if opts.sigma != "floor":
        try:
            if not 0 <= float(opts.sigma) <= 1:
                raise ValueError
        except ValueError:
            ap.error(f"--sigma must be 'floor' or a number in [0, 1] (got '{opts.sigma}')")
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        for folder in opts.suites:
            rows += suite_rows(opts.servesim, folder, opts.draws, opts.sigma, scratch)
    print(table(rows))
    if opts.csv:
        write_rows(opts.csv, rows)


if __name__ == "__main__":
    main()
