#!/usr/bin/python3
"""How much do predicted TTFT and TPOT percentiles move when every cost moves a little?

validate's predict mode simulates the workload once, from the workload's
arrival times, with the profile's costs. Near saturation and overloaded, a
small change in every iteration's cost changes which arrivals share a
prefill iteration and how large the decode batches grow, and the
percentiles of 40-48 requests follow. This script scales a profile's two
in-situ factors (f and g, sim/cost/profile_model.h: every iteration's cost
scales with them) by 1 + eps for each eps and runs `servesim simulate` on
the study's workload (small-110m, prompts uniform 16-256, outputs uniform
16-128, seed 1, the validate runs' 910 KV blocks and 1024-token context),
printing TTFT P50/P90 and TPOT P50/P90 per eps and point, and each
percentile's range over the eps as a share of its value at eps = 0.

Usage: experiments/diagnostics/predict_sensitivity.py PROFILE [--servesim PATH] [--eps LIST]
"""
import argparse
import copy
import json
import os
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
POINTS = [("continuous", "near-saturation", 2.5, 40), ("continuous", "overloaded", 5.0, 48),
          ("chunked", "near-saturation", 2.5, 40), ("chunked", "overloaded", 5.0, 48)]
STATS = [("ttft_s", "p50"), ("ttft_s", "p90"), ("tpot_s", "p50"), ("tpot_s", "p90")]


def simulate(servesim, profile_path, scheduler, rate, n):
    cmd = [servesim, "simulate", "--profile", profile_path, "--scheduler", scheduler, "--arrival", "poisson",
           "--rate", str(rate), "--num-requests", str(n), "--seed", "1", "--prompt-len", "uniform:16:256",
           "--output-len", "uniform:16:128", "--max-model-len", "1024", "--num-gpu-blocks", "910", "--json",
           "--quiet"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.strip()}")
    return json.loads(r.stdout)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("profile")
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--eps", default="-0.02,-0.01,-0.005,0,0.005,0.01,0.02",
                    help="comma-separated scale changes of every cost (0 must be among them)")
    a = ap.parse_args()
    eps_list = [float(e) for e in a.eps.split(",")]
    if 0.0 not in eps_list:
        raise SystemExit("--eps must include 0 (the unscaled profile)")
    with open(a.profile) as f:
        base = json.load(f)
    print("| point | cost scale | " + " | ".join(f"{m.split('_')[0].upper()} {q} (ms)" for m, q in STATS) + " |")
    print("| --- | ---: |" + " ---: |" * len(STATS))
    spans = []
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "scaled.json")
        for scheduler, load, rate, n in POINTS:
            values = {}
            for eps in eps_list:
                p = copy.deepcopy(base)
                for table in ("gemm_in_situ", "decode_in_situ"):
                    p["tables"][table]["factor"] = [x * (1 + eps) for x in p["tables"][table]["factor"]]
                with open(path, "w") as f:
                    json.dump(p, f)
                s = simulate(a.servesim, path, scheduler, rate, n)
                values[eps] = [s[m][q] for m, q in STATS]
                cells = " | ".join(f"{v * 1e3:.1f}" for v in values[eps])
                print(f"| {scheduler} {load} | {1 + eps:.3f} | {cells} |")
            spans.append((f"{scheduler} {load}", [
                (max(values[e][i] for e in eps_list) - min(values[e][i] for e in eps_list)) / values[0.0][i]
                for i in range(len(STATS))]))
    print()
    print(f"Range over cost scales {min(eps_list):+.1%} .. {max(eps_list):+.1%}, as a share of the unscaled value:")
    print()
    print("| point | " + " | ".join(f"{m.split('_')[0].upper()} {q}" for m, q in STATS) + " |")
    print("| --- |" + " ---: |" * len(STATS))
    for name, span in spans:
        print(f"| {name} | " + " | ".join(f"{x:.1%}" for x in span) + " |")


if __name__ == "__main__":
    main()
