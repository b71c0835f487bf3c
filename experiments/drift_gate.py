"""Runs `servesim validate` again while the device drifted away from its calibration.

This project's CPU VM changes its memory speed from minute to minute (the
same small-110m decode step takes 6.5 ms or 9.5 ms). A prediction from a
calibration made on the other speed is no test of the cost model, so the
studies can gate each point on the anchor probes `validate` measures just
before and just after its real run (report_replay.json's `anchor`):

- drift from the calibration: max(|before / calibration - 1|, |after / calibration - 1|);
- with `--anchor apply` (the predictions re-anchored on the probes), drift
  during the run: |after / before - 1|.

A point that drifted more than `max_drift` is run again, up to `attempts`
times; the attempt that drifted least is kept in the point's folder, every
attempt keeps its reports in POINT.attemptN, and each attempt becomes a row
of attempts.csv.
"""
import json
import os
import shutil


def probes_of(point):
    """The decode probe's seconds at calibration, just before and just after the real run."""
    with open(os.path.join(point, "report_replay.json")) as f:
        anchor = json.load(f).get("anchor", {})
    probes = anchor.get("profiles", {}).get("profile", {})
    if not anchor.get("measured") or "before" not in probes:
        return {"calibration_decode_s": None, "before_decode_s": None, "after_decode_s": None}
    return {k + "_decode_s": probes[k]["decode_iteration_s"] for k in ("calibration", "before", "after")}


def drift_of(point, anchor):
    """The drift of one validate's output folder (0 without probes); see the module's text."""
    p = probes_of(point)
    if p["calibration_decode_s"] is None:
        return 0.0
    if anchor == "apply":
        return abs(p["after_decode_s"] / p["before_decode_s"] - 1)
    return max(abs(p[k] / p["calibration_decode_s"] - 1) for k in ("before_decode_s", "after_decode_s"))


def prune_to_reports(folder):
    """Delete everything in folder but its report_*.json."""
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            if not (root == folder and name.startswith("report_") and name.endswith(".json")):
                os.remove(os.path.join(root, name))
        for name in dirs:
            os.rmdir(os.path.join(root, name))


def validate_gated(run, point, anchor, max_drift, attempts, log):
    """run(out_folder) runs one `servesim validate` into out_folder. Without a
    gate (max_drift <= 0) it runs once into `point`. Appends one dict per
    attempt to `log`; returns (attempt kept, its drift)."""
    if max_drift <= 0:
        run(point)
        return 1, drift_of(point, anchor)
    tries = []
    for attempt in range(1, max(1, attempts) + 1):
        out = f"{point}.attempt{attempt}"
        run(out)
        tries.append((drift_of(out, anchor), attempt, out))
        log.append({"point": os.path.basename(point), "attempt": attempt, "drift": tries[-1][0], **probes_of(out)})
        if tries[-1][0] <= max_drift:
            break
    drift, attempt, out = min(tries)
    shutil.rmtree(point, ignore_errors=True)
    shutil.copytree(out, point)
    for _, _, tried in tries:  # the kept attempt's data is in `point`
        prune_to_reports(tried)
    return attempt, drift
