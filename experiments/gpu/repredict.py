#!/usr/bin/python3
"""Predict a GPU run's validation points again, offline, with a changed profile.

For each model of a GPU run (experiments/gpu/run.sh's work folder, or
results.tar.gz unpacked) and each of its validation points, this runs
`servesim validate --measured POINT/measured --profile P` with the point's
scheduler settings (from its report_predict.json) twice: with the model's
profile.json as it is, and with top-level fields of it set by --set
(JSON values), e.g. --set attention_launches='"two_launches"'. No GPU is
needed: the same requests at the same times are simulated with each
profile and compared with the measured run. Prints a markdown table of the
TTFT and TPOT P50/P90 errors (predicted / measured - 1) of both.

Usage: experiments/gpu/repredict.py WORK_DIR --set FIELD=JSON [--set ...]
       [--servesim BIN] [--model NAME]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SERVESIM = os.path.join(HERE, "..", "..", "build", "release", "cli", "servesim")


def parse_set(text):
    field, sep, value = text.partition("=")
    if not sep or not field:
        raise argparse.ArgumentTypeError(f"--set {text}: expected FIELD=JSON")
    try:
        return field, json.loads(value)
    except json.JSONDecodeError as e:
        raise argparse.ArgumentTypeError(f"--set {text}: the value is not JSON ({e})")


def scheduler_flags(report):
    s = report["config"]["scheduler"]
    return ["--scheduler", s["policy"], "--max-num-seqs", str(s["max_num_seqs"]),
            "--max-num-batched-tokens", str(s["max_num_batched_tokens"]),
            "--num-gpu-blocks", str(s["num_gpu_blocks"]), "--block-size", str(s["block_size"])]


def errors(servesim, point, profile, out):
    with open(os.path.join(point, "report_predict.json")) as f:
        flags = scheduler_flags(json.load(f))
    done = subprocess.run([servesim, "validate", "--measured", os.path.join(point, "measured"), "--profile", profile,
                           "--out", out, "--quiet", "--json"] + flags, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"servesim validate --measured {point}: {done.stderr.strip()}")
    report = json.loads(done.stdout)
    return {(m, p): report[m]["rel_error"][p] for m in ("ttft_s", "tpot_s") for p in ("p50", "p90")}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("work", help="experiments/gpu/run.sh's work folder (with validation/<model>/)")
    parser.add_argument("--set", dest="fields", type=parse_set, action="append", required=True,
                        help="FIELD=JSON: a top-level profile field and its value (repeatable)")
    parser.add_argument("--servesim", default=DEFAULT_SERVESIM)
    parser.add_argument("--model", help="only this model's folder")
    opts = parser.parse_args()
    if not os.path.isdir(os.path.join(opts.work, "validation")):
        parser.error(f"{opts.work}: no validation/ folder")
    if not os.access(opts.servesim, os.X_OK):
        parser.error(f"{opts.servesim}: not an executable (build servesim or give --servesim)")
    changed = ", ".join(f"{k} = {json.dumps(v)}" for k, v in opts.fields)
    print(f"| model | point | TTFT P50 / P90, as is | with {changed} | TPOT P50 / P90, as is | with the change |")
    print("|---|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for model_dir in sorted(glob.glob(os.path.join(opts.work, "validation", "*"))):
            name = os.path.basename(model_dir)
            profile = os.path.join(model_dir, "profile.json")
            if (opts.model and name != opts.model) or not os.path.exists(profile):
                continue
            with open(profile) as f:
                p = json.load(f)
            p.update(dict(opts.fields))
            changed_profile = os.path.join(tmp, f"{name}.json")
            with open(changed_profile, "w") as f:
                json.dump(p, f)
            for point in sorted(glob.glob(os.path.join(model_dir, "*", "report_predict.json"))):
                point = os.path.dirname(point)
                before = errors(opts.servesim, point, profile, os.path.join(tmp, "before"))
                after = errors(opts.servesim, point, changed_profile, os.path.join(tmp, "after"))

                def pair(e, metric):
                    return f"{100 * e[(metric, 'p50')]:+.1f}% / {100 * e[(metric, 'p90')]:+.1f}%"
                print(f"| {name} | {os.path.basename(point)} | {pair(before, 'ttft_s')} | {pair(after, 'ttft_s')} | "
                      f"{pair(before, 'tpot_s')} | {pair(after, 'tpot_s')} |")


if __name__ == "__main__":
    main()
