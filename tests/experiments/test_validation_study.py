"""experiments/validation_cpu/run.py driven end to end by a stand-in for
servesim (a Python script answering `simulate` and `validate` with made-up
reports), to check what the study does with them: the loads scaled to the
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

# The stand-in: `simulate` prints a capacity of 2.0 req/s; `validate --out D`
# writes D/report_{replay,predict}.json whose noise floor is 8% on the first
# attempt of continuous_light and continuous_overloaded and 3% otherwise,
# and appends D's name to calls.log beside the study's folder.
FAKE_SERVESIM = textwrap.dedent('''\
    #!/usr/bin/python3
    import json, os, sys
    args = sys.argv[1:]
    if args[0] == "simulate":
        print(json.dumps({"throughput": {"requests_per_s": 2.0}}))
        sys.exit(0)
    assert args[0] == "validate", args
    out = args[args.index("--out") + 1]
    name = os.path.basename(out)
    with open(os.path.join(os.path.dirname(os.path.dirname(out)), "calls.log"), "a") as f:
        f.write(name + " " + args[args.index("--rate") + 1] + "\\n")
    noisy = name in ("continuous_light.attempt1", "continuous_overloaded.attempt1")
    floor = 0.08 if noisy else 0.03
    stats = {"rel_error": {"p50": 0.01, "p90": -0.02}, "measured": {"p50": 1.0}}
    report = {"iteration_mape": {"all": floor + 0.005, "floor": floor, "decode": floor, "prefill": 0.1,
                                 "mixed": 0.1},
              "ttft_s": stats, "tpot_s": stats}
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

    def study(self, *flags):
        done = subprocess.run([sys.executable, STUDY, "--servesim", self.servesim, "--profile", self.profile,
                               "--out", self.out, "--max-floor", "0.05", "--attempts", "3", *flags],
                              capture_output=True, text=True)
        self.assertEqual(done.returncode, 0, done.stderr)
        with open(os.path.join(self.tmp.name, "calls.log")) as f:
            calls = [line.split() for line in f]
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
