#!/usr/bin/python3
"""What quantization buys, predicted from datasheets (`servesim simulate`, the
roofline with docs/quantization.md's default efficiencies; nothing measured,
nothing fitted): llama-3.1-8b and llama-3.1-70b on one h100-sxm and one h200,
weights {none (bf16), fp8, w8a16, w4a16} x KV cache {auto (bf16), fp8}.

Writes into --out:
  capacity.csv        weight GB, KV blocks and the longest batch at a 4096-token context, per configuration
                      (a configuration whose weights leave no room for the KV cache: fits = 0)
  tpot_vs_batch.csv   closed loop of B sequences, 1024-token prompts, 256-token outputs: TPOT P50 and output
                      tokens/s, B = 1 .. 256
  ttft_vs_prompt.csv  one request alone: TTFT for prompts of 128 .. 8192 tokens
  slo.csv             per configuration, the batch with the most output tokens/s whose TPOT P50 is within 30 ms
  trtllm.csv          llama-3.1-8b, fp8 weights and KV cache on h100-sxm against TensorRT-LLM 1.0's published
                      throughput (perf-overview.md: fixed lengths, every request at once)
  metadata.json       the commit, the machine, the command

Usage: experiments/quantization/run.py [--servesim BIN] [--out DIR]
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(HERE))
import provenance  # noqa: E402

MODELS = ["llama-3.1-8b", "llama-3.1-70b"]
HARDWARE = ["h100-sxm", "h200"]
WEIGHTS = ["none", "fp8", "w8a16", "w4a16"]
KV = ["auto", "fp8"]
BATCHES = [1, 2, 4, 8, 16, 32, 64, 128, 256]
PROMPTS = [128, 512, 2048, 8192]
TPOT_SLO_MS = 30.0
CONTEXT = 4096
BLOCK = 16
# TensorRT-LLM 1.0 perf-overview.md, Llama-3.1-8B-Instruct-FP8 on one H100 SXM: (input, output, output tokens/s).
TRTLLM = [(128, 128, 28312), (128, 2048, 22714), (2048, 128, 3450), (2048, 2048, 9305), (1000, 1000, 15220)]
TRTLLM_REQUESTS = 1000
# One throughput setting for every row (not tuned per row): larger batches and budget than vLLM's defaults.
TRTLLM_SCHEDULER = ["--max-num-seqs", "1024", "--max-num-batched-tokens", "8192"]


def simulate(servesim, out, *flags):
    """summary.json of one simulation, or None when the weights leave no room for the KV cache."""
    cmd = [servesim, "simulate", "--quiet", "--out", out, *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode == 2 and "leave no room for the KV cache" in p.stderr:
        return None
    if p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(cmd)}\n{p.stderr}")
    with open(os.path.join(out, "summary.json")) as f:
        return json.load(f)


def write(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def configurations():
    for m in MODELS:
        for h in HARDWARE:
            for w in WEIGHTS:
                for kv in KV:
                    yield m, h, w, kv


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/quantization"))
    ap.add_argument("--scratch", default="/tmp/servesim_quantization")
    opts = ap.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    os.makedirs(opts.scratch, exist_ok=True)
    scratch = lambda *parts: os.path.join(opts.scratch, "_".join(str(p) for p in parts))  # noqa: E731

    capacity, tpot, ttft, slo = [], [], [], []
    configs = list(configurations())
    for i, (m, h, w, kv) in enumerate(configs, 1):
        print(f"[{i}/{len(configs)}] {m} {h} --quantization {w} --kv-cache-dtype {kv}", file=sys.stderr, flush=True)
        dtype = ["--model", m, "--hardware", h, "--quantization", w, "--kv-cache-dtype", kv]
        probe = simulate(opts.servesim, scratch(m, h, w, kv, "probe"), *dtype, "--num-requests", "1",
                         "--prompt-len", "fixed:16", "--output-len", "fixed:2")
        key = {"model": m, "hardware": h, "weights": w, "kv_cache": kv}
        if probe is None:
            capacity.append({**key, "fits": 0, "weight_gb": "", "kv_blocks": 0, "max_batch_at_4096": 0})
            slo.append({**key, "fits": 0, "batch": "", "tpot_p50_ms": "", "output_tokens_per_s": ""})
            continue
        blocks = probe["config"]["scheduler"]["num_gpu_blocks"]
        max_batch = blocks * BLOCK // CONTEXT
        capacity.append({**key, "fits": 1, "weight_gb": round(probe["config"]["model"]["weight_bytes"] / 1e9, 3),
                         "kv_blocks": blocks, "max_batch_at_4096": max_batch})
        best = None
        for b in BATCHES:
            s = simulate(opts.servesim, scratch(m, h, w, kv, "b", b), *dtype, "--arrival", "closed",
                         "--concurrency", str(b), "--num-requests", str(4 * b), "--prompt-len", "fixed:1024",
                         "--output-len", "fixed:256", "--max-num-seqs", str(max(b, 1)))
            row = {**key, "batch": b, "tpot_p50_ms": round(s["tpot_s"]["p50"] * 1e3, 4),
                   "output_tokens_per_s": round(s["throughput"]["output_tokens_per_s"], 1),
                   "preemptions": s["preemptions"]}
            tpot.append(row)
            if row["tpot_p50_ms"] <= TPOT_SLO_MS and (best is None or
                                                      row["output_tokens_per_s"] > best["output_tokens_per_s"]):
                best = row
        slo.append({**key, "fits": 1, "batch": best["batch"] if best else "",
                    "tpot_p50_ms": best["tpot_p50_ms"] if best else "",
                    "output_tokens_per_s": best["output_tokens_per_s"] if best else ""})
        for p in PROMPTS:
            s = simulate(opts.servesim, scratch(m, h, w, kv, "p", p), *dtype, "--arrival", "closed", "--concurrency",
                         "1", "--num-requests", "2", "--prompt-len", f"fixed:{p}", "--output-len", "fixed:2")
            ttft.append({**key, "prompt": p, "ttft_p50_ms": round(s["ttft_s"]["p50"] * 1e3, 4)})

    trt = []
    for inp, outp, published in TRTLLM:
        print(f"TensorRT-LLM row {inp}/{outp}", file=sys.stderr, flush=True)
        s = simulate(opts.servesim, scratch("trt", inp, outp), "--model", "llama-3.1-8b", "--hardware", "h100-sxm",
                     "--quantization", "fp8", "--kv-cache-dtype", "fp8", "--arrival", "closed", "--concurrency",
                     str(TRTLLM_REQUESTS), "--num-requests", str(TRTLLM_REQUESTS), "--prompt-len", f"fixed:{inp}",
                     "--output-len", f"fixed:{outp}", *TRTLLM_SCHEDULER)
        predicted = s["throughput"]["output_tokens_per_s"]
        trt.append({"input": inp, "output": outp, "trtllm_output_tokens_per_s": published,
                    "predicted_output_tokens_per_s": round(predicted, 1),
                    "predicted_over_published": round(predicted / published, 4)})

    write(os.path.join(opts.out, "capacity.csv"), capacity)
    write(os.path.join(opts.out, "tpot_vs_batch.csv"), tpot)
    write(os.path.join(opts.out, "ttft_vs_prompt.csv"), ttft)
    write(os.path.join(opts.out, "slo.csv"), slo)
    write(os.path.join(opts.out, "trtllm.csv"), trt)
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump({"command": " ".join(sys.argv), "date": datetime.datetime.now(datetime.timezone.utc)
                   .isoformat(timespec="seconds"), "commit": provenance.commit(), "machine": provenance.machine(),
                   "note": "datasheet predictions (roofline); the machine only ran the simulator"}, f, indent=2)
        f.write("\n")
    print(f"wrote {opts.out}/{{capacity,tpot_vs_batch,ttft_vs_prompt,slo,trtllm}}.csv", file=sys.stderr)


if __name__ == "__main__":
    main()
