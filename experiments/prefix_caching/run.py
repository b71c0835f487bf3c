#!/usr/bin/python3
"""What prefix caching buys, predicted by `servesim simulate` (roofline,
Llama-3.1-8B on the h200 datasheet, chunked prefill with an 8192-token
budget, block size 16):

1. The Mooncake conversation trace (12,031 requests, prompts of ~12k tokens
   that share a system prompt and their conversations' history) at a
   quarter of its own rate (0.85 requests/s, which one H200 serves without
   caching: latency) and at its own rate (3.4 requests/s, which saturates
   it: throughput), with the KV cache from 25k to 6.4M blocks (0.4M to 102M tokens;
   the datasheet H200 holds 52,852 blocks at --gpu-memory-utilization 0.9,
   larger caches are what a CPU-memory tier such as Mooncake's adds), caching
   on and off: hit rate, TTFT P50/P99, TPOT P50, throughput. The hit rate
   with an unbounded cache is computed from the trace itself too (vLLM's
   rules one request at a time), to set beside the paper's cache ratio (40%).
2. Capacity at an SLO (P99 TTFT <= 500 ms and P50 TPOT <= 30 ms) against
   the share of each 2048-token prompt that is a shared prefix (one of 8
   system prompts), caching on and off: the highest Poisson rate that meets
   it, found by bisection.

Writes mooncake_kv_size.csv, shared_prefix_capacity.csv and metadata.json
into --out. Usage: experiments/prefix_caching/run.py [--servesim PATH] [--out DIR] [--part mooncake|capacity|all]
"""
import argparse
import csv
import datetime
import itertools
import json
import os
import platform
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TRACE = os.path.join(ROOT, "data", "traces", "mooncake_conversation.jsonl")
COMMON = ["--model", "llama-3.1-8b", "--hardware", "h200", "--scheduler", "chunked",
          "--max-num-batched-tokens", "8192", "--seed", "1"]
RATE_SCALES = [0.25, 1.0]  # one H200 serves the first without caching; the second saturates it
KV_BLOCKS = [25_000, 52_852, 100_000, 200_000, 400_000, 800_000, 1_600_000, 3_200_000, 6_400_000]
KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16
SHARES = [0.0, 0.25, 0.5, 0.75, 0.9]
PROMPT, OUTPUT, GROUPS = 2048, 256, 8
SLO = ["--slo-ttft", "500ms", "--slo-tpot", "30ms"]


def simulate(servesim, args):
    cmd = [servesim, "simulate", "--json", "--quiet"] + COMMON + args
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{done.stderr}")
    return json.loads(done.stdout)


def unbounded_hit_rate(path, block_size=16):
    """vLLM's rules one request at a time with a cache that never evicts: a
    block is named by the Mooncake ids up to its own and its offset in it."""
    seen, hits, queries = set(), 0, 0
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            ids, n = rec["hash_ids"], rec["input_length"]
            keys = [(tuple(ids[:b * block_size // 512 + 1]), b * block_size % 512) for b in range(n // block_size)]
            hit = 0
            for k in keys[:(n - 1) // block_size]:
                if k not in seen:
                    break
                hit += block_size
            hits += hit
            queries += n
            seen.update(keys)
    return hits / queries


def mooncake(servesim, out):
    rows = []
    for rate_scale, blocks, caching in itertools.product(RATE_SCALES, KV_BLOCKS, (True, False)):
        s = simulate(servesim, ["--trace", TRACE, "--trace-format", "mooncake", "--rate-scale", str(rate_scale),
                                "--num-gpu-blocks", str(blocks)] +
                     ([] if caching else ["--no-enable-prefix-caching"]))
        pc = s["prefix_cache"]
        rows.append({"rate_scale": rate_scale, "num_gpu_blocks": blocks, "kv_tokens": blocks * 16,
                     "kv_gib": round(blocks * 16 * KV_BYTES_PER_TOKEN / 2**30, 2),
                     "prefix_caching": int(caching),
                     "hit_rate": pc["hit_rate"] if pc["hit_rate"] is not None else 0.0,
                     "evicted_blocks": pc["evicted_blocks"],
                     "ttft_p50_s": s["ttft_s"]["p50"], "ttft_p99_s": s["ttft_s"]["p99"],
                     "tpot_p50_ms": s["tpot_s"]["p50"] * 1e3,
                     "output_tokens_per_s": s["throughput"]["output_tokens_per_s"],
                     "requests_per_s": s["throughput"]["requests_per_s"],
                     "completed": s["requests"]["completed"], "rejected": s["requests"]["rejected"],
                     "preemptions": s["preemptions"]})
        r = rows[-1]
        print(f"mooncake x{rate_scale} {blocks} blocks caching {'on ' if caching else 'off'}: hit {r['hit_rate']:.3f}, "
              f"TTFT P50 {r['ttft_p50_s']:.3f} s P99 {r['ttft_p99_s']:.3f} s", file=sys.stderr)
    with open(os.path.join(out, "mooncake_kv_size.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def meets(servesim, share, caching, rate):
    prefix = int(round(share * PROMPT))
    args = ["--rate", f"{rate:.6g}", "--num-requests", "1000", "--output-len", str(OUTPUT),
            "--prompt-len", str(PROMPT - prefix)] + SLO
    if prefix > 0:
        args += ["--shared-prefix-groups", str(GROUPS), "--shared-prefix-len", str(prefix)]
    if not caching:
        args += ["--no-enable-prefix-caching"]
    s = simulate(servesim, args)
    ok = s["ttft_s"]["p99"] <= 0.5 and s["tpot_s"]["p50"] <= 0.030 and s["requests"]["rejected"] == 0
    return ok, s


def capacity(servesim, out):
    rows = []
    for share in SHARES:
        for caching in (True, False):
            lo, hi = 0.5, 64.0  # requests/s: lo meets the SLO (checked), hi does not (checked)
            ok_lo, _ = meets(servesim, share, caching, lo)
            if not ok_lo:
                sys.exit(f"share {share}: even {lo} requests/s misses the SLO")
            while meets(servesim, share, caching, hi)[0]:
                hi *= 2
            for _ in range(10):  # to within (hi - lo) / 2^10
                mid = (lo + hi) / 2
                if meets(servesim, share, caching, mid)[0]:
                    lo = mid
                else:
                    hi = mid
            _, s = meets(servesim, share, caching, lo)
            pc = s["prefix_cache"]
            rows.append({"shared_share": share, "shared_prefix_tokens": int(round(share * PROMPT)),
                         "prefix_caching": int(caching), "max_rate_per_s": round(lo, 4),
                         "hit_rate": pc["hit_rate"] if pc["hit_rate"] is not None else 0.0,
                         "ttft_p99_s": s["ttft_s"]["p99"], "tpot_p50_ms": s["tpot_s"]["p50"] * 1e3})
            print(f"capacity share {share} caching {'on ' if caching else 'off'}: {lo:.2f} requests/s",
                  file=sys.stderr)
    with open(os.path.join(out, "shared_prefix_capacity.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    parser.add_argument("--out", default=os.path.join(ROOT, "experiments/results/prefix_caching"))
    parser.add_argument("--part", choices=["mooncake", "capacity", "all"], default="all")
    opts = parser.parse_args()
    os.makedirs(opts.out, exist_ok=True)
    if opts.part in ("mooncake", "all"):
        mooncake(opts.servesim, opts.out)
    if opts.part in ("capacity", "all"):
        capacity(opts.servesim, opts.out)
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    meta = {"study": "prefix_caching", "command": " ".join(["experiments/prefix_caching/run.py"] + sys.argv[1:]),
            "date": datetime.date.today().isoformat(), "commit": commit,
            "machine": f"{cpu} ({os.cpu_count()} cores), {platform.node()} (a simulation: the numbers do not "
                       "depend on it)",
            "cost_model": "roofline (h200 datasheet)", "model": "llama-3.1-8b",
            "mooncake": {"trace": "data/traces/mooncake_conversation.jsonl", "rate_scales": RATE_SCALES,
                         "unbounded_hit_rate_from_trace": unbounded_hit_rate(TRACE),
                         "paper_cache_ratio": 0.40},
            "capacity": {"prompt_tokens": PROMPT, "output_tokens": OUTPUT, "groups": GROUPS,
                         "slo": {"ttft_p99_s": 0.5, "tpot_p50_s": 0.030}, "requests": 1000}}
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
