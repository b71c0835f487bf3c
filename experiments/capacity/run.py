#!/usr/bin/python3
"""A capacity study a user would run (`servesim capacity`, the roofline with its default
efficiencies and the h200 preset's analytic nvlink4 all-reduce; nothing measured, nothing
fitted): Llama-3.1-70B on H200s serving a chat workload (prompt and output lengths resampled
from the Azure 2023 conversation trace) within TTFT <= 1 s and TPOT <= 50 ms for 99% of
requests. Which tensor-parallel degree, precision (bf16 or fp8 weights) and max-num-seqs give
the most per GPU, and how many H200s serve 100 req/s?

Writes into --out:
  search.csv      `servesim capacity --search` over TP {1, 2, 4, 8} x --quantization {none (bf16), fp8} x
                  --max-num-seqs {64, 256} (token budget: the chunked default), as servesim writes it: each
                  point's highest rate within the SLOs (median of 3 seeds, their range), per GPU, output
                  tokens/s per GPU and TTFT/TPOT at that rate, the SLO that binds, the Pareto fronts; TP 1 in
                  bf16 does not fit one H200 and is kept as its error row
  rate_vs_tp.csv  per TP degree and precision, the better max-num-seqs: capacity, capacity per GPU (and over the
                  study's best), and the replicas and GPUs that 100 req/s would take (ceil(100 / capacity))
  fleet.csv       the configuration with the most req/s per GPU, `servesim capacity --target-rate 100
                  --gpu-hour-price 3.5`: replicas, GPUs, cost per hour and per million output tokens (the price is
                  an illustrative assumption, not a quote)
  fleet.json      the same with that run's capacity, spread, limit and latencies at capacity
  metadata.json   the commit, the machine, the command, the workload's source, the run time

Usage: experiments/capacity/run.py [--servesim BIN] [--out DIR] [--scratch DIR]
(about 30 s on a 2-core VM)
"""
import argparse
import csv
import datetime
import json
import math
import os
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import provenance  # noqa: E402

MODEL = "llama-3.1-70b"
HARDWARE = "h200"
TRACE = "data/traces/azure_conv_2023.csv"  # relative to ROOT: servesim runs there, so its JSON names it so
FALLBACK_LENGTHS = ["--prompt-len", "lognormal:1024:1.0:16:8192", "--output-len", "lognormal:256:1.0:1:2048"]
SLOS = ["--slo-ttft", "1s", "--slo-tpot", "50ms", "--slo-attainment", "0.99"]
# 6000 requests: at ~10 req/s ten minutes of simulated arrivals, so the 1% of misses the SLO allows
# is 60 requests, not a handful; the seeds' spread is the noise that is left.
SEARCH = ["--num-requests", "6000", "--seeds", "3", "--tolerance", "0.02"]
TENSOR_PARALLEL = "1,2,4,8"
QUANTIZATION = "none,fp8"
MAX_NUM_SEQS = "64,256"
TARGET_RATE = 100.0
GPU_HOUR_PRICE = 3.5  # an illustrative price per GPU-hour, not a quote


def capacity(servesim, out, *flags):
    """capacity.json of one `servesim capacity` run (servesim runs in ROOT)."""
    os.makedirs(out, exist_ok=True)
    cmd = [servesim, "capacity", "--quiet", "--out", out, *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    with open(os.path.join(out, "capacity.json")) as f:
        return json.load(f)


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def tracked_files_modified():
    """Whether the checkout's tracked files differ from its commit (the servesim built from it may too)."""
    return bool(subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip())


def best_by_rate_per_gpu(rows):
    """The row with the most req/s per GPU; ties: more output tokens/s per GPU, then the earlier grid row."""
    ok = [r for r in rows if not r["error"]]
    return max(ok, key=lambda r: (float(r["rate_per_gpu"]), float(r["output_tokens_per_s_per_gpu"]),
                                  -rows.index(r)))


def rate_vs_tp(rows, best):
    out = []
    for tp in TENSOR_PARALLEL.split(","):
        for q in QUANTIZATION.split(","):
            group = [r for r in rows if r["tensor_parallel_size"] == tp and r["quantization"] == q]
            fitting = [r for r in group if not r["error"]]
            key = {"tensor_parallel_size": tp, "quantization": q, "gpus": group[0]["gpus"]}
            if not fitting:
                out.append({**key, "fits": 0, "max_num_seqs": "", "max_request_rate": "", "rate_per_gpu": "",
                            "output_tokens_per_s_per_gpu": "", "rate_per_gpu_over_best": "",
                            "replicas_for_target": "", "gpus_for_target": "", "error": group[0]["error"]})
                continue
            r = best_by_rate_per_gpu(fitting)
            replicas = math.ceil(TARGET_RATE / float(r["max_request_rate"]))
            out.append({**key, "fits": 1, "max_num_seqs": r["max_num_seqs"], "max_request_rate": r["max_request_rate"],
                        "rate_per_gpu": r["rate_per_gpu"],
                        "output_tokens_per_s_per_gpu": r["output_tokens_per_s_per_gpu"],
                        "rate_per_gpu_over_best": f"{float(r['rate_per_gpu']) / float(best['rate_per_gpu']):.4f}",
                        "replicas_for_target": replicas, "gpus_for_target": replicas * int(tp), "error": ""})
    return out


def main():
    started = time.monotonic()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/capacity"))
    ap.add_argument("--scratch", default="/tmp/servesim_capacity")
    opts = ap.parse_args()
    servesim = os.path.abspath(opts.servesim)
    os.makedirs(opts.out, exist_ok=True)
    os.makedirs(opts.scratch, exist_ok=True)

    have_trace = os.path.exists(os.path.join(ROOT, TRACE))
    lengths = ["--lengths-from-trace", TRACE] if have_trace else FALLBACK_LENGTHS
    if not have_trace:
        print(f"{TRACE} is missing: lognormal lengths (prompts 1024, outputs 256) instead", file=sys.stderr)
    common = ["--model", MODEL, "--hardware", HARDWARE, *lengths, *SLOS, *SEARCH]

    print(f"search: TP {TENSOR_PARALLEL} x quantization {QUANTIZATION} x max-num-seqs {MAX_NUM_SEQS}",
          file=sys.stderr, flush=True)
    search_dir = os.path.join(opts.scratch, "search")
    capacity(servesim, search_dir, *common, "--search", "--search-tensor-parallel-size", TENSOR_PARALLEL,
             "--search-quantization", QUANTIZATION, "--search-max-num-seqs", MAX_NUM_SEQS)
    shutil.copyfile(os.path.join(search_dir, "search.csv"), os.path.join(opts.out, "search.csv"))
    with open(os.path.join(search_dir, "search.csv"), newline="") as f:
        rows = list(csv.DictReader(f))
    best = best_by_rate_per_gpu(rows)
    write(os.path.join(opts.out, "rate_vs_tp.csv"), rate_vs_tp(rows, best))

    config = ["--tensor-parallel-size", best["tensor_parallel_size"], "--quantization", best["quantization"],
              "--max-num-seqs", best["max_num_seqs"], "--max-num-batched-tokens", best["max_num_batched_tokens"]]
    print(f"fleet: {' '.join(config)} --target-rate {TARGET_RATE:g} --gpu-hour-price {GPU_HOUR_PRICE:g}",
          file=sys.stderr, flush=True)
    c = capacity(servesim, os.path.join(opts.scratch, "fleet"), *common, *config,
                 "--target-rate", f"{TARGET_RATE:g}", "--gpu-hour-price", f"{GPU_HOUR_PRICE:g}")
    if f"{c['max_request_rate']:.6g}" != best["max_request_rate"]:
        sys.exit(f"the fleet run's capacity {c['max_request_rate']:.6g} req/s is not the search's "
                 f"{best['max_request_rate']} for the same configuration")
    fleet = c["fleet"]
    configuration = {k: (v if k == "quantization" else int(v)) for k, v in best.items()
                     if k in ("tensor_parallel_size", "quantization", "max_num_seqs", "max_num_batched_tokens")}
    write(os.path.join(opts.out, "fleet.csv"), [{
        **configuration, "max_request_rate": f"{c['max_request_rate']:.6g}",
        "rate_min": f"{c['spread']['min']:.6g}", "rate_max": f"{c['spread']['max']:.6g}",
        "target_rate": f"{fleet['target_rate']:g}", "replicas": fleet["replicas"],
        "gpus_per_replica": fleet["gpus_per_replica"], "gpus": fleet["gpus"],
        "output_tokens_per_s": f"{fleet['output_tokens_per_s']:.6g}", "gpu_hour_price": f"{fleet['gpu_hour_price']:g}",
        "cost_per_hour": f"{fleet['cost_per_hour']:.6g}",
        "cost_per_million_output_tokens": f"{fleet['cost_per_million_output_tokens']:.6g}"}])
    with open(os.path.join(opts.out, "fleet.json"), "w") as f:
        json.dump({"configuration": configuration, "max_request_rate": c["max_request_rate"], "spread": c["spread"],
                   "tolerance": c["tolerance"], "limit": c["limit"], "at_capacity": c["at_capacity"],
                   "fleet": fleet, "price_note": "the GPU-hour price is an illustrative assumption, not a quote",
                   "command": "servesim capacity " + " ".join([*common, *config, "--target-rate", f"{TARGET_RATE:g}",
                                                               "--gpu-hour-price", f"{GPU_HOUR_PRICE:g}"])},
                  f, indent=2, sort_keys=True)
        f.write("\n")

    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                   .isoformat(timespec="seconds"), "commit": provenance.commit(),
                   "tracked_files_modified": tracked_files_modified(), "machine": provenance.machine(),
                   "lengths": TRACE if have_trace else " ".join(FALLBACK_LENGTHS),
                   "search_command": "servesim capacity " + " ".join(
                       [*common, "--search", "--search-tensor-parallel-size", TENSOR_PARALLEL,
                        "--search-quantization", QUANTIZATION, "--search-max-num-seqs", MAX_NUM_SEQS]),
                   "wall_s": round(time.monotonic() - started, 1),
                   "note": "datasheet predictions (roofline, default efficiencies, analytic nvlink4 all-reduce); "
                           "the machine only ran the simulator"}, f, indent=2)
        f.write("\n")
    print(f"best per GPU: TP {best['tensor_parallel_size']} {best['quantization']} max-num-seqs "
          f"{best['max_num_seqs']}: {best['max_request_rate']} req/s, {best['rate_per_gpu']} per GPU; "
          f"{TARGET_RATE:g} req/s: {fleet['replicas']} x {fleet['gpus_per_replica']} = {fleet['gpus']} GPUs",
          file=sys.stderr)
    print(f"wrote {opts.out}/{{search,rate_vs_tp,fleet}}.csv, fleet.json, metadata.json", file=sys.stderr)


if __name__ == "__main__":
    main()
