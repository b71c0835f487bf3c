"""experiments/heldout/run.py driven by a stand-in for servesim (a Python
script that logs its flags and answers with made-up reports), to check the
flags the suite passes: --host-drift off (the default) leaves calibrate
alone and validates with `--host-drift off`; --host-drift interleave
calibrates with the `--host-drift` switch and validates with `--host-drift
interleave`; metadata.json says which; a bad mode is refused. The suite's
numbers come from running it for real (experiments/results/heldout/,
tests/cli/heldout_test.py)."""
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SUITE = os.path.join(ROOT, "experiments", "heldout", "run.py")

FAKE_SERVESIM = textwrap.dedent('''\
    #!/usr/bin/python3
    import json, os, sys
    args = sys.argv[1:]
    log = os.environ["FAKE_SERVESIM_LOG"]
    with open(log, "a") as f:
        f.write(" ".join(args) + "\\n")
    if args[0] == "calibrate":
        with open(args[args.index("--out") + 1], "w") as f:
            json.dump({"tables": {}}, f)
        sys.exit(0)
    if args[0] == "simulate":
        print(json.dumps({"throughput": {"requests_per_s": 2.0}}))
        sys.exit(0)
    assert args[0] == "validate", args
    out = args[args.index("--out") + 1]
    os.makedirs(out, exist_ok=True)
    errors = {"rel_error": {"p50": 0.01, "p90": -0.02}}
    report = {"iteration_mape": {"all": 0.04, "floor": 0.03, "counts": {"all": 100},
                                 "bias": {"decode": 0.01, "prefill": -0.01, "mixed": None}},
              "iteration_breakdown": {"by_kind_sequences": [
                  {"kind": "decode", "sequences": "1", "count": 50, "median_ratio": 1.02, "mape": 0.03,
                   "bias": 0.02}]},
              "ttft_s": errors, "tpot_s": errors}
    for name in ("report_predict.json", "report_replay.json"):
        with open(os.path.join(out, name), "w") as f:
            json.dump(report, f)
''')


class HostDriftFlags(unittest.TestCase):
    def run_suite(self, tmp, *flags):
        fake = os.path.join(tmp, "servesim")
        with open(fake, "w") as f:
            f.write(FAKE_SERVESIM)
        os.chmod(fake, 0o755)
        log = os.path.join(tmp, "calls.log")
        out = os.path.join(tmp, "out")
        done = subprocess.run([sys.executable, SUITE, "--servesim", fake, "--count", "1", "--out", out, *flags],
                              env={**os.environ, "FAKE_SERVESIM_LOG": log}, capture_output=True, text=True)
        calls = []
        if os.path.exists(log):
            with open(log) as f:
                calls = f.read().splitlines()
        return done, calls, out

    def test_default_is_the_profile_alone(self):
        with tempfile.TemporaryDirectory() as tmp:
            done, calls, out = self.run_suite(tmp)
            self.assertEqual(done.returncode, 0, done.stderr)
            calibrate = [c for c in calls if c.startswith("calibrate")]
            validate = [c for c in calls if c.startswith("validate")]
            self.assertEqual(len(calibrate), 1)
            self.assertNotIn("--host-drift", calibrate[0])
            self.assertEqual(len(validate), 1)
            self.assertIn("--host-drift off", validate[0])
            with open(os.path.join(out, "metadata.json")) as f:
                self.assertEqual(json.load(f)["host_drift"], "off")

    def test_interleave_reaches_calibrate_and_validate(self):
        with tempfile.TemporaryDirectory() as tmp:
            done, calls, out = self.run_suite(tmp, "--host-drift", "interleave")
            self.assertEqual(done.returncode, 0, done.stderr)
            calibrate = [c.split() for c in calls if c.startswith("calibrate")]
            self.assertEqual(len(calibrate), 1)
            # calibrate's --host-drift is a switch: no mode after it.
            i = calibrate[0].index("--host-drift")
            self.assertNotIn(calibrate[0][i + 1:i + 2], (["off"], ["report"], ["interleave"]))
            validate = [c for c in calls if c.startswith("validate")]
            self.assertIn("--host-drift interleave", validate[0])
            with open(os.path.join(out, "metadata.json")) as f:
                self.assertEqual(json.load(f)["host_drift"], "interleave")
            with open(os.path.join(out, "summary.csv")) as f:
                self.assertEqual(len(f.read().splitlines()), 2)

    def test_a_bad_mode_is_refused_before_anything_runs(self):
        with tempfile.TemporaryDirectory() as tmp:
            done, calls, _ = self.run_suite(tmp, "--host-drift", "sometimes")
            self.assertEqual(done.returncode, 2)
            self.assertIn("--host-drift", done.stderr)
            self.assertEqual(calls, [])


if __name__ == "__main__":
    unittest.main()
