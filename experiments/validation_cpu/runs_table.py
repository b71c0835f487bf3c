#!/usr/bin/python3
"""Markdown table of several runs of the CPU validation study, point by point.

Usage: experiments/validation_cpu/runs_table.py STUDY_DIR [STUDY_DIR ...]

Each STUDY_DIR holds a study's summary.csv and metadata.json (run.py's
output, e.g. experiments/results/cpu). Rows: every point (scheduler x load)
for every run, labelled with the run's commit, --host-drift (or, for runs
made before it, --anchor, --placement and --in-situ), the timings'
intervals, --threads, --loads and predict's draws when given (the MAPE with
its floor, the run's own noise, when the run reported it); then, per run,
how many points meet iteration
MAPE <= 5%, how many TTFT/TPOT P50/P90 errors (replay and predict) are
within 10%, how many points meet both (all eight of their errors), and
how many kept attempts passed the run's gate (--max-drift on the gate
score, --max-floor on the floor; 5% drift for runs that recorded no bound).
"""
import csv
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import drift_gate  # noqa: E402  (experiments/drift_gate.py)

ERRORS = ["ttft_p50_rel_error", "ttft_p90_rel_error", "tpot_p50_rel_error", "tpot_p90_rel_error"]


def pct(x):
    return f"{float(x) * 100:+.1f}%"


def load(folder):
    with open(os.path.join(folder, "metadata.json")) as f:
        meta = json.load(f)
    with open(os.path.join(folder, "summary.csv")) as f:
        rows = list(csv.DictReader(f))
    host_drift = re.search(r"--host-drift[ =](off|report|interleave)", meta["command"])
    if host_drift:
        modes = f"host-drift {host_drift.group(1)}"
        in_situ = ""
    else:  # a run made before --host-drift: its --anchor, --placement and --in-situ
        modes = "rescale" if "--anchor rescale" in meta["command"] else "report"
        modes += ", placement apply" if "--placement apply" in meta["command"] else ""
        in_situ = re.search(r"--in-situ[ =](refresh|track|interleave)", meta["command"])
        in_situ = f", in-situ {in_situ.group(1)}" if in_situ else ""
    reused = ", reused profile" if "--profile" in meta["command"] else ""
    threads = re.search(r"--threads[ =](\d+)", meta["command"])
    threads = f", {threads.group(1)} thread(s)" if threads else ""
    interval = re.search(r"--interleave-interval[ =]([0-9.]+)", meta["command"])
    in_situ += f" every {interval.group(1)} s" if interval else ""
    prefill_interval = re.search(r"--interleave-prefill-interval[ =]([0-9.]+)", meta["command"])
    in_situ += f", prefill timings every {prefill_interval.group(1)} s" if prefill_interval else ""
    loads = re.search(r"--loads[ =](\S+)", meta["command"])
    loads = f", loads {loads.group(1)}" if loads and not threads else ""
    draws = meta.get("predict_draws", 1)
    draws = f", predict over {draws} draws" if draws > 1 else ""
    gate = {"max_drift": meta.get("max_drift", 0.05), "max_floor": meta.get("max_floor", 0.0)}
    floor_gate = f", floor gate {gate['max_floor']:g}" if gate["max_floor"] > 0 else ""
    floor_gate += f", {meta['attempts']} attempts in rounds" if meta.get("spread") else ""
    return f"{meta['commit']}, {modes}{in_situ}{reused}{threads}{loads}{draws}{floor_gate}", rows, gate


def score(row):
    """The gate's score (drift or placement mismatch); runs before the
    placement was watched have the drift only."""
    gate_score = row.get("gate_score")
    return float(gate_score if gate_score not in (None, "") else row["anchor_drift"])


def passed(row, gate):
    """Whether a kept attempt passed its run's gate (drift_gate.excess)."""
    floor = row.get("iteration_mape_floor")
    floor = float(floor) if floor not in (None, "", "nan") else None
    return drift_gate.excess(score(row), floor, gate["max_drift"], gate["max_floor"]) <= 1


def main(folders):
    runs = [load(f) for f in folders]
    print("| point | run (commit, `--host-drift`) | kept attempt (gate score) | iteration MAPE | "
          "TTFT P50 / P90, replay; predict | TPOT P50 / P90, replay; predict |")
    print("| --- | --- | --- | ---: | ---: | ---: |")
    points = []
    for _, rows, _ in runs:
        for r in rows:
            if (r["scheduler"], r["load"]) not in points:
                points.append((r["scheduler"], r["load"]))
    for scheduler, load_name in points:
        for label, rows, _ in runs:
            by_mode = {r["mode"]: r for r in rows if r["scheduler"] == scheduler and r["load"] == load_name}
            if not by_mode:
                continue
            rp, pr = by_mode["replay"], by_mode["predict"]
            floor = rp.get("iteration_mape_floor")
            floor = f" (floor {float(floor) * 100:.1f}%)" if floor not in (None, "", "nan") else ""
            print(f"| {scheduler} {load_name} | {label} | {rp['attempt']} ({score(rp) * 100:.1f}%) "
                  f"| {float(rp['iteration_mape_all']) * 100:.1f}%{floor} "
                  f"| {pct(rp[ERRORS[0]])} / {pct(rp[ERRORS[1]])}; {pct(pr[ERRORS[0]])} / {pct(pr[ERRORS[1]])} "
                  f"| {pct(rp[ERRORS[2]])} / {pct(rp[ERRORS[3]])}; {pct(pr[ERRORS[2]])} / {pct(pr[ERRORS[3]])} |")
    print()
    print("| run | points with iteration MAPE <= 5% | TTFT/TPOT errors within 10% | points meeting every target "
          "| points kept within the gate |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, rows, gate in runs:
        replay = [r for r in rows if r["mode"] == "replay"]
        mape = sum(float(r["iteration_mape_all"]) <= 0.05 for r in replay)
        within = sum(abs(float(r[e])) <= 0.10 for r in rows for e in ERRORS)
        every = sum(float(r["iteration_mape_all"]) <= 0.05
                    and all(abs(float(o[e])) <= 0.10 for o in rows
                            if (o["scheduler"], o["load"]) == (r["scheduler"], r["load"]) for e in ERRORS)
                    for r in replay)
        gated = sum(passed(r, gate) for r in replay)
        print(f"| {label} | {mape} of {len(replay)} | {within} of {len(rows) * len(ERRORS)} | {every} of {len(replay)} "
              f"| {gated} of {len(replay)} |")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    if sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    missing = [f for f in sys.argv[1:] if not os.path.isfile(os.path.join(f, "summary.csv"))]
    if missing:
        sys.exit(f"not a study folder (no summary.csv): {', '.join(missing)}")
    main(sys.argv[1:])
