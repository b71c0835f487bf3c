#!/usr/bin/python3
"""Validation of the profile cost model on this CPU: small-110m served for real
and predicted, at three loads with the continuous and chunked schedulers.

1. `servesim calibrate` (full mode) writes the device profile.
2. For each scheduler and load, one `servesim validate` serves the workload
   with the built-in decoder and predicts it twice from the profile:
   replay (the real run's own iterations re-costed) and predict (an
   independent simulation of the same workload).
3. summary.csv: per-iteration MAPE (all/decode/prefill/mixed) and the
   relative errors of P50/P90 TTFT and TPOT, per point and mode.

Run it on an idle machine: other processes on the two cores distort the
real runs. This VM also changes its memory speed from minute to minute (the
same decode step takes 6.5 ms or 9.5 ms): with --max-drift F a point whose
anchor probes, measured just before and after its real run, differ from the
calibration's by more than F (with --anchor apply, which re-anchors the
predictions on the probes: differ from each other by more than F) is run
again, up to --attempts times (experiments/drift_gate.py); the attempt that
drifted least is kept, attempts.csv lists every attempt and the
NAME.attemptN folders keep each attempt's reports.

The VM also moves its two vCPUs between cores that share an L3 and cores
on two CCDs (calib/placement.h), which changes the decode speed by about 1.4x:
with --calibration-attempts N the calibration is repeated, up to N times,
while fewer than 85% of its anchor probes saw one placement, and the gate
above also reruns a point whose real run spent more than F of its
iterations in the other placement. With --placement apply each iteration
is costed in the placement it ran in (validate --placement apply, by the
full calibration's placement ratios), so only iterations in a placement
the profile has no ratios for count.

Within one placement the VM still drifts by 5-10% over minutes. With
--in-situ refresh every validate times the profile's whole-model prefills
and decode steps again just before and just after its real run and
predicts with them (calib/in_situ_refresh.h); the gate's drift is then how
much those timings moved over the run.

Some moments of the VM are noisier than others: the same decode step,
timed over and over for 25-60 s, had a coefficient of variation of 3% in
some windows and 7-11% in others within one hour. Each
validate reports its run's noise floor (iteration_mape.floor: the MAPE of
a cost model that knew the run's level at every moment). With --max-floor
F2 the gate also reruns a point whose floor is above F2, and keeps the
attempt nearest to passing both bounds; attempts.csv gives every attempt's
floor. With --in-situ interleave the level is timed all through the run,
so drift over a run no longer spoils its prediction: --max-floor alone
(without --max-drift) then gates on the noise only. A kept point's MAPE
sits a little above its floor (0.0-1.5% on the Xeon VM), so a bound of
0.045 leaves room under the 5% target where 0.05 does not: on that VM, of
the points with floors of 4.5-5%, 23 of 30 missed 5% MAPE; of those
under 4.5%, 3 of 86 (floor_bands.py over the committed points).

The noise also comes in spells: floors of 3.7% and of 8-13% came ten
minutes apart, and back-to-back attempts of one point tend to share a
spell. With --spread the attempts run in rounds instead: the first
attempt of every point, then a second of each point that missed the gate,
and so on, so one point's attempts are a round (minutes) apart.

Usage: experiments/validation_cpu/run.py [--servesim PATH] [--out DIR] [--quick] [--max-drift F]

The same study runs on a GPU (experiments/gpu/run.sh calls it): --device
cuda --model llama-3.1-8b --loads light:20:100,... and --extra flags for
calibrate and validate (e.g. --kv-cache-memory).
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
MODEL = "small-110m"
# Prompts uniform 16..256, outputs uniform 16..128 (the `run` defaults): on
# this 2-core VM small-110m saturates near 3 requests/s.
# The default loads, as fractions of this machine's capacity: the requests/s
# the profile's simulation serves when requests arrive far faster than that
# (capacity() below). On the 2-core AMD EPYC VM of the first studies the
# capacity was 5.14 req/s and the loads 0.5, 2.5 and 5.0 req/s; fractions
# keep the three loads' meaning on a slower or faster machine.
# The light point has as many requests as the overloaded one: its TTFT is
# about each request's own prefill, which runs 0.88-1.16x its point's
# level (10th-90th percentile) in spells too short to time, so the P50 and
# P90 of 16 requests missed 10% in about 11% of drawn points from that
# scatter alone, and of 48 in 3% (light_sample_size.py over the Xeon VM's
# 30 light points of 16).
LOADS = [  # name, fraction of capacity, requests
    ("light", 0.1, 48),
    ("near-saturation", 0.5, 40),
    ("overloaded", 1.0, 48),
]
# The workload whose capacity sets the loads: validate's default lengths.
CAPACITY_WORKLOAD = ["--rate", "100", "--num-requests", "400", "--prompt-len", "uniform:16:256",
                     "--output-len", "uniform:16:128", "--seed", "1"]
SCHEDULERS = ["continuous", "chunked"]


def sh(cmd):
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"failed ({done.returncode}): {' '.join(cmd)}\n{done.stderr}")
    return done.stdout


def placement_share(profile):
    """Share of the calibration's anchor probes with a known placement that
    saw the placement most of them saw; None when no probe's placement is
    known (one thread: nothing to watch, or an older profile)."""
    with open(profile) as f:
        counts = json.load(f).get("metadata", {}).get("anchor_probes", {}).get("placement_counts") or {}
    known = counts.get("near", 0) + counts.get("far", 0)
    return max(counts.get("near", 0), counts.get("far", 0)) / known if known else None


def capacity(servesim, profile):
    """Requests/s the profile's simulation (chunked, the default scheduler)
    serves under CAPACITY_WORKLOAD: the throughput the loads are scaled to."""
    summary = json.loads(sh([servesim, "simulate", "--profile", profile, "--json", "--quiet"] + CAPACITY_WORKLOAD))
    return summary["throughput"]["requests_per_s"]


def scaled_loads(fractions, capacity_rps):
    """Each load's rate: its fraction of the capacity, to two significant digits."""
    return [(name, float(f"{fraction * capacity_rps:.2g}"), n) for name, fraction, n in fractions]


def write_summary(out, rows):
    with open(os.path.join(out, "summary.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def summary_rows(point, scheduler, load, rate, n, attempt, score, anchor):
    """summary.csv's two rows (replay, predict) of one point's kept attempt,
    each also printed as a line on stderr."""
    rows = []
    for mode in ["replay", "predict"]:
        with open(os.path.join(point, f"report_{mode}.json")) as f:
            r = json.load(f)
        rows.append({
            "scheduler": scheduler, "load": load, "rate": rate, "requests": n, "mode": mode,
            "attempt": attempt, "gate_score": score,
            "anchor_drift": drift_gate.drift_of(point, anchor),
            "placement_mismatch": drift_gate.placement_mismatch_of(point),
            "iteration_mape_all": r["iteration_mape"]["all"],
            "iteration_mape_floor": r["iteration_mape"].get("floor", float("nan")),
            "iteration_mape_decode": r["iteration_mape"]["decode"],
            "iteration_mape_prefill": r["iteration_mape"]["prefill"],
            "iteration_mape_mixed": r["iteration_mape"]["mixed"],
            "ttft_p50_rel_error": r["ttft_s"]["rel_error"]["p50"],
            "ttft_p90_rel_error": r["ttft_s"]["rel_error"]["p90"],
            "tpot_p50_rel_error": r["tpot_s"]["rel_error"]["p50"],
            "tpot_p90_rel_error": r["tpot_s"]["rel_error"]["p90"],
            **{f"single_{m}_{q}_rel_error":
               r[f"{m}_s"].get("single_simulation", {}).get("rel_error", {}).get(q, float("nan"))
               for m in ("ttft", "tpot") for q in ("p50", "p90")},
            "measured_ttft_p50_s": r["ttft_s"]["measured"]["p50"],
            "measured_tpot_p50_s": r["tpot_s"]["measured"]["p50"],
        })
        print(f"{scheduler:10} {load:16} {mode:7} MAPE {rows[-1]['iteration_mape_all']:.3f} "
              f"TTFT p50 {rows[-1]['ttft_p50_rel_error']:+.3f} p90 {rows[-1]['ttft_p90_rel_error']:+.3f} "
              f"TPOT p50 {rows[-1]['tpot_p50_rel_error']:+.3f} p90 {rows[-1]['tpot_p90_rel_error']:+.3f} "
              f"(attempt {attempt}, gate score {score:.3f})",
              file=sys.stderr)
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servesim", default=os.path.join(ROOT, "build/release/cli/servesim"))
    ap.add_argument("--out", default=os.path.join(ROOT, "experiments/results/cpu"))
    ap.add_argument("--quick", action="store_true", help="quick calibration and fewer requests (a smoke test)")
    ap.add_argument("--anchor", choices=["report", "apply", "off"], default="report",
                    help="validate's --anchor: report (default) reports the device's drift since calibration, "
                         "apply also re-anchors the predictions on it")
    ap.add_argument("--placement", choices=["report", "apply"], default="report",
                    help="validate's --placement: apply costs each iteration in the threads' placement it ran in, "
                         "by the profile's placement ratios (calib/placement_ratios.h)")
    ap.add_argument("--in-situ", choices=["profile", "refresh", "track", "interleave"], default="profile",
                    help="validate's --in-situ: refresh times the profile's whole-model prefills and decode steps "
                         "again just before and just after each real run and predicts with them "
                         "(calib/in_situ_refresh.h); the gate then reruns a point whose timings after its run "
                         "differ from those before it by more than --max-drift; track also times the served "
                         "decoder in the run's idle gaps and scales each iteration by the level around its time; "
                         "interleave times it between served iterations instead, with the run's clock stopped")
    ap.add_argument("--predict-draws", type=int, default=51,
                    help="validate's --predict-draws: predict's statistics as medians over N jittered simulations "
                         "(summary.csv then also gives the one simulation without jitter, single_*)")
    ap.add_argument("--profile", help="use this profile instead of calibrating one")
    ap.add_argument("--max-drift", type=float, default=0.0,
                    help="rerun a point whose anchor probes (a whole-model decode step and an n^3 GEMM, just "
                         "before and just after the real run) differ from the calibration's (with --anchor apply: from each other) by "
                         "more than this fraction, up to --attempts "
                         "times, keeping the attempt that drifted least; every attempt is listed in attempts.csv "
                         "(default 0: off). This VM changes its memory speed by up to 50%% from minute to minute; "
                         "a prediction from a calibration on the other speed is not a test of the cost model")
    ap.add_argument("--max-floor", type=float, default=0.0,
                    help="rerun a point whose own noise floor (report.json's iteration_mape.floor: the MAPE a "
                         "cost model that knew the run's level at every moment would have) is above this "
                         "fraction, up to --attempts times; with --max-drift too, the attempt nearest to passing "
                         "both bounds is kept (experiments/drift_gate.py; default 0: off). The floor measures the "
                         "machine during the attempt: an attempt whose floor is above the MAPE target cannot test "
                         "the cost model against it. With --in-situ interleave, which times the level all through "
                         "the run, the floor alone can gate (--max-drift 0)")
    ap.add_argument("--attempts", type=int, default=3, help="most runs of one point under --max-drift or --max-floor")
    ap.add_argument("--spread", action="store_true",
                    help="under --max-drift or --max-floor, run the attempts in rounds: the first of every "
                         "point, then a second of each point that missed the gate, and so on, so that one "
                         "point's attempts are minutes apart rather than back to back (this VM's noise comes "
                         "in spells of minutes); summary.csv is then written at the end")
    ap.add_argument("--calibration-attempts", type=int, default=1,
                    help="most calibrations: calibrate again while fewer than 85%% of the anchor probes saw one "
                         "placement of the threads (calib/placement.h)")
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--model", default=MODEL)
    ap.add_argument("--loads", help="NAME:RATE:REQUESTS,... in requests/s (default: light, near-saturation and "
                                    "overloaded at 0.1, 0.5 and 1.0 of the profile's capacity, with 48, 40 and 48 "
                                    "requests)")
    ap.add_argument("--validate-args", default="", help="extra flags for every `servesim validate`")
    ap.add_argument("--calibrate-args", default="", help="extra flags for `servesim calibrate`")
    opts = ap.parse_args()
    # The commit at the start: the code this study runs, even if another lands while it runs.
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                            capture_output=True, text=True).stdout.strip()
    loads = None
    if opts.loads:
        try:
            loads = [(name, float(rate), int(n)) for name, rate, n in (p.split(":") for p in opts.loads.split(","))]
        except ValueError:
            sys.exit(f"--loads: expected NAME:RATE:REQUESTS,... (got '{opts.loads}')")
    os.makedirs(opts.out, exist_ok=True)

    profile = opts.profile or os.path.join(opts.out, "profile.json")
    calibration_shares = []
    if not opts.profile:
        for _ in range(max(1, opts.calibration_attempts)):
            sh([opts.servesim, "calibrate", "--device", opts.device, "--model", opts.model, "--out", profile]
               + (["--quick"] if opts.quick else []) + opts.calibrate_args.split())
            share = placement_share(profile)
            calibration_shares.append(share)
            if share is None:
                print("calibration: the threads' placement was not watched (one thread)", file=sys.stderr)
                break
            print(f"calibration: {share:.0%} of the anchor probes in one placement", file=sys.stderr)
            if share >= 0.85:
                break

    capacity_rps = None
    if loads is None:
        capacity_rps = capacity(opts.servesim, profile)
        loads = scaled_loads(LOADS, capacity_rps)
        print(f"capacity: {capacity_rps:.2f} req/s in the profile's simulation; loads "
              + ", ".join(f"{name} {rate} req/s" for name, rate, _ in loads), file=sys.stderr)

    def runner(scheduler, rate, n):
        """run(out): one `servesim validate` of this point into out."""
        return lambda out: sh([opts.servesim, "validate", "--device", opts.device, "--model", opts.model,
                               "--profile", profile, "--scheduler", scheduler, "--arrival", "poisson",
                               "--rate", str(rate), "--num-requests", str(n), "--seed", "1", "--quiet",
                               "--anchor", opts.anchor, "--placement", opts.placement, "--in-situ", opts.in_situ,
                               "--predict-draws", str(opts.predict_draws), "--out", out]
                              + opts.validate_args.split())

    points = [(scheduler, load, rate, max(4, n // 4) if opts.quick else n)
              for scheduler in SCHEDULERS for load, rate, n in loads]

    def folder(scheduler, load):
        return os.path.join(opts.out, f"{scheduler}_{load}")

    # With --spread every point's attempts share the rounds; without it each
    # point's attempts follow one another, and summary.csv is written after
    # every point: a run cut short keeps what it measured.
    groups = [points] if opts.spread else [[p] for p in points]

    def progress(r):
        print(f"round {r} of at most {opts.attempts} done", file=sys.stderr, flush=True)

    rows, attempts = [], []
    for group in groups:
        kept = drift_gate.validate_gated_in_rounds(
            [(folder(s, load), runner(s, rate, n)) for s, load, rate, n in group],
            opts.anchor, opts.max_drift, opts.attempts, attempts, max_floor=opts.max_floor,
            on_round=progress if opts.spread else None)
        for s, load, rate, n in group:
            rows += summary_rows(folder(s, load), s, load, rate, n, *kept[folder(s, load)], opts.anchor)
        write_summary(opts.out, rows)

    if opts.max_drift > 0 or opts.max_floor > 0:
        with open(os.path.join(opts.out, "attempts.csv"), "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(attempts[0]))
            w.writeheader()
            w.writerows(attempts)

    cpu = ""
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    meta = {"command": "experiments/validation_cpu/run.py " + " ".join(sys.argv[1:]),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit, "machine": f"{cpu} ({os.cpu_count()} cores), {platform.node()}",
            "model": opts.model, "device": opts.device, "loads": loads,
            "capacity_rps": capacity_rps, "capacity_workload": CAPACITY_WORKLOAD if capacity_rps else None,
            "schedulers": SCHEDULERS, "seed": 1,
            "max_drift": opts.max_drift, "max_floor": opts.max_floor, "attempts": opts.attempts,
            "spread": opts.spread, "in_situ": opts.in_situ,
            "predict_draws": opts.predict_draws,
            "calibration_placement_shares": calibration_shares}
    with open(os.path.join(opts.out, "metadata.json"), "w") as f:
        json.dump(meta, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
