#!/usr/bin/python3
"""A prediction checked against a server over HTTP: `servesim bench` drives
`servesim serve --device cpu` at a light and a near-saturation load, then
`servesim validate --measured` predicts the same requests at the same times
from this machine's profile and reports the TTFT/TPOT errors; beside it, the
client's TTFT against the server's own Prometheus histogram (they differ by
the transport only).

1. `servesim calibrate --threads 1` (full) writes the profile (or --profile).
2. The loads: fractions of the capacity the profile's simulation serves
   (as experiments/validation_cpu/run.py: light 0.1, near-saturation 0.5).
3. For each load: a fresh `servesim serve` (one decoder thread, chunked,
   --iteration-log), `servesim bench` (completions, token-id prompts,
   --ignore-eos), a scrape of /metrics, `servesim validate --measured` on
   the bench folder with the server's iteration log (each step it ran,
   costed by the profile: is a miss the steps' cost or their schedule?).
4. summary.csv and summary.json: per load, measured and predicted P50/P90
   TTFT and TPOT and their errors; client vs server TTFT.
Run it on an idle machine (the project's 2-core VMs: see
experiments/results/cpu*/README.md for how their speed drifts).
Usage: experiments/serve_bench/run.py [--servesim PATH] [--out DIR] [--profile P]
       [--device cpu|cuda] [--model M] [--serve-args "..."] [--loads light,...]
On a GPU (experiments/gpu/run.sh): --device cuda --model llama-3.1-8b
--profile P --serve-args "--kv-cache-memory 24GiB".
"""
import argparse
import csv
import datetime
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "small-110m"
LOADS = [("light", 0.1, 48), ("near-saturation", 0.5, 40)]  # name, fraction of capacity, requests
LENGTHS = ["--prompt-len", "uniform:16:256", "--output-len", "uniform:16:128"]
CAPACITY_WORKLOAD = ["--num-requests", "400", *LENGTHS, "--seed", "1"]  # at --capacity-rate
SCHEDULING = ["--scheduler", "chunked"]  # the server's and the prediction's


def prediction_flags(a):
    return ["--model", a.model, *SCHEDULING]


def engine_flags(a):
    # On the CPU one decoder thread, as the profile is calibrated.
    device = ["--threads", "1"] if a.device == "cpu" else ["--device", a.device]
    return [*prediction_flags(a), *device, *shlex.split(a.serve_args)]


def sh(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def start_server(a, log_path, iteration_log):
    cmd = [a.servesim, "serve", *engine_flags(a), "--port", "0", "--iteration-log", iteration_log]
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=log, text=True)
    blocks = None
    for line in proc.stderr:
        log.write(line)
        b = re.search(r"\((\d+) blocks of \d+ tokens\)", line)  # the ready line: the server's KV capacity
        if b:
            blocks = int(b.group(1))
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            if blocks is None:
                sys.exit(f"serve's ready line gave no KV block count; see {log_path}")
            with open(os.path.join(os.path.dirname(log_path), "num_gpu_blocks"), "w") as f:
                f.write(f"{blocks}\n")
            return proc, int(m.group(1)), log
    sys.exit(f"serve did not start; see {log_path}")


def scrape(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return text, parse_metrics(text)


def parse_metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def scrape_file(path):
    with open(path) as f:
        text = f.read()
    return text, parse_metrics(text)


def serve_and_bench(a, folder, rate, n):
    """A fresh server, the bench run against it, its /metrics at the end."""
    proc, port, log = start_server(a, os.path.join(folder, "serve.log"),
                                   os.path.join(folder, "iterations.jsonl"))
    try:
        sh([a.servesim, "bench", "--base-url", f"http://127.0.0.1:{port}", "--rate", str(rate),
            "--num-requests", str(n), *LENGTHS, "--seed", "2", "--ignore-eos", "--vocab-size", "32000",
            "--out", os.path.join(folder, "bench"), "-q"])
        text, samples = scrape(port)
        with open(os.path.join(folder, "metrics.txt"), "w") as f:
            f.write(text)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(60)
        log.close()
    return text, samples


def metric(samples, prefix):
    return sum(v for k, v in samples.items() if k.split("{")[0] == prefix)


def rel(pred, meas):
    return (pred - meas) / meas if meas else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/serve_bench"))
    ap.add_argument("--profile", help="a profile of this machine (default: calibrate one)")
    ap.add_argument("--device", default="cpu", help="cpu (one decoder thread), or cuda / cuda:N")
    ap.add_argument("--model", default=MODEL, help=f"a preset (default {MODEL}; random weights)")
    ap.add_argument("--serve-args", default="", help="more flags for `servesim serve` (e.g. --kv-cache-memory)")
    ap.add_argument("--capacity-rate", type=float, default=100,
                    help="the open-loop rate (req/s) whose simulated throughput is the capacity the loads are "
                         "fractions of: far past it (default 100, for the CPU)")
    ap.add_argument("--rerun", action="store_true", help="serve and bench again where a load's folder has a run")
    ap.add_argument("--loads", default=",".join(name for name, _, _ in LOADS),
                    help="which loads to run, comma-separated (default: all)")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    profile = a.profile or os.path.join(a.out, "profile.json")
    if not a.profile:
        t0 = time.time()
        threads = ["--threads", "1"] if a.device == "cpu" else []
        sh([a.servesim, "calibrate", "--device", a.device, "--model", a.model, *threads, "--out", profile])
        print(f"calibrated in {time.time() - t0:.0f} s", file=sys.stderr)
    cap = json.loads(sh([a.servesim, "simulate", "--profile", profile, "--json", "--quiet", *SCHEDULING]
                        + CAPACITY_WORKLOAD + ["--rate", str(a.capacity_rate)]))["throughput"]["requests_per_s"]
    rows = []
    wanted = a.loads.split(",")
    unknown = set(wanted) - {name for name, _, _ in LOADS}
    if unknown:
        sys.exit(f"--loads: unknown {sorted(unknown)}; expected some of {[name for name, _, _ in LOADS]}")
    for name, fraction, n in (load for load in LOADS if load[0] in wanted):
        rate = float(f"{fraction * cap:.2g}")
        folder = os.path.join(a.out, name)
        os.makedirs(folder, exist_ok=True)
        if os.path.exists(os.path.join(folder, "metrics.txt")) and not a.rerun:  # served already
            text, samples = scrape_file(os.path.join(folder, "metrics.txt"))
        else:
            text, samples = serve_and_bench(a, folder, rate, n)
        logged = os.path.join(folder, "iterations.jsonl")
        blocks_file = os.path.join(folder, "num_gpu_blocks")  # the prediction's KV capacity: the server's
        blocks = ["--num-gpu-blocks", open(blocks_file).read().strip()] if os.path.exists(blocks_file) else []
        sh([a.servesim, "validate", "--measured", os.path.join(folder, "bench"), "--profile", profile, *prediction_flags(a),
            *blocks,
            *(["--iteration-log", logged] if os.path.exists(logged) else []), "--out", os.path.join(folder, "validate")])
        with open(os.path.join(folder, "bench", "summary.json")) as f:
            bench = json.load(f)
        with open(os.path.join(folder, "validate", "report.json")) as f:
            report = json.load(f)
        server_ttft = (metric(samples, "vllm:time_to_first_token_seconds_sum")
                       / metric(samples, "vllm:time_to_first_token_seconds_count"))
        row = {"load": name, "rate": rate, "requests": n, "completed": bench["requests"]["completed"],
               "client_ttft_mean_ms": bench["ttft_s"]["mean"] * 1e3, "server_ttft_mean_ms": server_ttft * 1e3}
        pred = json.load(open(os.path.join(folder, "validate", "predicted", "summary.json")))
        for metric_name in ("ttft_s", "tpot_s"):
            for p in ("p50", "p90"):
                meas, pr = bench[metric_name][p], pred[metric_name][p]
                row[f"{metric_name}_{p}_measured_ms"] = meas * 1e3
                row[f"{metric_name}_{p}_predicted_ms"] = pr * 1e3
                row[f"{metric_name}_{p}_error"] = rel(pr, meas)
        server = report.get("server_iterations")
        if server:  # the server's own steps, each costed by the profile
            mape = server["iteration_mape"]
            row["iterations"] = server["iterations"]
            for kind in ("all", "decode", "prefill", "mixed"):
                row[f"iteration_mape_{kind}"] = mape[kind]
                row[f"iteration_bias_{kind}"] = mape["bias"][kind]
            row["iteration_floor"] = mape["floor"]
            tpot = server["tpot_s"]
            for p in ("p50", "p90"):  # TPOT with the server's own steps, each at its predicted cost
                if tpot["measured"]["count"] > 0:
                    row[f"tpot_s_{p}_server_ms"] = tpot["measured"][p] * 1e3
                    row[f"tpot_s_{p}_replayed_error"] = tpot["rel_error"][p]
        row["report"] = os.path.relpath(os.path.join(folder, "validate", "report.json"), a.out)
        rows.append(row)
        print(json.dumps(row), file=sys.stderr)
    with open(os.path.join(a.out, "summary.csv"), "w", newline="") as f:
        fields = list(dict.fromkeys(k for row in rows for k in row))  # every row's columns, first seen first
        w = csv.DictWriter(f, fieldnames=fields)
        w.writeheader()
        w.writerows(rows)
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                                      capture_output=True, text=True).stdout.strip(),
            "cores": os.cpu_count(),
            "device": a.device, "model": a.model, "serve_args": a.serve_args,
            "commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip(),
            "capacity_requests_per_s": cap, "rows": rows}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(meta, f, indent=2)


if __name__ == "__main__":
    main()
