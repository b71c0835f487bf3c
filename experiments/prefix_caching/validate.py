#!/usr/bin/python3
"""Prefix caching against real runs: `servesim validate` of workloads whose
prompts share prefixes, continuous and chunked, with the prefix cache on.

Two workloads:
  shared_prefix  Poisson arrivals; each prompt one of 4 shared prefixes,
                 then its own tail (--shared-prefix-groups/--shared-prefix-len)
  mooncake       the first requests of the Mooncake conversation trace,
                 replayed at --mooncake-block-tokens tokens per hash id (its
                 sharing at this machine's size) and --rate-scale

Each point is gated as the CPU validation study gates (experiments/drift_gate.py):
with --host-drift interleave the profile's whole-model factors are timed again
all through each run and --max-drift reruns a point whose level moved more,
or that ran in a placement of the threads it was not costed in; --max-floor
reruns a point whose own noise floor is above it; --attempts at most. The
calibration is redone (--calibration-attempts) when fewer than 85% of its
drift probes saw one placement, as the CPU study does. Writes summary.csv
(a replay and a predict row a point, with the hit rate), attempts.csv, one folder per point and metadata.json into --out.

Usage: experiments/prefix_caching/validate.py [--device cpu|cuda] [--model M] [--profile P | calibrates]
       [--host-drift off|report|interleave] [--max-drift F] [--max-floor F] [--attempts N]
       [--calibration-attempts N] [--out DIR]
"""
import argparse
import csv
import datetime
import importlib.util
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "experiments"))
import drift_gate  # noqa: E402
import provenance  # noqa: E402

_spec = importlib.util.spec_from_file_location("validation_cpu_run", os.path.join(ROOT, "experiments/validation_cpu/run.py"))
validation_cpu = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(validation_cpu)

TRACE = os.path.join(ROOT, "data", "traces", "mooncake_conversation.jsonl")

# Per device: the workloads' sizes. CPU: small-110m (1024 positions); CUDA:
# llama-3.1-8b, prompts within the GPU calibration's 4096 positions.
PRESETS = {
    "cpu": {
        "model": "small-110m",
        "profile": None,  # calibrated first: a profile is a property of this machine now
        "shared_prefix": ["--arrival", "poisson", "--rate", "2.5", "--num-requests", "64",
                          "--shared-prefix-groups", "4", "--shared-prefix-len", "256",
                          "--prompt-len", "uniform:16:128", "--output-len", "uniform:16:64"],
        "mooncake": ["--trace", TRACE, "--trace-format", "mooncake", "--mooncake-block-tokens", "16",
                     "--max-requests", "200", "--rate-scale", "0.7"],
        "validate_args": [],
    },
    "cuda": {
        "model": "llama-3.1-8b",
        "profile": None,
        "shared_prefix": ["--arrival", "poisson", "--rate", "20", "--num-requests", "300",
                          "--shared-prefix-groups", "8", "--shared-prefix-len", "1536",
                          "--prompt-len", "uniform:64:512", "--output-len", "uniform:16:128"],
        "mooncake": ["--trace", TRACE, "--trace-format", "mooncake", "--mooncake-block-tokens", "32",
                     "--max-requests", "300", "--rate-scale", "4"],
        "validate_args": ["--kv-cache-memory", "24GiB", "--max-num-seqs", "256", "--max-num-batched-tokens", "8192"],
    },
}
SCHEDULERS = ["continuous", "chunked"]


def hit_rate(point):
    with open(os.path.join(point, "measured", "summary.json")) as f:
        return json.load(f)["prefix_cache"]["hit_rate"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/prefix_caching/validation_cpu"))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model")
    ap.add_argument("--profile", help="a profile of --model on --device (default: the preset's, or calibrate one)")
    ap.add_argument("--calibrate-args", default="", help="extra flags for `servesim calibrate`")
    ap.add_argument("--host-drift", choices=["off", "report", "interleave"], default="off",
                    help="validate's --host-drift (and calibrate's, unless off), as in experiments/validation_cpu/run.py")
    ap.add_argument("--max-drift", type=float, default=0.0,
                    help="rerun a point whose drift (experiments/drift_gate.py) is above this; needs --host-drift")
    ap.add_argument("--calibration-attempts", type=int, default=1,
                    help="calibrate again (at most this many times) while under 85%% of the drift probes saw one "
                         "placement; needs --host-drift")
    ap.add_argument("--max-floor", type=float, default=0.0)
    ap.add_argument("--attempts", type=int, default=3)
    ap.add_argument("--predict-draws", type=int, default=51)
    ap.add_argument("--workloads", default="shared_prefix,mooncake")
    opts = ap.parse_args()
    if opts.max_drift > 0 and opts.host_drift == "off":
        ap.error("--max-drift needs --host-drift report or interleave")
    preset = PRESETS["cuda" if opts.device.startswith("cuda") else "cpu"]
    model = opts.model or preset["model"]
    os.makedirs(opts.out, exist_ok=True)

    profile = opts.profile or preset["profile"]
    if not profile or not os.path.exists(profile):
        profile = os.path.join(opts.out, "profile.json")
        for _ in range(max(1, opts.calibration_attempts)):
            validation_cpu.sh([opts.servesim, "calibrate", "--device", opts.device, "--model", model, "--out",
                               profile] + (["--host-drift"] if opts.host_drift != "off" else [])
                              + opts.calibrate_args.split())
            share = validation_cpu.placement_share(profile)
            if share is None:
                break
            print(f"calibration: {share:.0%} of the drift probes in one placement", file=sys.stderr)
            if share >= 0.85:
                break

    def runner(workload, scheduler):
        return lambda out: validation_cpu.sh(
            [opts.servesim, "validate", "--device", opts.device, "--model", model, "--profile", profile,
             "--scheduler", scheduler, "--seed", "1", "--quiet", "--predict-draws", str(opts.predict_draws),
             "--host-drift", opts.host_drift,
             "--out", out] + preset[workload] + preset["validate_args"])

    rows, attempts = [], []
    for workload in opts.workloads.split(","):
        for scheduler in SCHEDULERS:
            point = os.path.join(opts.out, f"{workload}_{scheduler}")
            attempt, score = drift_gate.validate_gated(runner(workload, scheduler), point, opts.max_drift, opts.attempts,
                                                       attempts, max_floor=opts.max_floor)
            for row in validation_cpu.summary_rows(point, scheduler, workload, "", "", attempt, score):
                row["hit_rate"] = hit_rate(point)
                rows.append(row)
            validation_cpu.write_summary(opts.out, rows)

    if attempts and (opts.max_drift > 0 or opts.max_floor > 0):
        with open(os.path.join(opts.out, "attempts.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(attempts[0]))
            w.writeheader()
            w.writerows(attempts)

    meta = {"command": "experiments/prefix_caching/validate.py " + " ".join(sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": provenance.commit(), "machine": provenance.machine(),
            "device": opts.device, "model": model, "profile": os.path.relpath(profile, ROOT),
            "workloads": {w: [x.replace(ROOT + "/", "") for x in preset[w]] for w in opts.workloads.split(",")}, "schedulers": SCHEDULERS,
            "host_drift": opts.host_drift, "max_drift": opts.max_drift,
            "calibration_attempts": opts.calibration_attempts, "max_floor": opts.max_floor, "attempts": opts.attempts, "predict_draws": opts.predict_draws}
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
