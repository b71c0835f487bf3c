"""Unit tests of experiments/drift_gate.py: the drift of a validate folder
from its drift probes (report.json's host_drift, or the top-level keys of a
report written before --host-drift), and the rerun-and-keep-the-least-drift
rule."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "experiments"))
import drift_gate  # noqa: E402


def probe(decode_s, gemm_flops_per_s):
    return {"decode_iteration_s": decode_s, "gemm_flops_per_s": gemm_flops_per_s, "context": 16,
            "gemm_n": 1024, "layers": 12}


def write_point(folder, calibration, before, after, measured=True, share_in_calibration_placement=None,
                floor=None, old_keys=False):
    """A validate output folder with report_replay.json's host_drift
    (drift_probes and placement; with old_keys, the top-level anchor and
    placement of a report written before --host-drift), iteration_mape's
    noise floor if given, and one other file (that pruning must delete)."""
    os.makedirs(os.path.join(folder, "measured"), exist_ok=True)
    anchor = {"measured": measured,
              "profiles": {"profile": {"calibration": probe(*calibration), "before": probe(*before),
                                       "after": probe(*after)}}}
    placement = {"watched": share_in_calibration_placement is not None,
                 "run_share_in_calibration_placement": share_in_calibration_placement}
    with open(os.path.join(folder, "report_replay.json"), "w") as f:
        if old_keys:
            report = {"anchor": anchor, "placement": placement}
        else:
            report = {"host_drift": {"mode": "report", "drift_probes": anchor, "placement": placement, "refresh": {}}}
        if floor is not None:
            report["iteration_mape"] = {"all": floor + 0.01, "floor": floor}
        json.dump(report, f)
    with open(os.path.join(folder, "measured", "iterations.csv"), "w") as f:
        f.write("index\n0\n")


class InScratch(unittest.TestCase):
    """self.point: a point folder's path in a scratch folder removed after the test."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.point = os.path.join(self.tmp.name, "light")

    def tearDown(self):
        self.tmp.cleanup()


class DriftOf(InScratch):
    def test_decode_drift_from_calibration(self):
        write_point(self.point, (0.010, 1e11), (0.0104, 1e11), (0.0095, 1e11))
        self.assertAlmostEqual(drift_gate.drift_of(self.point), 0.05)

    def test_gemm_drift_counts_as_time_per_flop(self):
        # decode steady, GEMM 20% fewer FLOP/s after the run: 1/0.8 - 1 = 25% slower
        write_point(self.point, (0.010, 1e11), (0.010, 1e11), (0.010, 0.8e11))
        self.assertAlmostEqual(drift_gate.drift_of(self.point), 0.25)

    def test_a_report_from_before_host_drift_reads_the_same(self):
        write_point(self.point, (0.010, 1e11), (0.0104, 1e11), (0.0095, 1e11), share_in_calibration_placement=0.9,
                    old_keys=True)
        self.assertAlmostEqual(drift_gate.drift_of(self.point), 0.05)
        self.assertAlmostEqual(drift_gate.placement_mismatch_of(self.point), 0.1)
        self.assertAlmostEqual(drift_gate.probes_of(self.point)["after_decode_s"], 0.0095)

    def test_with_host_drift_off_nothing_drifts(self):
        os.makedirs(self.point)
        with open(os.path.join(self.point, "report_replay.json"), "w") as f:
            json.dump({"host_drift": {"mode": "off", "drift_probes": None, "placement": None, "refresh": None},
                       "iteration_mape": {"all": 0.04, "floor": 0.03}}, f)
        self.assertEqual((drift_gate.drift_of(self.point), drift_gate.placement_mismatch_of(self.point)), (0.0, 0.0))
        self.assertIsNone(drift_gate.probes_of(self.point)["before_decode_s"])
        self.assertAlmostEqual(drift_gate.floor_of(self.point), 0.03)

    def test_a_refresh_gives_the_drift_over_the_run(self):
        write_point(self.point, (0.010, 1e11), (0.013, 1e11), (0.013, 1e11))
        path = os.path.join(self.point, "report_replay.json")
        with open(path) as f:
            report = json.load(f)
        report["host_drift"].update(mode="interleave", refresh={"refreshed": True, "drift": {"largest": 0.021}})
        with open(path, "w") as f:
            json.dump(report, f)
        self.assertAlmostEqual(drift_gate.drift_of(self.point), 0.021)  # not the probes' 30%
        report["host_drift"]["refresh"]["drift"]["largest"] = None  # nothing timed twice in one placement
        with open(path, "w") as f:
            json.dump(report, f)
        self.assertEqual(drift_gate.drift_of(self.point), 0.0)

    def test_no_probes_is_no_drift(self):
        write_point(self.point, (0.010, 1e11), (0.02, 1e11), (0.02, 1e11), measured=False)
        self.assertEqual(drift_gate.drift_of(self.point), 0.0)
        self.assertIsNone(drift_gate.probes_of(self.point)["before_decode_s"])


class PlacementMismatch(InScratch):
    def test_share_of_iterations_in_another_placement(self):
        write_point(self.point, (0.010, 1e11), (0.010, 1e11), (0.010, 1e11), share_in_calibration_placement=0.7)
        self.assertAlmostEqual(drift_gate.placement_mismatch_of(self.point), 0.3)

    def test_score_is_the_larger_of_drift_and_mismatch(self):
        write_point(self.point, (0.010, 1e11), (0.0102, 1e11), (0.010, 1e11), share_in_calibration_placement=0.9)
        self.assertAlmostEqual(drift_gate.gate_score(self.point), 0.1)
        write_point(self.point, (0.010, 1e11), (0.0102, 1e11), (0.010, 1e11), share_in_calibration_placement=1.0)
        self.assertAlmostEqual(drift_gate.gate_score(self.point), 0.02)

    def test_not_watched_is_no_mismatch(self):
        write_point(self.point, (0.010, 1e11), (0.010, 1e11), (0.010, 1e11))
        self.assertEqual(drift_gate.placement_mismatch_of(self.point), 0.0)


class CostedInItsPlacement(InScratch):
    def write(self, before_placement, share_costed):
        write_point(self.point, (0.010, 1e11), (0.0068, 1e11), (0.0101, 1e11), share_in_calibration_placement=0.5)
        path = os.path.join(self.point, "report_replay.json")
        with open(path) as f:
            report = json.load(f)
        probes = report["host_drift"]["drift_probes"]["profiles"]["profile"]
        probes["before"]["core_latency_ns"] = {"before": 200, "after": 210, "placement": before_placement}
        probes["after"]["core_latency_ns"] = {"before": 50, "after": 55, "placement": "near"}
        probes["calibration_in_other_placement"] = dict(probe(0.007, 1e11), placement="far")
        report["host_drift"]["placement"]["run_share_costed_in_its_placement"] = share_costed
        with open(path, "w") as f:
            json.dump(report, f)

    def test_a_probe_in_the_other_placement_is_compared_with_its_expected_value(self):
        self.write("far", 1.0)
        # before: 6.8 ms against 7.0 expected far (-2.9%); after: 10.1 against 10.0 (+1%)
        self.assertAlmostEqual(drift_gate.drift_of(self.point), 0.2 / 7.0)
        self.assertEqual(drift_gate.placement_mismatch_of(self.point), 0.0)

    def test_without_its_placement_the_calibration_is_the_reference(self):
        self.write("unknown", 0.9)
        self.assertAlmostEqual(drift_gate.drift_of(self.point), 0.32)
        self.assertAlmostEqual(drift_gate.placement_mismatch_of(self.point), 0.1)


class ValidateGated(InScratch):
    def runner(self, afters, floors=None):
        """run(out) writing attempt i with an `after` decode probe afters[i]
        (and a noise floor floors[i], if given)."""
        calls = []

        def run(out):
            i = len(calls)
            write_point(out, (0.010, 1e11), (0.010, 1e11), (afters[i], 1e11),
                        floor=floors[i] if floors else None)
            calls.append(out)
        return run, calls

    def test_keeps_the_least_drift_and_prunes_the_rest(self):
        run, calls = self.runner([0.012, 0.0105, 0.013])
        log = []
        attempt, drift = drift_gate.validate_gated(run, self.point, 0.02, 3, log)
        self.assertEqual(len(calls), 3)
        self.assertEqual(attempt, 2)
        self.assertAlmostEqual(drift, 0.05)
        self.assertEqual([row["attempt"] for row in log], [1, 2, 3])
        self.assertAlmostEqual(log[0]["after_decode_s"], 0.012)
        # the kept attempt's whole folder; every attempt keeps its reports only
        self.assertTrue(os.path.exists(os.path.join(self.point, "measured", "iterations.csv")))
        for i in (1, 2, 3):
            self.assertEqual(os.listdir(f"{self.point}.attempt{i}"), ["report_replay.json"])

    def test_stops_at_the_first_attempt_within_the_gate(self):
        run, calls = self.runner([0.012, 0.0101, 0.010])
        attempt, drift = drift_gate.validate_gated(run, self.point, 0.02, 3, [])
        self.assertEqual((len(calls), attempt), (2, 2))
        self.assertAlmostEqual(drift, 0.01)

    def test_reruns_an_attempt_in_another_placement(self):
        # no drift at all, but attempt 1 ran 40% of its iterations in the other placement
        shares = [0.6, 1.0]
        calls = []

        def run(out):
            write_point(out, (0.010, 1e11), (0.010, 1e11), (0.010, 1e11),
                        share_in_calibration_placement=shares[len(calls)])
            calls.append(out)
        log = []
        attempt, score = drift_gate.validate_gated(run, self.point, 0.05, 3, log)
        self.assertEqual((len(calls), attempt, score), (2, 2, 0.0))
        self.assertAlmostEqual(log[0]["placement_mismatch"], 0.4)
        self.assertEqual(log[0]["drift"], 0.0)

    def test_reruns_an_attempt_whose_floor_is_over_its_bound(self):
        # attempt 1 steady but noisy (floor 6.5%), attempt 2 steady and quiet
        run, calls = self.runner([0.010, 0.0101], [0.065, 0.040])
        log = []
        attempt, score = drift_gate.validate_gated(run, self.point, 0.05, 3, log, max_floor=0.05)
        self.assertEqual((len(calls), attempt), (2, 2))
        self.assertAlmostEqual(score, 0.01)
        self.assertAlmostEqual(log[0]["floor"], 0.065)
        self.assertAlmostEqual(log[0]["excess"], 1.3)
        self.assertAlmostEqual(log[1]["excess"], 0.8)

    def test_without_a_floor_bound_the_floor_does_not_gate(self):
        run, calls = self.runner([0.010, 0.0101], [0.065, 0.040])
        attempt, _ = drift_gate.validate_gated(run, self.point, 0.05, 3, [])
        self.assertEqual((len(calls), attempt), (1, 1))

    def test_keeps_the_attempt_nearest_to_passing_both_bounds(self):
        # excesses: max(0.06/0.05, 0.03/0.05) = 1.2; max(0.01/0.05, 0.07/0.05) = 1.4; max(0.055/0.05, 0.052/0.05) = 1.1
        run, calls = self.runner([0.0106, 0.0101, 0.01055], [0.03, 0.07, 0.052])
        log = []
        attempt, score = drift_gate.validate_gated(run, self.point, 0.05, 3, log, max_floor=0.05)
        self.assertEqual((len(calls), attempt), (3, 3))
        self.assertAlmostEqual(score, 0.055)
        self.assertEqual([round(row["excess"], 6) for row in log], [1.2, 1.4, 1.1])

    def test_the_floor_alone_can_gate(self):
        # attempt 1 drifted 30% but is quiet: without a drift bound it passes
        run, calls = self.runner([0.013, 0.010], [0.045, 0.030])
        log = []
        attempt, score = drift_gate.validate_gated(run, self.point, 0.0, 3, log, max_floor=0.05)
        self.assertEqual((len(calls), attempt), (1, 1))
        self.assertAlmostEqual(score, 0.3)
        self.assertAlmostEqual(log[0]["excess"], 0.9)

    def test_a_report_without_a_floor_does_not_pass_a_floor_bound(self):
        run, calls = self.runner([0.010, 0.010], [None, 0.02])
        attempt, _ = drift_gate.validate_gated(run, self.point, 0.05, 3, [], max_floor=0.05)
        self.assertEqual((len(calls), attempt), (2, 2))
        self.assertIsNone(drift_gate.floor_of(f"{self.point}.attempt1"))

    def test_without_a_gate_runs_once_into_the_point(self):
        run, calls = self.runner([0.02])
        attempt, drift = drift_gate.validate_gated(run, self.point, 0.0, 3, [])
        self.assertEqual(calls, [self.point])
        self.assertEqual(attempt, 1)
        self.assertAlmostEqual(drift, 1.0)


class ValidateGatedInRounds(InScratch):
    def runner(self, name, floors, calls):
        """run(out) for point `name` writing its i-th attempt with noise floor
        floors[i] and no drift; each call appends (name, out) to `calls`."""
        def run(out):
            i = sum(1 for n, _ in calls if n == name)
            write_point(out, (0.010, 1e11), (0.010, 1e11), (0.010, 1e11), floor=floors[i])
            calls.append((name, out))
        return run

    def points(self, floors_by_name, calls):
        return [(os.path.join(self.tmp.name, name), self.runner(name, floors, calls))
                for name, floors in floors_by_name]

    def test_a_missed_point_is_tried_again_after_every_other_point(self):
        calls, log, rounds = [], [], []
        points = self.points([("a", [0.07, 0.04]), ("b", [0.03]), ("c", [0.08, 0.06, 0.02])], calls)
        kept = drift_gate.validate_gated_in_rounds(points, 0.0, 3, log, max_floor=0.05,
                                                   on_round=rounds.append)
        # round 1: every point; round 2: a and c (b passed); round 3: c only
        self.assertEqual([(n, os.path.basename(out)) for n, out in calls],
                         [("a", "a.attempt1"), ("b", "b.attempt1"), ("c", "c.attempt1"),
                          ("a", "a.attempt2"), ("c", "c.attempt2"), ("c", "c.attempt3")])
        self.assertEqual(rounds, [1, 2, 3])
        self.assertEqual([kept[p][0] for p, _ in points], [2, 1, 3])
        self.assertEqual([(row["point"], row["attempt"]) for row in log],
                         [("a", 1), ("b", 1), ("c", 1), ("a", 2), ("c", 2), ("c", 3)])
        # each point's kept attempt is its folder; the attempts keep their reports only
        self.assertAlmostEqual(drift_gate.floor_of(os.path.join(self.tmp.name, "c")), 0.02)
        self.assertEqual(os.listdir(os.path.join(self.tmp.name, "a.attempt1")), ["report_replay.json"])

    def test_stops_when_every_point_passed_and_keeps_the_nearest_when_none_did(self):
        calls, rounds = [], []
        points = self.points([("a", [0.09, 0.06]), ("b", [0.03])], calls)
        kept = drift_gate.validate_gated_in_rounds(points, 0.0, 2, [], max_floor=0.05,
                                                   on_round=rounds.append)
        self.assertEqual(len(calls), 3)
        self.assertEqual(rounds, [1, 2])
        self.assertEqual(kept[points[0][0]][0], 2)  # a never passed: its lower floor is kept

        calls, rounds = [], []
        points = self.points([("d", [0.01]), ("e", [0.02])], calls)
        drift_gate.validate_gated_in_rounds(points, 0.0, 3, [], max_floor=0.05, on_round=rounds.append)
        self.assertEqual((len(calls), rounds), (2, [1]))

    def test_without_a_gate_each_point_runs_once_into_its_folder(self):
        calls = []
        points = self.points([("a", [0.09]), ("b", [0.09])], calls)
        kept = drift_gate.validate_gated_in_rounds(points, 0.0, 3, [])
        self.assertEqual([out for _, out in calls], [p for p, _ in points])
        self.assertEqual([kept[p][0] for p, _ in points], [1, 1])


if __name__ == "__main__":
    unittest.main()
