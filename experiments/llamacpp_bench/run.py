#!/usr/bin/python3
"""A prediction checked against an engine servesim did not write and whose
kernels it cannot time: llama.cpp (node-llama-cpp's prebuilt CPU binaries)
serving a random-weight GGUF of small-110m's shape behind
tools/llamacpp/server.mjs: one thread, chunked batches of at most 256 tokens,
step-synchronous decode calls, 32 sequences.

1. Install node-llama-cpp into --npm-dir (from the npm registry), write the
   GGUF (tools/llamacpp/write_gguf.py, from `servesim models --config-json`).
2. For each load (light and mid Poisson, heavy closed loop): a fresh server,
   `servesim bench` against it (completions, token-id prompts, --ignore-eos).
3. `servesim fit` (FITS): the roofline's compute and memory efficiencies and
   per-iteration overhead, against tools/llamacpp/cpu-core.hardware.json's
   nominal ceilings, on the light run (mid and heavy held out) and on light +
   heavy (mid held out); then the same with the per-sequence overhead too.
   fit.json reports each run's P50/P90 TTFT and TPOT against the measured.
4. summary.json and summary.csv: per fit and run, the errors.
Run it on an idle machine.
Usage: experiments/llamacpp_bench/run.py [--servesim PATH] [--out DIR] [--npm-dir DIR] [--rerun]
"""
import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools", "llamacpp"))
import engine  # noqa: E402

MODEL = "small-110m"
PARALLEL, CTX_PER_SEQ, BATCH = 32, 1024, 256
SCHEDULING = ["--scheduler", "chunked", "--max-num-seqs", str(PARALLEL), "--max-num-batched-tokens", str(BATCH)]
LENGTHS = ["--prompt-len", "uniform:16:256", "--output-len", "uniform:16:128"]
LOADS = {  # name: the arrival flags
    "light": ["--rate", "0.15", "--num-requests", "30"],
    "mid": ["--rate", "0.5", "--num-requests", "60"],
    "heavy": ["--arrival", "closed", "--concurrency", "16", "--num-requests", "64"],
}
FITS = {  # name: (fitted runs, held-out runs, fitted parameters)
    "light-3": (["light"], ["mid", "heavy"], "compute-efficiency,memory-efficiency,iteration-overhead"),
    "light-heavy-3": (["light", "heavy"], ["mid"], "compute-efficiency,memory-efficiency,iteration-overhead"),
    "light-heavy-4": (["light", "heavy"], ["mid"],
                      "compute-efficiency,memory-efficiency,iteration-overhead,sequence-overhead"),
}
HARDWARE = os.path.join(ROOT, "tools", "llamacpp", "cpu-core.hardware.json")


def sh(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def bench(a, folder, gguf, load):
    os.makedirs(folder, exist_ok=True)
    with engine.LlamaCppServer(a.npm_dir, gguf, MODEL, parallel=PARALLEL, ctx_per_seq=CTX_PER_SEQ,
                               batch_size=BATCH, log_path=os.path.join(folder, "server.log")) as server:
        sh([a.servesim, "bench", "--base-url", server.url, *load, *LENGTHS, "--seed", "2", "--ignore-eos",
            "--vocab-size", "32000", "--out", os.path.join(folder, "bench"), "-q"])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/llamacpp_bench"))
    ap.add_argument("--npm-dir", default=os.path.join(ROOT, "build/npm-llamacpp"))
    ap.add_argument("--model-dir", default="/tmp/servesim-llamacpp-model", help="where the GGUF is written")
    ap.add_argument("--rerun", action="store_true", help="bench again where a load's folder has a run")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    engine.install(a.npm_dir)
    gguf = engine.write_model(a.servesim, MODEL, a.model_dir)
    for name, load in LOADS.items():
        folder = os.path.join(a.out, name)
        if a.rerun or not os.path.exists(os.path.join(folder, "bench", "summary.json")):
            t0 = time.time()
            bench(a, folder, gguf, load)
            print(f"{name}: benched in {time.time() - t0:.0f} s", file=sys.stderr)
    rows, fits = [], {}
    for fit_name, (fitted, held, parameters) in FITS.items():
        folder = os.path.join(a.out, "fit-" + fit_name)
        cmd = [a.servesim, "fit", "--model", MODEL, "--hardware", HARDWARE, *SCHEDULING, "--fit-parameters",
               parameters, "--out", folder, "-q"]
        for r in fitted:
            cmd += ["--measured", os.path.join(a.out, r, "bench")]
        for r in held:
            cmd += ["--held-out", os.path.join(a.out, r, "bench")]
        t0 = time.time()
        sh(cmd)
        with open(os.path.join(folder, "fit.json")) as f:
            report = json.load(f)
        fits[fit_name] = {"parameters": parameters, "fitted": report["fitted"],
                          "rms_rel_error": report["rms_rel_error"],
                          "held_out_objective": report.get("held_out_objective"),
                          "evaluations": report["evaluations"], "wall_s": round(time.time() - t0, 1)}
        for role, entries in (("fitted", report["fitted_runs"]), ("held-out", report["held_out"])):
            for e in entries:
                row = {"fit": fit_name, "role": role, "run": os.path.basename(os.path.dirname(e["source"])),
                       "rms_rel_error": e["rms_rel_error"]}
                for metric in ("ttft_s", "tpot_s"):
                    for p in ("p50", "p90"):
                        key = f"{metric[:4]}_{p}"
                        row[f"{key}_measured_ms"] = e[metric]["measured"][p] * 1e3
                        row[f"{key}_predicted_ms"] = e[metric]["predicted"][p] * 1e3
                        row[f"{key}_error"] = e[metric]["rel_error"][p]
                rows.append(row)
    fieldnames = list(rows[0])
    with open(os.path.join(a.out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fieldnames)
        w.writeheader()
        w.writerows(rows)
    loads = {}
    for name in LOADS:
        with open(os.path.join(a.out, name, "bench", "summary.json")) as f:
            s = json.load(f)
        loads[name] = {"flags": LOADS[name], "completed": s["requests"]["completed"],
                       "mean_ttft_ms": s["ttft_s"]["mean"] * 1e3, "p50_tpot_ms": s["tpot_s"]["p50"] * 1e3}
    meta = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "machine": subprocess.run(["sh", "-c", "lscpu | grep 'Model name' | sed 's/.*: *//'"],
                                      capture_output=True, text=True).stdout.strip(),
            "cores": os.cpu_count(),
            "commit": subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                                     text=True).stdout.strip(),
            "engine": {"packages": engine.PACKAGES, "model": MODEL, "parallel": PARALLEL, "ctx_per_seq": CTX_PER_SEQ,
                       "batch_size": BATCH, "threads": 1},
            "loads": loads, "fits": fits, "rows": rows}
    with open(os.path.join(a.out, "summary.json"), "w") as f:
        json.dump(meta, f, indent=2)
    print(json.dumps(fits, indent=2))


if __name__ == "__main__":
    main()
