#!/usr/bin/python3
"""Choosing the draft length k: speculative decoding predicted, then checked
against real runs on this CPU.

Part `sim` (what-if, any machine, seconds): `servesim sweep` over
k = 0..8 and acceptance rate a in {0.5, 0.6, 0.7, 0.8, 0.9} at batch sizes
B in {1, 8, 32, 128} (closed loop at concurrency B, max-num-seqs B, fixed
prompt and output lengths), on two platforms:
  h200 - Llama-3.1-8B with a Llama-3.2-1B draft on the H200 datasheet (roofline);
  cpu  - small-110m with a tiny-15m draft, costed by device profiles of this
         CPU (profile_small-110m.json, profile_tiny-15m.json in --out; part
         `cpu` writes them, or pass --profiles DIR).
  -> sim_sweep.csv (every point) and best_k.csv (per platform, B and a: the
     best k for P50 TPOT, its speed-up over k = 0, the largest k that still
     beats k = 0).

Part `cpu` (real runs; run it on an idle machine, ~10 min): calibrates both
models, then `servesim validate` serves small-110m for real with speculation
and predicts it from the profiles, at B in {1, 8}, k in {0, 2, 4}:
  controlled acceptance a in {0.6, 0.9} (real draft and target compute, each
  draft accepted with probability a from a seeded generator), and
  a self-draft of the target's first 2 layers with real (exact, greedy)
  acceptance.
  -> validation.csv (per point: measured and predicted P50/P90 TPOT, their
     error in predict and replay mode, tokens per step measured and drawn).

With --max-drift F (and --host-drift report, which validate and calibrate
need to measure the drift probes) a point whose probes, just before and just
after its real run, differ from the calibration's by more than F is run
again (experiments/drift_gate.py).

Usage: experiments/speculative/run.py [--part sim|cpu|all] [--servesim PATH] [--out DIR] [--quick]
       [--host-drift off|report|interleave] [--max-drift F]
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
sys.path.insert(0, os.path.join(ROOT, "experiments"))
import drift_gate  # noqa: E402  (experiments/drift_gate.py)
BATCHES = [1, 8, 32, 128]
ALPHAS = [0.5, 0.6, 0.7, 0.8, 0.9]
K_MAX = 8
PLATFORMS = {
    # name: (base simulate flags without the profile paths, prompt, output)
    "h200": (["--model", "llama-3.1-8b", "--hardware", "h200", "--draft-model", "llama-3.2-1b"], 512, 256),
    "cpu": (["--model", "small-110m", "--draft-model", "tiny-15m"], 128, 128),
}
CPU_TARGET, CPU_DRAFT = "small-110m", "tiny-15m"
CPU_BATCHES = [1, 8]
CPU_KS = [0, 2, 4]
CPU_ALPHAS = [0.6, 0.9]
SELF_DRAFT_LAYERS = 2
CPU_PROMPT, CPU_OUTPUT = 64, 96


def sh(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def git_commit():
    try:
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
    except OSError:
        return "unknown"


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            return next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def profile_path(out, model):
    return os.path.join(out, f"profile_{model}.json")


def calibrate(opts):
    for model in [CPU_TARGET, CPU_DRAFT]:
        sh([opts.servesim, "calibrate", "--device", "cpu", "--model", model, "--out", profile_path(opts.out, model)]
           + (["--quick"] if opts.quick else []) + (["--host-drift"] if opts.host_drift != "off" else []))


def platform_flags(name, opts):
    flags, prompt, output = PLATFORMS[name]
    flags = flags + ["--prompt-len", f"fixed:{prompt}", "--output-len", f"fixed:{output}"]
    if name == "cpu":
        profiles = opts.profiles or opts.out
        flags += ["--profile", profile_path(profiles, CPU_TARGET), "--draft-profile", profile_path(profiles, CPU_DRAFT)]
    return flags


def part_sim(opts):
    rows = []
    for name in PLATFORMS:
        for batch in BATCHES:
            out = os.path.join(opts.scratch, f"sweep_{name}_b{batch}")
            requests = max(32, 4 * batch) if not opts.quick else max(8, batch)
            sh([opts.servesim, "sweep", "--quiet", "--objective", "min-tpot-p50", "--out", out,
                "--grid", f"num-speculative-tokens=0..{K_MAX}",
                "--grid", "acceptance-rate=" + ",".join(str(a) for a in ALPHAS), "--",
                *platform_flags(name, opts), "--arrival", "closed", "--concurrency", str(batch),
                "--max-num-seqs", str(batch), "--num-requests", str(requests), "--seed", "1"])
            with open(os.path.join(out, "sweep.csv")) as f:
                for r in csv.DictReader(f):
                    if r["status"] != "ok":
                        sys.exit(f"{name} B={batch}: a point failed: {r}")
                    rows.append({"platform": name, "batch": batch, "k": int(r["num-speculative-tokens"]),
                                 "alpha": float(r["acceptance-rate"]), "tpot_p50_s": float(r["tpot_p50_s"]),
                                 "tpot_p90_s": float(r["tpot_p90_s"]), "ttft_p50_s": float(r["ttft_p50_s"]),
                                 "output_tokens_per_s": float(r["output_tokens_per_s"]),
                                 "tokens_per_step": float(r["speculative_mean_accepted_tokens_per_step"] or 1.0)})
    write_csv(os.path.join(opts.out, "sim_sweep.csv"), rows)

    best = []
    for name in PLATFORMS:
        for batch in BATCHES:
            for alpha in ALPHAS:
                pts = sorted((r for r in rows if r["platform"] == name and r["batch"] == batch and r["alpha"] == alpha),
                             key=lambda r: r["k"])
                base = pts[0]["tpot_p50_s"]
                top = min(pts, key=lambda r: r["tpot_p50_s"])
                helps = [r["k"] for r in pts if r["k"] > 0 and r["tpot_p50_s"] < base]
                best.append({"platform": name, "batch": batch, "alpha": alpha, "best_k": top["k"],
                             "tpot_p50_k0_s": base, "tpot_p50_best_s": top["tpot_p50_s"],
                             "speedup": base / top["tpot_p50_s"],
                             "largest_k_that_helps": max(helps) if helps else 0,
                             "throughput_best_k": max(pts, key=lambda r: r["output_tokens_per_s"])["k"]})
    write_csv(os.path.join(opts.out, "best_k.csv"), best)


def validate_point(opts, label, batch, k, extra):
    out = os.path.join(opts.out, "validation", label)
    requests = (4 if opts.quick else 8) * max(1, batch // 2) if batch > 1 else (3 if opts.quick else 6)
    attempt, drift = drift_gate.validate_gated(
        lambda folder: sh([opts.servesim, "validate", "--device", "cpu", "--model", CPU_TARGET, "--quiet",
                           "--profile", profile_path(opts.out, CPU_TARGET), "--num-speculative-tokens", str(k),
                           *extra, "--arrival", "closed", "--concurrency", str(batch), "--max-num-seqs", str(batch),
                           "--num-requests", str(requests), "--prompt-len", f"fixed:{CPU_PROMPT}",
                           "--output-len", f"fixed:{CPU_OUTPUT}", "--seed", "1", "--host-drift", opts.host_drift,
                           "--out", folder]),
        out, opts.max_drift, opts.attempts, opts.attempt_log)
    row = {"point": label, "batch": batch, "k": k, "attempt": attempt, "anchor_drift": drift}
    for mode in ["predict", "replay"]:
        with open(os.path.join(out, f"report_{mode}.json")) as f:
            r = json.load(f)
        row[f"{mode}_tpot_p50_rel_error"] = r["tpot_s"]["rel_error"]["p50"]
        row[f"{mode}_tpot_p90_rel_error"] = r["tpot_s"]["rel_error"]["p90"]
        if mode == "predict":
            row["iteration_mape"] = r["iteration_mape"]["all"]
            row["measured_tpot_p50_s"] = r["tpot_s"]["measured"]["p50"]
            row["predicted_tpot_p50_s"] = r["tpot_s"]["predicted"]["p50"]
            spec = r.get("speculative")
            row["measured_tokens_per_step"] = spec["measured"]["mean_accepted_tokens_per_step"] if spec else 1.0
            row["predicted_tokens_per_step"] = spec["predicted"]["mean_accepted_tokens_per_step"] if spec else 1.0
    return row


def part_cpu(opts):
    if not opts.profiles:
        calibrate(opts)
    rows = []
    for batch in CPU_BATCHES:
        rows.append(validate_point(opts, f"b{batch}_k0", batch, 0, []))
        for k in [k for k in CPU_KS if k > 0]:
            for alpha in CPU_ALPHAS:
                rows.append(validate_point(opts, f"b{batch}_k{k}_a{alpha}", batch, k,
                                           ["--draft-model", CPU_DRAFT, "--draft-profile",
                                            profile_path(opts.out, CPU_DRAFT), "--acceptance-rate", str(alpha)]))
            rows.append(validate_point(opts, f"b{batch}_k{k}_self{SELF_DRAFT_LAYERS}", batch, k,
                                       ["--self-draft-layers", str(SELF_DRAFT_LAYERS)]))
    write_csv(os.path.join(opts.out, "validation.csv"), rows)
    if opts.attempt_log:
        write_csv(os.path.join(opts.out, "validation_attempts.csv"), opts.attempt_log)


def write_csv(path, rows):
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0].keys()), lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/speculative"))
    ap.add_argument("--scratch", default=None,
                    help="folder for the raw sweeps (default: runs/speculative_sweeps, not committed)")
    ap.add_argument("--part", choices=["sim", "cpu", "all"], default="all")
    ap.add_argument("--profiles", default=None,
                    help="folder with profile_small-110m.json and profile_tiny-15m.json (default: OUT; "
                         "part cpu calibrates them unless this is given)")
    ap.add_argument("--quick", action="store_true", help="quick calibration and fewer requests (a smoke test)")
    ap.add_argument("--host-drift", choices=["off", "report", "interleave"], default="off",
                    help="part cpu: validate's --host-drift (and calibrate's, unless off); report measures the "
                         "drift probes that --max-drift gates on. Default off")
    ap.add_argument("--max-drift", type=float, default=0.0,
                    help="part cpu: rerun a point whose drift probes (just before and after its real run) differ "
                         "from the calibration's by more than this fraction, up to --attempts times, keeping the "
                         "attempt that drifted least (experiments/drift_gate.py; validation_attempts.csv lists "
                         "every attempt; needs --host-drift report or interleave). Default 0: off")
    ap.add_argument("--attempts", type=int, default=3, help="most runs of one point under --max-drift")
    opts = ap.parse_args()
    if opts.max_drift > 0 and opts.host_drift == "off":
        ap.error("--max-drift needs --host-drift report or interleave: with --host-drift off validate measures "
                 "no drift probes to gate on")
    opts.attempt_log = []
    os.makedirs(opts.out, exist_ok=True)
    opts.scratch = opts.scratch or os.path.join(ROOT, "runs", "speculative_sweeps")
    os.makedirs(opts.scratch, exist_ok=True)

    if opts.part in ("cpu", "all"):
        part_cpu(opts)
    if opts.part in ("sim", "all"):
        part_sim(opts)
    meta_path = os.path.join(opts.out, "metadata.json")
    meta = json.load(open(meta_path)) if os.path.exists(meta_path) else {}
    meta[opts.part] = {"command": "experiments/speculative/run.py " + " ".join(sys.argv[1:]),
                       "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                       "commit": git_commit(), "machine": f"{cpu_name()} ({os.cpu_count()} cores), {platform.node()}",
                       "quick": opts.quick}
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
