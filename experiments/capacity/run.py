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
  search_1000_requests.csv, search_3000_requests.csv
                  the same search with 1000 and 3000 requests per probe instead of 6000 (is 6000 enough?)
  side_runs.csv   the figures the README cites beyond the search, each with the servesim command that gives it:
                  one sequence's TPOT per TP degree (fp8), the fp8 weights, the mean running sequences at
                  capacity, TP 8 fp8's max-num-seqs 64 against 256 at 17 req/s, and the token budget at 512
                  and 8192 for the best configuration
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
SLO_TARGETS = ["--slo-ttft", "1s", "--slo-tpot", "50ms"]
SLOS = [*SLO_TARGETS, "--slo-attainment", "0.99"]
# 6000 requests: at ~10 req/s ten minutes of simulated arrivals, so the 1% of misses the SLO allows
# is 60 requests, not a handful; the seeds' spread is the noise that is left.
NUM_REQUESTS = 6000
TENSOR_PARALLEL = "1,2,4,8"
QUANTIZATION = "none,fp8"
MAX_NUM_SEQS = "64,256"
TARGET_RATE = 100.0
GPU_HOUR_PRICE = 3.5  # an illustrative price per GPU-hour, not a quote
# Side runs. Fewer requests per probe: does the ranking hold?
FEWER_REQUESTS = [1000, 3000]
# One sequence alone (closed loop, one 1024/256 request): TPOT before any batching, per TP degree.
SINGLE_SEQUENCE = ["--arrival", "closed", "--concurrency", "1", "--num-requests", "1", "--prompt-len", "fixed:1024",
                   "--output-len", "fixed:256"]
# TP 8 fp8, max-num-seqs 64 against 256, at one rate between their capacities (16.6 and 18.1 req/s).
TP8_RATE = 17.0
# The token budget of the best configuration, below and above the chunked default of 2048.
TOKEN_BUDGETS = [512, 8192]


def search_flags(num_requests):
    """Requests per probe, seeds and bisection tolerance of every capacity run."""
    return ["--num-requests", str(num_requests), "--seeds", "3", "--tolerance", "0.02"]


def capacity(servesim, out, *flags):
    """capacity.json of one `servesim capacity` run (servesim runs in ROOT)."""
    os.makedirs(out, exist_ok=True)
    cmd = [servesim, "capacity", "--quiet", "--out", out, *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    with open(os.path.join(out, "capacity.json")) as f:
        return json.load(f)


def simulate(servesim, *flags):
    """summary.json of one `servesim simulate` run (servesim runs in ROOT)."""
    cmd = [servesim, "simulate", "--quiet", "--json", *flags]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    return json.loads(p.stdout)


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


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


def side_runs(servesim, scratch, workload, common, best):
    """The figures the README cites beyond the search: one row each (id, what, value, unit, the command)."""
    out = []

    def add(id_, what, value, unit, kind, flags):
        out.append({"id": id_, "what": what, "value": value, "unit": unit,
                    "command": f"servesim {kind} --quiet --json " + " ".join(flags)})

    model = ["--model", MODEL, "--hardware", HARDWARE]
    for tp in TENSOR_PARALLEL.split(","):
        flags = [*model, "--quantization", "fp8", "--tensor-parallel-size", tp, *SINGLE_SEQUENCE]
        s = simulate(servesim, *flags)
        add(f"single_sequence_tpot_tp{tp}", f"TPOT of one 1024/256 request alone, TP {tp} fp8",
            f"{1e3 * s['tpot_s']['p50']:.4g}", "ms", "simulate", flags)
        if tp == "1":
            add("fp8_weights", "llama-3.1-70b weights with --quantization fp8 (all ranks together)",
                f"{s['config']['model']['weight_bytes'] / 1e9:.4g}", "GB", "simulate", flags)

    config = ["--tensor-parallel-size", best["tensor_parallel_size"], "--quantization", best["quantization"],
              "--max-num-seqs", best["max_num_seqs"]]
    flags = [*model, *workload, *config, "--rate", best["max_request_rate"], "--seed", "0"]
    s = simulate(servesim, *flags)
    name = f"TP {best['tensor_parallel_size']} {best['quantization']} max-num-seqs {best['max_num_seqs']}"
    add("best_mean_running", f"{name} at its capacity, seed 0: mean running sequences per step",
        f"{s['mean_batch']['sequences']:.4g}", "sequences", "simulate", flags)

    for seqs in MAX_NUM_SEQS.split(","):
        flags = [*model, *workload, "--tensor-parallel-size", "8", "--quantization", "fp8", "--max-num-seqs", seqs,
                 "--rate", f"{TP8_RATE:g}", "--seed", "0"]
        s = simulate(servesim, *flags)
        what = f"TP 8 fp8 max-num-seqs {seqs} at {TP8_RATE:g} req/s, seed 0"
        add(f"tp8_fp8_{seqs}_mean_running", f"{what}: mean running sequences per step",
            f"{s['mean_batch']['sequences']:.4g}", "sequences", "simulate", flags)
        add(f"tp8_fp8_{seqs}_queueing_p99", f"{what}: queueing P99", f"{s['queueing_s']['p99']:.4g}", "s",
            "simulate", flags)
        add(f"tp8_fp8_{seqs}_attainment", f"{what}: fraction meeting both SLOs", f"{s['slo_attainment']:.4g}", "",
            "simulate", flags)

    for budget in TOKEN_BUDGETS:
        flags = [*common, *config, "--max-num-batched-tokens", str(budget)]
        c = capacity(servesim, os.path.join(scratch, f"budget_{budget}"), *flags)
        what = f"{name} with --max-num-batched-tokens {budget}"
        add(f"budget_{budget}_rate", f"{what}: capacity (median of the seeds)", f"{c['max_request_rate']:.6g}",
            "req/s", "capacity", flags)
        add(f"budget_{budget}_rate_min", f"{what}: lowest seed's capacity", f"{c['spread']['min']:.6g}", "req/s",
            "capacity", flags)
        add(f"budget_{budget}_rate_max", f"{what}: highest seed's capacity", f"{c['spread']['max']:.6g}", "req/s",
            "capacity", flags)
        add(f"budget_{budget}_limiting_slo", f"{what}: the SLO that binds", c["limit"]["slo"], "", "capacity", flags)
        for slo in ("ttft", "tpot"):
            add(f"budget_{budget}_{slo}_misses", f"{what}: {slo.upper()} misses at capacity (median seed, of "
                f"{c['at_capacity']['submitted']})", c["at_capacity"]["misses"][slo], "requests", "capacity", flags)
    return out


def main():
    # Before anything is written: the study's own outputs are tracked files too.
    checkout_modified = provenance.tracked_files_modified()
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
    common = ["--model", MODEL, "--hardware", HARDWARE, *lengths, *SLOS, *search_flags(NUM_REQUESTS)]
    grid = ["--search", "--search-tensor-parallel-size", TENSOR_PARALLEL, "--search-quantization", QUANTIZATION,
            "--search-max-num-seqs", MAX_NUM_SEQS]

    print(f"search: TP {TENSOR_PARALLEL} x quantization {QUANTIZATION} x max-num-seqs {MAX_NUM_SEQS}",
          file=sys.stderr, flush=True)
    search_dir = os.path.join(opts.scratch, "search")
    capacity(servesim, search_dir, *common, *grid)
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

    for n in FEWER_REQUESTS:
        print(f"search with {n} requests per probe", file=sys.stderr, flush=True)
        capacity(servesim, os.path.join(opts.scratch, f"search_{n}"), "--model", MODEL, "--hardware", HARDWARE,
                 *lengths, *SLOS, *search_flags(n), *grid)
        shutil.copyfile(os.path.join(opts.scratch, f"search_{n}", "search.csv"),
                        os.path.join(opts.out, f"search_{n}_requests.csv"))

    print("side runs", file=sys.stderr, flush=True)
    workload = [*lengths, "--num-requests", str(NUM_REQUESTS), *SLO_TARGETS]
    write(os.path.join(opts.out, "side_runs.csv"), side_runs(servesim, opts.scratch, workload, common, best))

    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                   .isoformat(timespec="seconds"), "commit": provenance.commit(),
                   "tracked_files_modified": checkout_modified, "machine": provenance.machine(),
                   "lengths": TRACE if have_trace else " ".join(FALLBACK_LENGTHS),
                   "search_command": "servesim capacity " + " ".join([*common, *grid]),
                   "wall_s": round(time.monotonic() - started, 1),
                   "note": "datasheet predictions (roofline, default efficiencies, analytic nvlink4 all-reduce); "
                           "the machine only ran the simulator"}, f, indent=2)
        f.write("\n")
    print(f"best per GPU: TP {best['tensor_parallel_size']} {best['quantization']} max-num-seqs "
          f"{best['max_num_seqs']}: {best['max_request_rate']} req/s, {best['rate_per_gpu']} per GPU; "
          f"{TARGET_RATE:g} req/s: {fleet['replicas']} x {fleet['gpus_per_replica']} = {fleet['gpus']} GPUs",
          file=sys.stderr)
    print(f"wrote {opts.out}/{{search,rate_vs_tp,fleet,search_1000_requests,search_3000_requests,side_runs}}.csv, "
          "fleet.json, metadata.json", file=sys.stderr)


if __name__ == "__main__":
    main()
