#!/usr/bin/python3
"""Textbook shapes of LLM serving latency, predicted by `servesim simulate`.

1. TTFT against prompt length (128 ... 8192 tokens): one request at a time
   (closed loop, concurrency 1), so TTFT is the prefill alone. Expected:
   linear growth once the prefill is compute-bound; TPOT nearly flat.
2. TPOT against batch size: closed loop at concurrency B (the batch size
   the scheduler holds), fixed 512-token prompts and 256 output tokens.
   Expected: flat while decode is bandwidth-bound (weights dominate), then
   rising as KV reads and compute grow.

Writes prompt_length.csv, batch_size.csv and metadata.json into --out.
Usage: experiments/latency_vs_shape/run.py [--servesim PATH] [--out DIR]
"""
import argparse
import csv
import datetime
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = ["llama-3.1-8b", "llama-3.2-1b"]
HARDWARE = ["h200", "h100-sxm", "a100-80gb"]
PROMPT_LENGTHS = [128, 256, 512, 1024, 2048, 4096, 8192]
BATCH_SIZES = [1, 2, 4, 8, 16, 32, 64, 128, 256]


def simulate(servesim, args):
    cmd = [servesim, "simulate", "--json", "--quiet", "--seed", "1"] + args
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr}")
    return json.loads(done.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    parser.add_argument("--out", default=os.path.join(ROOT, "experiments/results/latency_vs_shape"))
    opts = parser.parse_args()
    os.makedirs(opts.out, exist_ok=True)

    rows = []
    for model in MODELS:
        for hw in HARDWARE:
            for p in PROMPT_LENGTHS:
                s = simulate(opts.servesim, [
                    "--model", model, "--hardware", hw, "--scheduler", "chunked",
                    "--max-num-batched-tokens", "8192", "--arrival", "closed", "--concurrency", "1",
                    "--num-requests", "8", "--prompt-len", str(p), "--output-len", "128"])
                rows.append({"model": model, "hardware": hw, "prompt_tokens": p,
                             "ttft_ms": s["ttft_s"]["mean"] * 1e3, "tpot_ms": s["tpot_s"]["mean"] * 1e3})
                print(f"prompt {model} {hw} {p}: TTFT {rows[-1]['ttft_ms']:.2f} ms, TPOT {rows[-1]['tpot_ms']:.3f} ms",
                      file=sys.stderr)
    with open(os.path.join(opts.out, "prompt_length.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    rows = []
    for model in MODELS:
        for hw in HARDWARE:
            for b in BATCH_SIZES:
                s = simulate(opts.servesim, [
                    "--model", model, "--hardware", hw, "--scheduler", "chunked",
                    "--max-num-seqs", str(b), "--arrival", "closed", "--concurrency", str(b),
                    "--num-requests", str(max(4 * b, 16)), "--prompt-len", "512", "--output-len", "256"])
                rows.append({"model": model, "hardware": hw, "batch_size": b,
                             "tpot_p50_ms": s["tpot_s"]["p50"] * 1e3,
                             "ttft_p50_ms": s["ttft_s"]["p50"] * 1e3,
                             "output_tokens_per_s": s["throughput"]["output_tokens_per_s"]})
                print(f"batch {model} {hw} {b}: TPOT p50 {rows[-1]['tpot_p50_ms']:.3f} ms", file=sys.stderr)
    with open(os.path.join(opts.out, "batch_size.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)

    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    meta = {"command": "experiments/latency_vs_shape/run.py", "date": datetime.date.today().isoformat(),
            "commit": commit, "machine": f"{platform.node()} ({platform.machine()}, {os.cpu_count()} cores)",
            "executor": "roofline (datasheet numbers, default efficiencies)", "seed": 1}
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
