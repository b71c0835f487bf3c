"""experiments/validation_cpu/run.py driven end to end by a stand-in for
servesim (a Python script answering `simulate` and `validate` with made-up
reports), to check what the study does with them: the flags it passes
(--host-drift to calibrate and validate), the loads scaled to the
capacity, the gate's attempts (back to back, or in rounds with --spread),
summary.csv and metadata.json. The real servesim's reports are checked by
tests/cli; the study's numbers by running it (experiments/results/cpu*)."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STUDY = os.path.join(ROOT, "experiments", "validation_cpu", "run.py")

# The stand-in: `calibrate --out P` writes a profile whose drift probes saw
# one placement (with --host-drift; none without) and appends its flags to
# calibrate.log; `simulate` prints a capacity of 2.0 req/s; `validate --out D`
# writes D/report_{replay,predict}.json whose noise floor is 8% on the first
# attempt of continuous_light and continuous_overloaded and 3% otherwise,
# with a host_drift section for its --host-drift mode, and appends D's name,
# rate and --host-drift as given to calls.log beside the study's folder.
# Either fails on a flag the real servesim no longer takes (--anchor,
# --placement, --in-situ) or on a bad --host-drift.
FAKE_SERVESIM = textwrap.dedent('''\
    #!/usr/bin/python3
    import json, os, sys
    args = sys.argv[1:]
    for gone in ("--anchor", "--placement", "--in-situ"):
        if gone in args:
            sys.exit(f"unrecognised option '{gone}'")
    if args[0] == "calibrate":
        out = args[args.index("--out") + 1]
        if "--host-drift" in args and args[args.index("--host-drift") + 1:][:1] in (["off"], ["report"],
                                                                                  ["interleave"]):
            sys.exit("calibrate's --host-drift is a switch")
        with open(os.path.join(os.path.dirname(out), "calibrate.log"), "a") as f:
            f.write(" ".join(args[1:]) + "\\n")
        probes = {"placement_counts": {"near": 13, "far": 0}} if "--host-drift" in args else {}
        with open(out, "w") as f:
            json.dump({"metadata": {"anchor_probes": probes}}, f)
        sys.exit(0)
    if args[0] == "simulate":
        print(json.dumps({"throughput": {"requests_per_s": 2.0}}))
        sys.exit(0)
    assert args[0] == "validate", args
    given = args[args.index("--host-drift") + 1] if "--host-drift" in args else "(none)"
    if given not in ("off", "report", "interleave", "(none)"):
        sys.exit(2)
    mode = "off" if given == "(none)" else given
    out = args[args.index("--out") + 1]
    name = os.path.basename(out)
    with open(os.path.join(os.path.dirname(os.path.dirname(out)), "calls.log"), "a") as f:
        f.write(name + " " + args[args.index("--rate") + 1] + " " + given + "\\n")
    noisy = name in ("continuous_light.attempt1", "continuous_overloaded.attempt1")
    floor = 0.08 if noisy else 0.03
    stats = {"rel_error": {"p50": 0.01, "p90": -0.02}, "measured": {"p50": 1.0}}
    probe = {"decode_iteration_s": 0.01, "gemm_flops_per_s": 1e11}
    drift = {"off": None,
             "report": {"mode": "report", "placement": {"watched": True, "run_share_in_calibration_placement": 1.0},
                        "drift_probes": {"measured": True, "profiles": {"profile": {
                            "calibration": probe, "before": probe, "after": dict(probe, decode_iteration_s=0.0102)}}},
                        "refresh": None},
             "interleave": {"mode": "interleave", "placement": {"watched": True,
                                                                "run_share_costed_in_its_placement": 1.0},
                            "drift_probes": {"measured": False}, "refresh": {"refreshed": True,
                                                                             "drift": {"largest": 0.01}}}}[mode]
    report = {"iteration_mape": {"all": floor + 0.005, "floor": floor, "decode": floor, "prefill": 0.1,
                                 "mixed": 0.1},
              "ttft_s": stats, "tpot_s": stats,
              "host_drift": drift or {"mode": "off", "drift_probes": None, "placement": None, "refresh": None}}
    os.makedirs(os.path.join(out, "measured"), exist_ok=True)
    for mode in ("replay", "predict"):
        with open(os.path.join(out, f"report_{mode}.json"), "w") as f:
            json.dump(report, f)
    open(os.path.join(out, "measured", "iterations.csv"), "w").write("index\\n")
''')


class ValidationStudy(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.servesim = os.path.join(self.tmp.name, "servesim")
        with open(self.servesim, "w") as f:
            f.write(FAKE_SERVESIM)
        os.chmod(self.servesim, 0o755)
        self.profile = os.path.join(self.tmp.name, "profile.json")
        with open(self.profile, "w") as f:
            json.dump({}, f)
        self.out = os.path.join(self.tmp.name, "study")

    def tearDown(self):
        self.tmp.cleanup()

    def run_study(self, *flags, profile=True):
        return subprocess.run([sys.executable, STUDY, "--servesim", self.servesim, "--out", self.out,
                               *(["--profile", self.profile] if profile else []), *flags],
                              capture_output=True, text=True)

    def study(self, *flags, profile=True, gate=("--max-floor", "0.05", "--attempts", "3")):
        done = self.run_study(*gate, *flags, profile=profile)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.tmp.name, "calls.log")) as f:
            calls = [line.split()[:2] for line in f]
        with open(os.path.join(self.out, "summary.csv")) as f:
            summary = list(csv.DictReader(f))
        with open(os.path.join(self.out, "metadata.json")) as f:
            meta = json.load(f)
        return calls, summary, meta, done.stderr

    def test_back_to_back_attempts(self):
        calls, summary, meta, _ = self.study()
        self.assertEqual([name for name, _ in calls[:3]],
                         ["continuous_light.attempt1", "continuous_light.attempt2",
                          "continuous_near-saturation.attempt1"])
        self.assertEqual(len(calls), 8)  # 6 points, 2 of them twice
        self.assertFalse(meta["spread"])
        self.assertEqual(meta["capacity_rps"], 2.0)
        self.assertEqual(meta["host_drift"], "off")
        self.assertEqual(self.modes(), {"off"})  # validate's default, passed by name

    def modes(self):
        with open(os.path.join(self.tmp.name, "calls.log")) as f:
            return {line.split()[2] for line in f}

    def calibrations(self):
        with open(os.path.join(self.out, "calibrate.log")) as f:
            return [line.split() for line in f]

    def test_host_drift_interleave_reaches_calibrate_and_validate(self):
        _, summary, meta, stderr = self.study("--host-drift", "interleave", "--max-drift", "0.05",
                                              "--calibration-attempts", "2", profile=False)
        self.assertEqual(self.modes(), {"interleave"})
        (calibration,) = self.calibrations()  # all its probes in one placement: once
        self.assertIn("--host-drift", calibration)
        self.assertIn("100% of the drift probes in one placement", stderr)
        self.assertEqual(meta["host_drift"], "interleave")
        self.assertEqual(meta["calibration_placement_shares"], [1.0])
        # the gate's drift is the refresh's, over the run
        self.assertAlmostEqual(float(summary[0]["anchor_drift"]), 0.01)
        self.assertAlmostEqual(float(summary[0]["placement_mismatch"]), 0.0)

    def test_host_drift_report_gates_on_the_drift_probes(self):
        _, summary, meta, _ = self.study("--host-drift", "report", "--max-drift", "0.05")
        self.assertEqual(self.modes(), {"report"})
        self.assertAlmostEqual(float(summary[0]["anchor_drift"]), 0.02)
        self.assertAlmostEqual(float(summary[0]["gate_score"]), 0.02)

    def test_host_drift_off_calibrates_without_it(self):
        _, summary, meta, stderr = self.study("--calibration-attempts", "3", profile=False, gate=())
        (calibration,) = self.calibrations()
        self.assertNotIn("--host-drift", calibration)
        self.assertIn("placement was not watched (--host-drift off", stderr)
        self.assertEqual(meta["calibration_placement_shares"], [None])
        self.assertEqual(float(summary[0]["anchor_drift"]), 0.0)
        self.assertFalse(os.path.exists(os.path.join(self.out, "attempts.csv")))  # no gate: one run a point

    def test_flags_that_need_host_drift_are_refused_without_it(self):
        done = self.run_study("--max-drift", "0.05")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--max-drift needs --host-drift report or interleave", done.stderr)
        done = self.run_study("--host-drift", "track")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--host-drift", done.stderr)
        done = self.run_study("--host-drift", "report", "--validate-args", "--interleave-interval 0.05")
        self.assertEqual(done.returncode, 2)
        self.assertIn("--interleave-interval applies with --host-drift interleave only", done.stderr)
        for gone in ("--anchor", "--in-situ", "--placement"):
            done = self.run_study(gone, "report")
            self.assertEqual(done.returncode, 2, gone)
            self.assertIn("unrecognized arguments", done.stderr)

    def test_spread_attempts_come_in_rounds(self):
        calls, summary, meta, stderr = self.study("--spread")
        names = [name for name, _ in calls]
        # round 1: the six points; round 2: the two that missed the floor bound
        self.assertEqual(names[:6], [f"{s}_{load}.attempt1" for s in ("continuous", "chunked")
                                     for load in ("light", "near-saturation", "overloaded")])
        self.assertEqual(names[6:], ["continuous_light.attempt2", "continuous_overloaded.attempt2"])
        self.assertIn("round 2 of at most 3 done", stderr)
        self.assertNotIn("round 3", stderr)
        self.assertTrue(meta["spread"])
        # loads at 0.1, 0.5 and 1.0 of the capacity
        self.assertEqual(sorted({rate for _, rate in calls}), ["0.2", "1.0", "2.0"])
        # summary.csv: two modes per point, in the points' order, with the kept attempt
        self.assertEqual(len(summary), 12)
        self.assertEqual([(r["scheduler"], r["load"], r["mode"]) for r in summary[:2]],
                         [("continuous", "light", "replay"), ("continuous", "light", "predict")])
        kept = {(r["scheduler"], r["load"]): int(r["attempt"]) for r in summary}
        self.assertEqual(kept[("continuous", "light")], 2)
        self.assertEqual(kept[("chunked", "light")], 1)
        self.assertAlmostEqual(float(summary[0]["iteration_mape_floor"]), 0.03)
        with open(os.path.join(self.out, "attempts.csv")) as f:
            self.assertEqual(len(list(csv.DictReader(f))), 8)


if __name__ == "__main__":
    unittest.main()
