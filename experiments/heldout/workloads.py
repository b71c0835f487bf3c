#!/usr/bin/python3
"""The held-out workloads: a deterministic generator of serving workloads
across the axes a profile must hold on (issue 32), none of which any
calibration or model change was tuned on.

A workload is drawn from its split and index alone:
  heldout  seeds HELDOUT_BASE + i  (the suite's figure of merit; never tune on these)
  tuning   seeds TUNING_BASE + i   (free to look at while changing the model)
so a change tuned on `tuning` workloads is judged on `heldout` ones it never saw.

Axes (one value each, drawn from the seed):
  arrival    poisson | gamma with cv 2..4 | bursty (30% of the gaps five times
             shorter) | closed loop at 2..16 requests in flight
  prompts    short (16-128) | long (300-900) | bimodal (60% 48-96, 40% 300-600) |
             lognormal (median 200, sigma 0.8, 16-900)
  outputs    short (8-40) | medium (32-128) | long (64-256)
  scheduler  continuous | chunked with --max-num-batched-tokens 128 .. 2048
  load       0.3 .. 1.2 of the workload's own capacity (open loop)
Every prompt + output fits small-110m's 1024 positions (max_positions).

`write_trace` writes the workload's requests as a CSV trace
(arrival_s,prompt_tokens,output_tokens) at 1 request/s on average; the
driver (run.py) replays it at `load` x capacity with --rate-scale.

Usage: experiments/heldout/workloads.py [--split heldout|tuning] [--count N]  (prints the workloads)
"""
import argparse
import csv
import json
import random

HELDOUT_BASE = 32_000_000
TUNING_BASE = 32_500_000
SPLITS = {"heldout": HELDOUT_BASE, "tuning": TUNING_BASE}

ARRIVALS = ["poisson", "gamma", "bursty", "closed"]
PROMPTS = {
    "short": [(1.0, 16, 128)],
    "long": [(1.0, 300, 900)],
    "bimodal": [(0.6, 48, 96), (0.4, 300, 600)],
    "lognormal": None,  # median 200, sigma 0.8, clipped to 16..900
}
OUTPUTS = {"short": (8, 40), "medium": (32, 128), "long": (64, 256)}
TOKEN_BUDGETS = [128, 256, 512, 1024, 2048]
LOADS = [0.3, 0.5, 0.7, 0.9, 1.2]


def seed_of(split, index):
    if split not in SPLITS:
        raise ValueError(f"unknown split '{split}' (expected {' or '.join(SPLITS)})")
    if index < 0:
        raise ValueError("index must be >= 0")
    return SPLITS[split] + index


def draw(split, index, requests=40, max_positions=1024):
    """The workload `index` of `split`: a dict of its axes, its seed and its name."""
    seed = seed_of(split, index)
    r = random.Random(seed)
    w = {"split": split, "index": index, "seed": seed, "requests": requests, "max_positions": max_positions}
    w["arrival"] = r.choice(ARRIVALS)
    if w["arrival"] == "gamma":
        w["cv"] = r.choice([2.0, 3.0, 4.0])
    if w["arrival"] == "closed":
        w["concurrency"] = r.choice([2, 4, 8, 16])
    else:
        w["load"] = r.choice(LOADS)
    w["prompts"] = r.choice(sorted(PROMPTS))
    w["outputs"] = r.choice(sorted(OUTPUTS))
    w["scheduler"] = r.choice(["continuous", "chunked"])
    if w["scheduler"] == "chunked":
        w["max_num_batched_tokens"] = r.choice(TOKEN_BUDGETS)
    arrival = w["arrival"] + (f"-cv{w['cv']:g}" if "cv" in w else "") + (
        f"-c{w['concurrency']}" if "concurrency" in w else f"-load{w['load']:g}")
    sched = w["scheduler"] + (f"-{w['max_num_batched_tokens']}" if "max_num_batched_tokens" in w else "")
    w["name"] = f"{split}{index:02d}_{arrival}_{w['prompts']}-prompts_{w['outputs']}-outputs_{sched}"
    return w


def _prompt_len(r, kind, limit):
    if kind == "lognormal":
        return max(16, min(limit, int(round(r.lognormvariate(0, 0.8) * 200))))
    weights = [p for p, _, _ in PROMPTS[kind]]
    _, lo, hi = r.choices(PROMPTS[kind], weights=weights)[0]
    return r.randint(lo, min(hi, limit))


def requests_of(w):
    """The workload's requests: (arrival_s at 1 request/s on average, prompt, output)."""
    r = random.Random(w["seed"] * 7919 + 1)  # apart from the axes' stream
    lo, hi = OUTPUTS[w["outputs"]]
    out, t = [], 0.0
    for _ in range(w["requests"]):
        output = r.randint(lo, hi)
        prompt = _prompt_len(r, w["prompts"], w["max_positions"] - output)
        out.append((t, prompt, output))
        if w["arrival"] == "gamma":
            k = 1.0 / (w["cv"] ** 2)  # shape k, scale 1/k: mean 1, cv 1/sqrt(k)
            gap = r.gammavariate(k, 1.0 / k)
        elif w["arrival"] == "bursty":
            # 30% of the gaps five times shorter; the mean stays 1.
            short = r.random() < 0.3
            scale = 1.0 / (0.3 / 5 + 0.7)
            gap = r.expovariate(1.0) * scale * (0.2 if short else 1.0)
        else:
            gap = r.expovariate(1.0)
        t += gap
    return out


def write_trace(w, path):
    with open(path, "w", newline="") as f:
        c = csv.writer(f)
        c.writerow(["arrival_s", "prompt_tokens", "output_tokens"])
        for t, p, o in requests_of(w):
            c.writerow([f"{t:.6f}", p, o])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--split", default="heldout", choices=sorted(SPLITS))
    ap.add_argument("--count", type=int, default=8)
    opts = ap.parse_args()
    for i in range(opts.count):
        print(json.dumps(draw(opts.split, i)))


if __name__ == "__main__":
    main()
