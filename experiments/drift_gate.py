"""Runs `servesim validate` again while the device drifted away from its calibration.

This project's CPU VMs change their speed from minute to minute (the same
small-110m decode step takes 6.5 ms or 9.5 ms on the AMD EPYC VM). A
prediction from a calibration made at the other speed is no test of the
cost model, so the studies can gate each point on what `validate
--host-drift report|interleave` records about the host (report.json's
`host_drift`; reports written before that flag have the same objects at
the top level as `anchor`, `placement` and `in_situ`, and read the same):

- the drift probes (`host_drift.drift_probes`), measured just before and
  just after the real run: a whole-model decode step (memory speed) and
  an n^3 GEMM (compute speed, as time per FLOP), each as a ratio r to the
  calibration's (`calibrate --host-drift`); the drift is the larger
  |r - 1| over both probes and both moments;
- with `--host-drift interleave`, the whole-model refresh
  (`host_drift.refresh`): the profile's factors timed again just before
  and just after the real run, and the drift is how much they moved over
  it (`refresh.drift.largest`, 0 when no shape was timed in the same
  placement before and after);
- the threads' placement (`host_drift.placement`): the VM moves its two
  vCPUs between cores that share an L3 and cores on two CCDs, where a
  decode step runs 1.4x faster and a GEMM 3% slower. `validate` records
  the placement before every iteration, and the share of iterations in a
  placement the prediction did not cost them in is the placement
  mismatch. With interleave each iteration is costed in its placement by
  the profile's placement ratios, so only iterations in a placement
  without ratios count, and a probe taken in the other placement is
  compared with the calibration's probe there.

The gate's score is the larger of the drift and the mismatch. A point whose
score is above `max_drift` is run again, up to `attempts` times (at once,
or with validate_gated_in_rounds once every other point has had its turn);
the attempt nearest to passing is kept in the point's folder, every attempt
keeps its reports in POINT.attemptN, and each attempt becomes a row of
attempts.csv.

The gate can also bound the run's own noise: report_replay.json's
iteration_mape.floor, the iteration MAPE that a cost model knowing the
run's level at every moment would still have (each iteration's measured /
predicted over that ratio's rolling median over 51 iterations; reported
whatever --host-drift). Between the attempts of one point what moves it is
the machine, not the cost model (3.5-7.0% from run to run on the 2-core
Xeon VM), and an attempt whose floor is above a MAPE target cannot test a
cost model against it. With `max_floor` > 0 an attempt passes when its
floor is at most `max_floor` (and, with `max_drift` > 0, its score at most
`max_drift`); each is taken as a share of its bound (its excess), and the
attempt with the lowest larger excess is kept. With interleave the run's
level is timed all through it, so a drift over the run no longer spoils the
prediction and the floor alone can gate.
"""
import json
import os
import shutil


MOMENTS = ("calibration", "before", "after")
# host_drift's parts and the top-level keys they had before --host-drift.
OLD_KEYS = {"drift_probes": "anchor", "placement": "placement", "refresh": "in_situ"}


def host_drift(report, part):
    """One part of a report's host_drift ("drift_probes", "placement" or
    "refresh"), from report["host_drift"] or, in a report written before
    --host-drift, from its old top-level key; {} where there is none."""
    section = report.get("host_drift")
    if isinstance(section, dict):
        found = section.get(part)
    else:
        found = report.get(OLD_KEYS[part])
    return found if isinstance(found, dict) else {}


def report_of(point):
    with open(os.path.join(point, "report_replay.json")) as f:
        return json.load(f)


def probes_of(point):
    """The drift probes at calibration, just before and just after the real
    run: the decode probe's seconds and the GEMM probe's seconds per TFLOP
    (None where not measured)."""
    probes_section = host_drift(report_of(point), "drift_probes")
    probes = probes_section.get("profiles", {}).get("profile", {})
    out = {}
    for k in MOMENTS:
        probe = probes.get(k) if probes_section.get("measured") else None
        out[k + "_decode_s"] = probe["decode_iteration_s"] if probe else None
        out[k + "_gemm_s_per_tflop"] = 1e12 / probe["gemm_flops_per_s"] if probe else None
    return out


def seconds_of(probe):
    """A probe's decode seconds and GEMM seconds per TFLOP."""
    return {"decode_s": probe["decode_iteration_s"], "gemm_s_per_tflop": 1e12 / probe["gemm_flops_per_s"]}


def drift_of(point):
    """The drift of one validate output folder (0 without probes or a
    refresh); see the module's text."""
    report = report_of(point)
    refresh = host_drift(report, "refresh")
    if refresh.get("refreshed"):
        # null: no shape was timed in the same placement before and after
        # the run; each placement's factors or ratios were then timed in it.
        largest = refresh.get("drift", {}).get("largest")
        return largest if isinstance(largest, (int, float)) else 0.0
    probes_section = host_drift(report, "drift_probes")
    if not probes_section.get("measured"):
        return 0.0
    probes = probes_section["profiles"]["profile"]
    other = probes.get("calibration_in_other_placement")

    def reference(moment):
        placement = (probes[moment].get("core_latency_ns") or {}).get("placement")
        return other if other and placement == other["placement"] else probes["calibration"]
    drift = 0.0
    for probe in ("decode_s", "gemm_s_per_tflop"):
        ratios = [seconds_of(probes[k])[probe] / seconds_of(reference(k))[probe] for k in ("before", "after")]
        drift = max([drift] + [abs(r - 1) for r in ratios])
    return drift


def placement_mismatch_of(point):
    """Share of the real run's iterations in a placement the prediction did
    not cost them in: another than the calibration's, or with interleave
    one the profile has no ratios for (0 when the placement was not
    watched or the calibration did not record one)."""
    placement = host_drift(report_of(point), "placement")
    if not placement.get("watched"):
        return 0.0
    # With placement costing (interleave) the other placement is costed too.
    share = placement.get("run_share_costed_in_its_placement", placement.get("run_share_in_calibration_placement"))
    return 0.0 if share is None else 1.0 - share


def gate_score(point):
    """The larger of the point's drift and its placement mismatch."""
    return max(drift_of(point), placement_mismatch_of(point))


def floor_of(point):
    """The run's own noise floor: report_replay.json's iteration_mape.floor
    (None where the report has none)."""
    floor = report_of(point).get("iteration_mape", {}).get("floor")
    return floor if isinstance(floor, (int, float)) else None


def excess(score, floor, max_drift, max_floor):
    """How far an attempt is from passing the gate: the larger of its score
    over max_drift and its floor over max_floor, each where its bound is
    above 0; it passes at 1 or below. A missing floor counts as over any
    bound."""
    ratios = [score / max_drift] if max_drift > 0 else [0.0]
    if max_floor > 0:
        ratios.append(float("inf") if floor is None else floor / max_floor)
    return max(ratios)


def prune_to_reports(folder):
    """Delete everything in folder but its report_*.json."""
    for root, dirs, files in os.walk(folder, topdown=False):
        for name in files:
            if not (root == folder and name.startswith("report_") and name.endswith(".json")):
                os.remove(os.path.join(root, name))
        for name in dirs:
            os.rmdir(os.path.join(root, name))


def try_once(run, point, attempt, max_drift, max_floor, log):
    """Runs attempt `attempt` of `point` into POINT.attemptN and appends its
    row to `log`; returns (excess, attempt, folder, gate score)."""
    out = f"{point}.attempt{attempt}"
    run(out)
    score, floor = gate_score(out), floor_of(out)
    tried = (excess(score, floor, max_drift, max_floor), attempt, out, score)
    log.append({"point": os.path.basename(point), "attempt": attempt, "drift": drift_of(out),
                "placement_mismatch": placement_mismatch_of(out), "score": score, "floor": floor,
                "excess": tried[0], **probes_of(out)})
    return tried


def keep_best(point, tries):
    """Copies the attempt nearest to passing (the lowest excess) into
    `point` and prunes every attempt's folder to its reports; returns
    (attempt kept, its gate score)."""
    _, attempt, out, score = min(tries)
    shutil.rmtree(point, ignore_errors=True)
    shutil.copytree(out, point)
    for _, _, tried, _ in tries:  # the kept attempt's data is in `point`
        prune_to_reports(tried)
    return attempt, score


def validate_gated(run, point, max_drift, attempts, log, max_floor=0.0):
    """run(out_folder) runs one `servesim validate` into out_folder. Without a
    gate (max_drift and max_floor both <= 0) it runs once into `point`.
    max_drift bounds each attempt's gate score, max_floor its noise floor
    (see the module's text). The attempts follow one another (the rounds
    of validate_gated_in_rounds over this one point). Appends one dict per
    attempt to `log`; returns (attempt kept, its gate score)."""
    return validate_gated_in_rounds([(point, run)], max_drift, attempts, log, max_floor)[point]


def validate_gated_in_rounds(points, max_drift, attempts, log, max_floor=0.0, on_round=None):
    """validate_gated over several points, with their attempts spread out:
    `points` is a list of (point, run); round r runs attempt r of every
    point none of whose attempts has passed yet, in the list's order, so
    one point's attempts are a whole round apart rather than back to back.
    Where the machine's noise comes in spells of minutes (the 2-core Xeon
    VM: floors of 3.7% and 8-13% ten minutes apart), back-to-back attempts
    tend to share a spell and spread ones do not. on_round(r), if given, is
    called after each round. Returns {point: (attempt kept, its gate
    score)}, in the list's order."""
    if max_drift <= 0 and max_floor <= 0:
        kept = {}
        for point, run in points:
            run(point)
            kept[point] = (1, gate_score(point))
        return kept
    tries = {point: [] for point, _ in points}
    for attempt in range(1, max(1, attempts) + 1):
        waiting = [(point, run) for point, run in points if not any(t[0] <= 1 for t in tries[point])]
        if not waiting:
            break
        for point, run in waiting:
            tries[point].append(try_once(run, point, attempt, max_drift, max_floor, log))
        if on_round:
            on_round(attempt)
    return {point: keep_best(point, tries[point]) for point, _ in points}
