"""experiments/published/: measurements.csv is well formed (one published
number a row, with its source, URL and the servesim arguments that predict
it), and run.py, driven by a stand-in for servesim (a Python script
answering `simulate --json` with a fixed summary), turns each row into its
prediction and error and simulates each distinct command once. The
predictions themselves are checked by running the study
(experiments/published/)."""
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
STUDY = os.path.join(ROOT, "experiments", "published", "run.py")
MEASUREMENTS = os.path.join(ROOT, "experiments", "published", "measurements.csv")

# The stand-in: every simulation appends its arguments to $FAKE_LOG and prints the same summary.
FAKE_SERVESIM = textwrap.dedent('''\
    #!/usr/bin/python3
    import json, os, sys
    args = sys.argv[1:]
    assert args[0] == "simulate", args
    assert "--json" in args and "--quiet" in args, args
    with open(os.environ["FAKE_LOG"], "a") as f:
        f.write(" ".join(args) + "\\n")
    print(json.dumps({"throughput": {"output_tokens_per_s": 1000.0, "requests_per_s": 10.0},
                      "ttft_s": {"p50": 0.02}, "tpot_s": {"p50": 0.01}}))
''')
SUMMARY = {"throughput.output_tokens_per_s": 1000.0, "throughput.requests_per_s": 10.0, "ttft_s.p50": 0.02,
           "tpot_s.p50": 0.01}


def read(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


class Measurements(unittest.TestCase):
    def test_every_row_is_sourced_and_predictable(self):
        rows = read(MEASUREMENTS)
        self.assertGreaterEqual(len(rows), 19)
        self.assertEqual(len({r["id"] for r in rows}), len(rows), "ids are unique")
        for r in rows:
            for col in ("source", "url", "engine", "version", "model", "precision", "hardware", "setting", "metric",
                        "unit"):
                self.assertTrue(r[col].strip(), f"{r['id']}: empty {col}")
            self.assertTrue(r["url"].startswith("https://"), r["id"])
            self.assertGreater(float(r["published"]), 0, r["id"])
            args = r["servesim_args"].split()
            self.assertEqual(args[:2], ["--model", "llama-3.1-8b"], r["id"])
            self.assertIn("--hardware", args, r["id"])
            self.assertIn(r["summary_key"], SUMMARY, r["id"])
            self.assertEqual(float(r["scale"]), 1000.0 if r["unit"] == "ms" else 1.0, r["id"])


class Study(unittest.TestCase):
    def run_study(self):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        fake = os.path.join(tmp, "servesim")
        with open(fake, "w") as f:
            f.write(FAKE_SERVESIM)
        os.chmod(fake, 0o755)
        env = dict(os.environ, FAKE_LOG=os.path.join(tmp, "calls.log"))
        out = os.path.join(tmp, "out")
        subprocess.run([sys.executable, STUDY, "--servesim", fake, "--out", out], check=True, env=env,
                       capture_output=True, text=True)
        with open(env["FAKE_LOG"]) as f:
            calls = f.read().splitlines()
        with open(os.path.join(out, "metadata.json")) as f:
            meta = json.load(f)
        return read(os.path.join(out, "results.csv")), calls, meta

    def test_predictions_and_errors(self):
        results, calls, meta = self.run_study()
        measurements = {m["id"]: m for m in read(MEASUREMENTS)}
        self.assertEqual([r["id"] for r in results], list(measurements))
        for r in results:
            m = measurements[r["id"]]
            predicted = SUMMARY[m["summary_key"]] * float(m["scale"])
            self.assertAlmostEqual(float(r["predicted"]), predicted, places=6)
            self.assertAlmostEqual(float(r["error_pct"]), 100 * (predicted / float(m["published"]) - 1), delta=0.051)
            self.assertEqual(r["command"], "servesim simulate --quiet --json " + m["servesim_args"])
            self.assertEqual(r["note"], "")
        distinct = {m["servesim_args"] for m in measurements.values()}
        self.assertEqual(len(calls), len(distinct), "each distinct command simulates once")
        self.assertFalse(meta["what_if"])


if __name__ == "__main__":
    unittest.main()
