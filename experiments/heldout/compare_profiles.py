#!/usr/bin/python3
"""Several profiles on the same measured iterations: the held-out workloads
(experiments/heldout/workloads.py) each served once for real (`servesim run
--iteration-log`), then every logged iteration costed with each profile
(`servesim validate --measured RUN --iteration-log LOG --profile P`), and
each profile's independent prediction of the run's requests beside the
measured ones. A difference between two profiles is then the profiles',
not two runs' (the machine's level moves between runs: docs/noisy-hosts.md).

Per workload and profile: iteration MAPE, the run's noise floor (the same
for every profile), the worst (kind x sequences) bucket with >= 10
iterations, and the P50 / P90 errors of TTFT and TPOT of the prediction.
The targets are run.py's (docs/validation.md, "Held-out suite").

--profile NAME=PATH names a profile (repeatable; the first one sets each
workload's rate, as run.py's --profile does). --calibrate NAME=MODE
calibrates one here instead (MODE full or quick, with --threads).
--thin NAME=SOURCE:TOKENS[:ROWS] adds SOURCE's profile with its GEMM (and
elementwise) tables kept at TOKENS only and its LM-head (and sampling)
tables at ROWS only, every point above 64 kept: what a sparser grid of the
same calibration would have measured, as long as TOKENS keeps the batch
sizes the decode-step factor was measured at (the factor is measured
against the tables there; a warning names any that TOKENS drops).

Writes into --out: summary.csv (a row per workload and profile), shapes.csv
(the buckets), by_batch.csv (decode iterations by their exact number of
sequences, all workloads together: per profile the median predicted /
measured, and predicted / the first profile's predicted on the same
iterations), workloads.jsonl, metadata.json, the profiles it made, and per
workload the run (requests.csv, summary.json, iteration_log.jsonl.gz: enough
to cost the run again with any profile) and one validate folder per profile
(iteration_breakdown.csv, and the first profile's report.json; --keep-runs
keeps everything).

Usage: experiments/heldout/compare_profiles.py (--profile NAME=PATH | --calibrate NAME=full|quick)...
       [--thin NAME=SOURCE:1,2,4,...[:1,2,4,...]] [--threads N] [--count N] [--first I] [--requests N]
       [--out DIR] [--servesim BIN]
"""
import argparse
import csv
import datetime
import gzip
import json
import os
import shutil
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import provenance  # noqa: E402
import run as suite  # noqa: E402
import workloads  # noqa: E402

TOKEN_TABLES = ("gemm_qkv", "gemm_o", "gemm_gate_up", "gemm_down", "elementwise")
ROW_TABLES = ("lm_head", "sampling")


def named(text, flag):
    name, sep, value = text.partition("=")
    if not sep or not name or not value:
        sys.exit(f"{flag} takes NAME=VALUE (got {text!r})")
    return name, value


def ints(text, flag):
    try:
        values = [int(x) for x in text.split(",") if x]
    except ValueError:
        sys.exit(f"{flag}: not a list of integers: {text!r}")
    if not values or min(values) < 1:
        sys.exit(f"{flag}: needs positive integers (got {text!r})")
    return values


def thin_profile(source, destination, tokens, rows):
    """SOURCE with its 1-D token tables kept at `tokens` and its row tables
    at `rows`, plus every point above 64 (the sparse part every grid has)."""
    with open(source) as f:
        profile = json.load(f)
    tables = profile["tables"]
    for names, keep in ((TOKEN_TABLES, tokens), (ROW_TABLES, rows)):
        for name in names:
            t = tables[name]
            kept = [(x, s) for x, s in zip(t["x"], t["seconds"]) if int(x) in keep or x > 64]
            t["x"], t["seconds"] = [x for x, _ in kept], [s for _, s in kept]
    dropped = [int(b) for b in tables.get("decode_in_situ", {}).get("x", []) if int(b) not in tokens and b <= 64]
    if dropped:
        print(f"warning: {os.path.basename(destination)}: the decode-step factor was measured against the tables at "
              f"{dropped} sequences, which TOKENS drops: there it is not what a sparser calibration would measure",
              file=sys.stderr)
    profile["metadata"]["thinned"] = {"source": os.path.relpath(source, ROOT), "tokens": tokens, "rows": rows,
                                      "meaning": "the source's 1-D tables kept at these points (and above 64) "
                                                 "by experiments/heldout/compare_profiles.py"}
    with open(destination, "w") as f:
        json.dump(profile, f, indent=1)
        f.write("\n")


def row_of(w, rate, name, report):
    """run.py's row from a `validate --measured --iteration-log` report."""
    checked = report["server_iterations"]
    return suite.row_of(w, rate, {"iteration_mape": checked["iteration_mape"],
                                  "iteration_breakdown": checked["iteration_breakdown"],
                                  "ttft_s": report["ttft_s"], "tpot_s": report["tpot_s"]}) | {"profile": name}


def where(path, out):
    """A profile's path: within --out relative to it, else relative to the repository."""
    inside = os.path.abspath(path).startswith(os.path.abspath(out) + os.sep)
    return os.path.relpath(path, out if inside else ROOT)


def median(values):
    v = sorted(values)
    return None if not v else (v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2]))


def batch_rows(folders, names):
    """by_batch.csv's rows from each workload folder's <profile>/iterations.csv (the same iterations in the
    same order for every profile; the first profile is the reference)."""
    ratio, versus = {}, {}
    for folder in folders:
        tables = {}
        for name in names:
            with open(os.path.join(folder, name, "iterations.csv")) as f:
                tables[name] = list(csv.DictReader(f))
        reference = tables[names[0]]
        for name in names:
            if len(tables[name]) != len(reference):
                sys.exit(f"{folder}: {name} costed {len(tables[name])} iterations, {names[0]} {len(reference)}")
            for it, ref in zip(tables[name], reference):
                if it["kind"] != "decode" or float(it["measured_s"]) <= 0:
                    continue
                key = (name, int(it["decode_sequences"]))
                ratio.setdefault(key, []).append(float(it["predicted_s"]) / float(it["measured_s"]))
                versus.setdefault(key, []).append(float(it["predicted_s"]) / float(ref["predicted_s"]))
    return [{"profile": name, "sequences": b, "iterations": len(ratio[(name, b)]),
             "median_predicted_over_measured": median(ratio[(name, b)]),
             f"median_predicted_over_{names[0]}": median(versus[(name, b)])}
            for name in names for b in sorted(b for n, b in ratio if n == name)]


def prune(folder, names):
    """Keeps the run's requests.csv, summary.json and its log (gzipped), each profile's
    iteration_breakdown.csv and the first profile's report.json (summary.csv has the others' figures)."""
    run_dir = os.path.join(folder, "run")
    log = os.path.join(run_dir, "iteration_log.jsonl")
    with open(log, "rb") as src, gzip.open(log + ".gz", "wb") as dst:
        shutil.copyfileobj(src, dst)
    for sub, keep in [("run", {"requests.csv", "summary.json", "iteration_log.jsonl.gz"})] + [
            (name, {"report.json", "iteration_breakdown.csv"} if name == names[0] else {"iteration_breakdown.csv"})
            for name in names]:
        for entry in os.listdir(os.path.join(folder, sub)):
            path = os.path.join(folder, sub, entry)
            if entry not in keep:
                shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
    os.remove(os.path.join(folder, "trace.csv"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--profile", action="append", default=[], metavar="NAME=PATH")
    ap.add_argument("--calibrate", action="append", default=[], metavar="NAME=full|quick")
    ap.add_argument("--thin", action="append", default=[], metavar="NAME=SOURCE:TOKENS[:ROWS]")
    ap.add_argument("--split", default="heldout", choices=sorted(workloads.SPLITS))
    ap.add_argument("--count", type=int, default=8)
    ap.add_argument("--first", type=int, default=0)
    ap.add_argument("--requests", type=int, default=40)
    ap.add_argument("--threads", type=int, help="decoder threads for calibrate and run (default: theirs)")
    ap.add_argument("--keep-runs", action="store_true", help="keep every file of the runs and validations")
    ap.add_argument("--out", required=True)
    opts = ap.parse_args()
    if opts.count < 1:
        ap.error("--count must be >= 1")
    os.makedirs(opts.out, exist_ok=True)
    threads = ["--threads", str(opts.threads)] if opts.threads else []

    profiles, calibration_s = {}, {}
    for text in opts.profile:
        name, path = named(text, "--profile")
        if not os.path.isfile(path):
            sys.exit(f"--profile {name}: no file {path}")
        profiles[name] = path
    for text in opts.calibrate:
        name, mode = named(text, "--calibrate")
        if mode not in ("full", "quick"):
            sys.exit(f"--calibrate {name}: the mode is full or quick (got {mode!r})")
        path = os.path.join(opts.out, f"profile_{name}.json")
        t0 = time.monotonic()
        suite.sh([opts.servesim, "calibrate", "--device", "cpu", "--model", suite.MODEL, "--out", path]
                 + (["--quick"] if mode == "quick" else []) + threads)
        calibration_s[name] = time.monotonic() - t0
        profiles[name] = path
    for text in opts.thin:
        name, spec = named(text, "--thin")
        parts = spec.split(":")
        if len(parts) not in (2, 3) or parts[0] not in profiles:
            sys.exit(f"--thin {name}: SOURCE:TOKENS[:ROWS] with SOURCE one of {sorted(profiles)} (got {spec!r})")
        tokens = ints(parts[1], "--thin")
        rows = ints(parts[2], "--thin") if len(parts) == 3 else tokens
        path = os.path.join(opts.out, f"profile_{name}.json")
        thin_profile(profiles[parts[0]], path, tokens, rows)
        profiles[name] = path
    if not profiles:
        ap.error("name at least one --profile or --calibrate")
    reference = next(iter(profiles.values()))

    rows, shapes = [], []
    drawn = suite.draw_workloads(opts)
    for k, w in enumerate(drawn):
        print(f"[{k + 1}/{len(drawn)}] {w['name']}", file=sys.stderr, flush=True)
        folder, flags, rate = suite.prepare(opts.servesim, reference, w, opts.out)
        run_dir, log = os.path.join(folder, "run"), os.path.join(folder, "run", "iteration_log.jsonl")
        os.makedirs(run_dir, exist_ok=True)
        suite.sh([opts.servesim, "run", "--device", "cpu", "--model", suite.MODEL, "--seed", str(w["seed"] % 1_000_000),
                  "--quiet", "--iteration-log", log, "--out", run_dir] + threads + suite.scheduler_flags(w) + flags)
        for name, path in profiles.items():
            out = os.path.join(folder, name)
            suite.sh([opts.servesim, "validate", "--measured", run_dir, "--iteration-log", log,
                      "--model", suite.MODEL, "--profile", path, "--quiet", "--out", out]
                     + suite.scheduler_flags(w))
            with open(os.path.join(out, "report.json")) as f:
                report = json.load(f)
            rows.append(row_of(w, rate, name, report))
            for b in report["server_iterations"]["iteration_breakdown"]["by_kind_sequences"]:
                shapes.append({"workload": w["name"], "profile": name,
                               **{key: b[key] for key in ("kind", "sequences", "count", "median_ratio", "mape", "bias")}})
            r = rows[-1]
            print(f"    {name}: MAPE {100 * r['iteration_mape']:.1f}% (floor {100 * (r['floor'] or 0):.1f}%), worst "
                  f"bucket {r['worst_bucket']} x{r['worst_bucket_median_ratio'] or 0:.3f}; TTFT P50/P90 "
                  f"{suite.pct(r['ttft_p50_rel_error'])} / {suite.pct(r['ttft_p90_rel_error'])}, TPOT "
                  f"{suite.pct(r['tpot_p50_rel_error'])} / {suite.pct(r['tpot_p90_rel_error'])}",
                  file=sys.stderr, flush=True)
        suite.write_csv(os.path.join(opts.out, "summary.csv"), rows)
        suite.write_csv(os.path.join(opts.out, "shapes.csv"), shapes)

    folders = [os.path.join(opts.out, w["name"]) for w in drawn]
    suite.write_csv(os.path.join(opts.out, "by_batch.csv"), batch_rows(folders, list(profiles)))
    if not opts.keep_runs:
        for folder in folders:
            prune(folder, list(profiles))
    for name in profiles:
        mine = [r for r in rows if r["profile"] == name]
        worst = max(mine, key=lambda r: r["iteration_mape"])
        print(f"{name}: MAPE target met at {sum(r['mape_ok'] for r in mine)} of {len(mine)}, every bucket within 5% "
              f"at {sum(r['buckets_ok'] for r in mine)}, P50/P90 TTFT and TPOT within 10% at "
              f"{sum(r['latency_ok'] for r in mine)}; worst MAPE {100 * worst['iteration_mape']:.1f}%")
    meta = {"command": "experiments/heldout/compare_profiles.py " + " ".join(sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": provenance.commit(), "machine": provenance.machine(),
            "profiles": {n: where(p, opts.out) for n, p in profiles.items()}, "calibration_s": calibration_s,
            "threads": opts.threads, "split": opts.split, "first": opts.first, "count": opts.count,
            "requests": opts.requests}
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
