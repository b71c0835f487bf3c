#!/usr/bin/python3
"""The simulator's speed through the CLI, as users run it (`servesim
simulate`, one process per run, every output written where said):

  vidur       10,000 requests of Azure conversation lengths, Llama-2-7B on
              the a100-80gb roofline, Poisson 2 and 8 req/s, with and without
              --out: wall time beside Vidur's on the same workload (quoted
              from issue 30, measured on this machine; Vidur is a pip package
              and cannot be installed here, so it is not rerun).
  throughput  Llama-3.1-8B on h200, chunked, lognormal 1000:0.7 prompts and
              200:0.7 outputs, Poisson 15 req/s, --out: simulated output
              tokens per second of wall time at 200k requests, and the cost
              per request at 50k, 100k and 200k (linear growth).
  replicas    the Azure conversation trace: 1 replica at 1x against 16
              replicas (least-requests) at 16x, wall time per simulated
              request, runs alternated.
  big         (only with --big) the throughput workload at 10M requests,
              --out into a scratch folder deleted afterwards: peak RSS.

Each figure is the median of --repeats runs (wall time measured around the
process; peak RSS from wait4); the four Vidur runs take turns, repeat after
repeat. Writes speed.json into --out.
Usage: /usr/bin/python3 experiments/speed/run.py [--servesim PATH] [--out DIR] [--big]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import provenance  # noqa: E402

ROOT = provenance.ROOT
HERE = os.path.dirname(os.path.abspath(__file__))
AZURE_CONV = os.path.join(ROOT, "data", "traces", "azure_conv_2023.csv")
# Vidur's wall time on the same 10,000 requests (issue 30): seconds, low .. high.
VIDUR_S = {2: (73.0, 80.0), 8: (24.0, 25.0)}
VIDUR_WORKLOAD = ["--model", os.path.join(HERE, "llama-2-7b.json"), "--hardware", "a100-80gb",
                  "--lengths-from-trace", AZURE_CONV, "--num-requests", "10000", "--seed", "1"]
THROUGHPUT_WORKLOAD = ["--model", "llama-3.1-8b", "--hardware", "h200", "--scheduler", "chunked",
                       "--prompt-len", "lognormal:1000:0.7", "--output-len", "lognormal:200:0.7",
                       "--rate", "15", "--seed", "1"]


def timed(servesim, args):
    """(wall seconds, peak RSS bytes, stdout) of one `servesim simulate ARGS`."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        p = subprocess.Popen([servesim, "simulate", "-q", *args], stdout=out, stderr=err)
        _, status, usage = os.wait4(p.pid, 0)  # this child's own rusage (peak RSS in KiB)
        wall = time.perf_counter() - start
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if p.returncode != 0:
            sys.exit(f"speed: servesim simulate {' '.join(args)} failed ({p.returncode}): {err.read()[-2000:]}")
        return wall, usage.ru_maxrss * 1024, out.read()


def median_wall(servesim, args, repeats, out_dir=None):
    walls = []
    for _ in range(repeats):
        run_args = list(args)
        if out_dir:
            shutil.rmtree(out_dir, ignore_errors=True)
            run_args += ["--out", out_dir]
        walls.append(timed(servesim, run_args)[0])
    return statistics.median(walls), walls


def output_tokens(out_dir):
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)["tokens"]["output"]


def part_vidur(servesim, repeats, scratch):
    # The four runs in turn, repeat after repeat, so that a slow spell of a
    # shared VM falls on all of them alike.
    configs = [(rate, out) for rate in (2, 8) for out in (False, True)]
    walls = {c: [] for c in configs}
    out_dir = os.path.join(scratch, "vidur")
    for _ in range(repeats):
        for rate, out in configs:
            args = [*VIDUR_WORKLOAD, "--rate", str(rate)]
            if out:
                shutil.rmtree(out_dir, ignore_errors=True)
                args += ["--out", out_dir]
            walls[(rate, out)].append(timed(servesim, args)[0])
    rows = []
    for rate in (2, 8):
        args = [*VIDUR_WORKLOAD, "--rate", str(rate)]
        bare, written = statistics.median(walls[(rate, False)]), statistics.median(walls[(rate, True)])
        low, high = VIDUR_S[rate]
        rows.append({"rate": rate, "command": "servesim simulate " + " ".join(args),
                     "wall_s_no_out": bare, "wall_s_with_out": written,
                     "runs_no_out": walls[(rate, False)], "runs_with_out": walls[(rate, True)],
                     "vidur_wall_s": [low, high],
                     "x_faster_no_out": low / bare, "x_faster_with_out": low / written})
        print(f"vidur: {rate} req/s: {bare:.3f} s without --out ({low / bare:.0f}x), "
              f"{written:.3f} s with ({low / written:.0f}x)", flush=True)
    return rows


def part_throughput(servesim, repeats, scratch):
    rows = []
    out_dir = os.path.join(scratch, "throughput")
    for n in (50_000, 100_000, 200_000):
        args = [*THROUGHPUT_WORKLOAD, "--num-requests", str(n)]
        wall, walls = median_wall(servesim, args, repeats, out_dir)
        tokens = output_tokens(out_dir)
        rows.append({"requests": n, "command": "servesim simulate " + " ".join(args) + " --out DIR",
                     "wall_s": wall, "runs": walls, "output_tokens": tokens,
                     "output_tokens_per_s": tokens / wall, "us_per_request": wall / n * 1e6})
        print(f"throughput: {n} requests: {wall:.2f} s, {tokens / wall / 1e6:.2f} M tokens/s, "
              f"{wall / n * 1e6:.2f} us/request", flush=True)
    return rows


def part_replicas(servesim, repeats):
    one = ["--trace", AZURE_CONV]
    sixteen = [*one, "--rate-scale", "16", "--num-replicas", "16", "--router", "least-requests"]
    walls_one, walls_sixteen = [], []
    for _ in range(repeats):  # alternated, so both see the same moments of the machine
        walls_one.append(timed(servesim, one)[0])
        walls_sixteen.append(timed(servesim, sixteen)[0])
    ratios = [b / a for a, b in zip(walls_one, walls_sixteen)]
    row = {"command_one": "servesim simulate " + " ".join(one),
           "command_sixteen": "servesim simulate " + " ".join(sixteen),
           "wall_s_one": statistics.median(walls_one), "wall_s_sixteen": statistics.median(walls_sixteen),
           "ratio_median": statistics.median(ratios), "ratios": ratios}
    print(f"replicas: 16 at 16x / 1 at 1x, wall per request: {row['ratio_median']:.2f}x "
          f"(runs {min(ratios):.2f} .. {max(ratios):.2f})", flush=True)
    return row


def part_big(servesim, scratch):
    out_dir = os.path.join(scratch, "big")
    args = [*THROUGHPUT_WORKLOAD, "--num-requests", "10000000", "--out", out_dir]
    wall, rss, _ = timed(servesim, args)
    tokens = output_tokens(out_dir)
    sizes = {name: os.path.getsize(os.path.join(out_dir, name)) for name in os.listdir(out_dir)}
    shutil.rmtree(out_dir, ignore_errors=True)
    row = {"requests": 10_000_000, "command": "servesim simulate " + " ".join(args[:-1]) + " DIR",
           "wall_s": wall, "peak_rss_bytes": rss, "output_tokens": tokens,
           "output_tokens_per_s": tokens / wall, "file_bytes": sizes}
    print(f"big: 10M requests: {wall:.1f} s, peak RSS {rss / 2**30:.2f} GiB, "
          f"{tokens / wall / 1e6:.2f} M tokens/s", flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build", "release", "cli", "servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments", "results", "speed"))
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--big", action="store_true", help="also the 10M-request run (~2-3 min, ~10 GB of scratch)")
    ap.add_argument("--parts", default="vidur,throughput,replicas", help="comma-separated parts to run")
    a = ap.parse_args()
    servesim = os.path.abspath(a.servesim)
    if not os.access(servesim, os.X_OK):
        sys.exit(f"speed: {servesim} is not an executable servesim (build it, or pass --servesim)")
    parts = set(a.parts.split(","))
    unknown = parts - {"vidur", "throughput", "replicas"}
    if unknown:
        sys.exit(f"speed: --parts: unknown part(s) {sorted(unknown)}; expected vidur, throughput, replicas")
    results = {"machine": provenance.machine(), "commit": provenance.commit(),
               "tracked_files_modified": provenance.tracked_files_modified(),
               "date": time.strftime("%Y-%m-%d"), "repeats": a.repeats}
    with tempfile.TemporaryDirectory(prefix="servesim_speed_") as scratch:
        if "vidur" in parts:
            results["vidur"] = part_vidur(servesim, a.repeats, scratch)
        if "throughput" in parts:
            results["throughput"] = part_throughput(servesim, max(1, a.repeats // 2 + 1), scratch)
        if "replicas" in parts:
            results["replicas"] = part_replicas(servesim, a.repeats)
        if a.big:
            results["big"] = part_big(servesim, scratch)
    os.makedirs(a.out, exist_ok=True)
    path = os.path.join(a.out, "speed.json")
    with open(path, "w") as f:
        json.dump(results, f, indent=2)
        f.write("\n")
    print(f"speed: wrote {path}")


if __name__ == "__main__":
    main()
