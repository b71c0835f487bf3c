#!/usr/bin/python3
"""The held-out validation suite (experiments/heldout/): its workload
generator, deterministic per seed and apart from the tuning split, and one
small held-out workload validated after a quick calibration, its error by
shape bounded loosely, so a change that brings back a 20% shape-dependent
bias cannot land.

Run one case:   heldout_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: heldout_test.py --list
"""

import csv
import importlib.util
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, Failure, Skipped, check, run_case_from_argv  # noqa: E402

CASES, case = case_registry()


def generator(ctx):
    path = os.path.join(ctx.source_dir, "experiments", "heldout", "workloads.py")
    spec = importlib.util.spec_from_file_location("heldout_workloads", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@case
def heldout_workloads_deterministic(ctx):
    w = generator(ctx)
    a = [w.draw("heldout", i) for i in range(12)]
    b = [w.draw("heldout", i) for i in range(12)]
    check(a == b, "the same split and index drew different workloads")
    check(len({x["name"] for x in a}) == 12, "workload names repeat")
    t = [w.draw("tuning", i) for i in range(12)]
    check(not ({x["seed"] for x in a} & {x["seed"] for x in t}), "held-out and tuning seeds overlap")
    check(len({x["arrival"] for x in a + t}) >= 3 and len({x["prompts"] for x in a + t}) >= 3,
          "24 workloads span fewer than 3 arrival kinds or prompt mixes")
    for x in a + t:
        reqs = w.requests_of(x)
        check(reqs == w.requests_of(x), f"{x['name']}: requests differ between two calls")
        check(len(reqs) == x["requests"], f"{x['name']}: {len(reqs)} requests")
        check(all(p + o <= x["max_positions"] and p >= 1 and o >= 1 for _, p, o in reqs),
              f"{x['name']}: a request does not fit {x['max_positions']} positions")
        times = [r[0] for r in reqs]
        check(times == sorted(times) and times[0] == 0, f"{x['name']}: arrivals not ascending from 0")
    # Gaps average 1 s for every open-loop kind (the driver scales them by --rate-scale).
    for kind in ["poisson", "gamma", "bursty"]:
        x = dict(a[0], arrival=kind, cv=3.0, requests=4000, seed=123)
        reqs = w.requests_of(x)
        mean_gap = reqs[-1][0] / (len(reqs) - 1)
        check(0.85 < mean_gap < 1.15, f"{kind}: mean gap {mean_gap:.3f} s, not about 1 s")
    # A bimodal mix draws both modes, nothing between them.
    x = dict(a[0], prompts="bimodal", outputs="short", requests=500, seed=5)
    prompts = [p for _, p, _ in w.requests_of(x)]
    short = sum(48 <= p <= 96 for p in prompts)
    check(all(48 <= p <= 96 or 300 <= p <= 600 for p in prompts), "bimodal prompt outside both modes")
    check(0.5 < short / len(prompts) < 0.7, f"bimodal: {short / len(prompts):.2f} short, not about 0.6")
    path = ctx.path("trace.csv")
    os.makedirs(ctx.work_dir, exist_ok=True)
    w.write_trace(a[0], path)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    check([(float(r["arrival_s"]), int(r["prompt_tokens"]), int(r["output_tokens"])) for r in rows] ==
          [(round(t, 6), p, o) for t, p, o in w.requests_of(a[0])], "the trace differs from the requests")
    try:
        w.draw("other", 0)
        raise Failure("an unknown split was accepted")
    except ValueError as e:
        check("other" in str(e), f"the error does not name the split: {e}")


def heldout_misses(ctx, out):
    """One held-out workload (heldout03: gamma arrivals of cv 2 at 0.7 of capacity, a
    bimodal prompt mix, short outputs: decode batches of 1 to 16) after a quick
    one-thread calibration; the bounds it misses (an empty list when they hold), the run's noise floor and
    the share of the CPUs other processes took during the calibration."""
    cmd = [sys.executable, os.path.join(ctx.source_dir, "experiments", "heldout", "run.py"), "--servesim",
           ctx.servesim, "--quick", "--threads", "1", "--count", "1", "--first", "3", "--requests", "40", "--out", out]
    print("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=280)
    print(p.stderr[-3000:])
    check(p.returncode == 0, f"run.py exited {p.returncode}")
    with open(os.path.join(out, "summary.csv")) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == 1, f"{len(rows)} rows in summary.csv")
    with open(os.path.join(out, "shapes.csv")) as f:
        shapes = [r for r in csv.DictReader(f) if int(r["count"]) >= 10]
    decode = [float(r["median_ratio"]) for r in shapes if r["kind"] == "decode"]
    check(len(decode) >= 3, f"only {len(decode)} decode shapes with 10 iterations or more")
    misses = []
    # One thread: no placement of two threads to change. The level may still move
    # between calibration and run; a bias by shape is the spread across buckets.
    if max(decode) / min(decode) > 1.25:
        misses.append(f"decode medians by batch size span {min(decode):.3f}..{max(decode):.3f}")
    for r in shapes:
        if abs(float(r["median_ratio"]) - 1) > 0.35:
            misses.append(f"{r['kind']} x {r['sequences']}: median {float(r['median_ratio']):.3f}")
    with open(os.path.join(out, rows[0]["workload"], "report_predict.json")) as f:
        report = json.load(f)
    check(sum(b["count"] for b in report["iteration_breakdown"]["by_kind_sequences"]) ==
          report["iteration_mape"]["counts"]["all"], "the breakdown does not cover every iteration")
    with open(os.path.join(out, "profile.json")) as f:
        others = json.load(f)["metadata"]["machine_load"]["others_cpu_share"]
    return misses, float(rows[0]["floor"] or 0), float(others)


# This workload's own noise floor (iteration MAPE with the run's level known at
# every moment) was 3.5-4.4% in the committed one-thread runs on the EPYC VM and
# 8.3-12.6% in the hours whose runs spread the buckets 1.3-1.4x by themselves:
# above this, a run cannot tell a 20% shape bias from the machine.
MAX_FLOOR = 0.07
# A calibration during which other processes took more of the CPUs than this
# says its own timings are suspect (calibrate's warning): its profile cannot
# test the bound either (in CI once, 40-49% while another build ran).
MAX_OTHERS_CPU_SHARE = 0.05


@case
def validate_heldout_bias(ctx):
    # A level change of 1.5x between a quick calibration's tables and its
    # whole-model steps, or between the calibration and the run, happens on a
    # shared VM and spreads the buckets by itself; a miss is measured again
    # with a new calibration, up to three times. A bias of the model's own
    # comes back at every attempt. An attempt on a machine too noisy to test
    # the bound (floor above MAX_FLOOR, or a calibration that shared the CPUs
    # beyond MAX_OTHERS_CPU_SHARE) counts neither way.
    misses, tested, floors = [], 0, []
    for attempt in range(1, 4):
        misses_now, floor, others = heldout_misses(ctx, ctx.path(f"heldout_{attempt}"))
        floors.append(floor)
        why = (f"the run's noise floor {floor:.3f} is above {MAX_FLOOR}" if floor > MAX_FLOOR else
               f"other processes took {others:.0%} of the CPUs during its calibration" if others > MAX_OTHERS_CPU_SHARE
               else None)
        if why:
            print(f"attempt {attempt}: {why}: it cannot test the bound"
                  + (f" (it missed: {'; '.join(misses_now)})" if misses_now else ""))
            continue
        tested += 1
        misses = misses_now
        if not misses:
            return
        print(f"attempt {attempt}: bounds missed: " + "; ".join(misses))
    if tested == 0:
        raise Skipped("the machine was too noisy or too busy at every attempt (the runs' noise floors "
                      + ", ".join(f"{f:.3f}" for f in floors) + f"; at most {MAX_FLOOR} and a calibration with "
                      f"others' CPU share at most {MAX_OTHERS_CPU_SHARE} test the bound)")
    check(not misses, "; ".join(misses))


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
