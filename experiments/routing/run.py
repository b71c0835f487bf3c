#!/usr/bin/python3
"""Routing across replicas on the Mooncake conversation trace: the prefix
cache hit rate, TTFT P50/P99 and TPOT P50 of round-robin, least-requests and
prefix-affinity (SGLang's cache-aware policy with its default balance
thresholds) against the number of replicas, each replica taking the same
share of the load (--rate-scale 0.2 per replica; llama-3.1-8b on the h200
roofline, vLLM's defaults otherwise). Datasheet predictions, deterministic.

Writes routing.csv, routing.png and metadata.json into --out.
Usage: /usr/bin/python3 experiments/routing/run.py [--servesim PATH] [--out DIR]
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import provenance  # noqa: E402

ROOT = provenance.ROOT
TRACE = os.path.join("data", "traces", "mooncake_conversation.jsonl")
REPLICAS = [1, 2, 4, 8]
# prefix-affinity at SGLang's default balance threshold (32 requests) and a tight one (4).
ROUTERS = ["round-robin", "least-requests", "prefix-affinity", "prefix-affinity:4"]
SCALE_PER_REPLICA = 0.2


def simulate(servesim, replicas, router):
    args = [servesim, "simulate", "--trace", TRACE, "--trace-format", "mooncake",
            "--rate-scale", repr(SCALE_PER_REPLICA * replicas), "--json", "-q"]
    if replicas > 1:
        name, _, threshold = router.partition(":")
        args += ["--num-replicas", str(replicas), "--router", name]
        if threshold:
            args += ["--router-balance-abs-threshold", threshold]
    p = subprocess.run(args, cwd=ROOT, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"{' '.join(args)}: {p.stderr.strip()}")
    return json.loads(p.stdout), args[1:]


def draw(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for i, router in enumerate(ROUTERS):
        mine = [r for r in rows if r["router"] == router or r["replicas"] == 1]
        x, c = [r["replicas"] for r in mine], f"C{i}"
        axes[0].plot(x, [r["hit_rate"] for r in mine], marker="o", c=c, label=router)
        axes[1].plot(x, [r["ttft_p50_s"] for r in mine], marker="o", c=c, label=f"{router} P50")
        axes[1].plot(x, [r["ttft_p99_s"] for r in mine], marker="x", c=c, ls="--", label=f"{router} P99")
        axes[2].plot(x, [r["tpot_p50_ms"] for r in mine], marker="o", c=c, label=router)
    for ax, title in zip(axes, ["prefix cache hit rate", "TTFT (s)", "TPOT P50 (ms)"]):
        ax.set_xscale("log", base=2)
        ax.set_xticks(REPLICAS)
        ax.set_xticklabels([str(r) for r in REPLICAS])
        ax.set_xlabel("replicas (rate-scale 0.2 each)")
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
    axes[1].set_yscale("log")
    axes[0].legend(fontsize=8)
    axes[1].legend(fontsize=6)
    fig.suptitle(f"Mooncake conversation trace, llama-3.1-8b on h200 replicas (datasheet roofline), commit "
                 f"{provenance.commit()}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main():
    # Before anything is written: the study's own outputs are tracked files too.
    checkout_modified = provenance.tracked_files_modified()
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build", "release", "cli", "servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "results", "routing"))
    opts = ap.parse_args()
    servesim = os.path.abspath(opts.servesim)
    os.makedirs(opts.out, exist_ok=True)
    started = time.time()
    rows = []
    for replicas in REPLICAS:
        for router in ROUTERS if replicas > 1 else ["-"]:
            s, args = simulate(servesim, replicas, router)
            rows.append({"replicas": replicas, "router": router, "rate_scale": SCALE_PER_REPLICA * replicas,
                         "hit_rate": s["prefix_cache"]["hit_rate"], "ttft_p50_s": s["ttft_s"]["p50"],
                         "ttft_p99_s": s["ttft_s"]["p99"], "tpot_p50_ms": s["tpot_s"]["p50"] * 1e3,
                         "output_tokens_per_s": s["throughput"]["output_tokens_per_s"],
                         "preemptions": s["preemptions"], "command": "servesim " + " ".join(args)})
            r = rows[-1]
            print(f"{replicas} x {router}: hit {r['hit_rate']:.3f}, TTFT P50 {r['ttft_p50_s']:.3f} s "
                  f"P99 {r['ttft_p99_s']:.3f} s, TPOT P50 {r['tpot_p50_ms']:.2f} ms", file=sys.stderr)
    with open(os.path.join(opts.out, "routing.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    draw(rows, os.path.join(opts.out, "routing.png"))
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump({"command": "experiments/routing/run.py --servesim " + os.path.relpath(servesim, ROOT),
                   "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                   "commit": provenance.commit(), "tracked_files_modified": checkout_modified,
                   "machine": provenance.machine(), "wall_s": round(time.time() - started, 1),
                   "note": "datasheet predictions (roofline, default efficiencies); the machine only ran the "
                           "simulator"}, f, indent=2)
        f.write("\n")
    print(f"wrote {opts.out}/routing.csv, routing.png, metadata.json", file=sys.stderr)


if __name__ == "__main__":
    main()
