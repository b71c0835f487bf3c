"""Tests of experiments/diagnostics/heldout_draws.py: the simulate flags it
rebuilds from a validate report's config, the floor's sigma rule, refusals
of bad flags by name, and (with SERVESIM set to the built binary) a run on
the committed one-thread held-out suite: the one simulation reproduces
every committed prediction, its errors are summary.csv's, and a report
whose prediction was altered is refused."""
import csv
import math
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DIAGNOSTICS = os.path.join(ROOT, "experiments", "diagnostics")
sys.path.insert(0, DIAGNOSTICS)
import heldout_draws  # noqa: E402
from heldout_fixtures import SUITE  # noqa: E402
import heldout_fixtures  # noqa: E402

SCRIPT = os.path.join(DIAGNOSTICS, "heldout_draws.py")
SERVESIM = os.environ.get("SERVESIM")


def scheduler(policy="chunked", tokens=256, prefix=True):
    return {"policy": policy, "max_num_batched_tokens": tokens, "num_gpu_blocks": 910, "max_model_len": 1024,
            "block_size": 16, "max_num_seqs": 256, "enable_prefix_caching": prefix}


class SimulateFlags(unittest.TestCase):
    def test_trace_workload(self):
        config = {"scheduler": scheduler(), "seed": 7,
                  "workload": {"arrival": "trace", "trace": {"rate_scale": 0.607484}}}
        self.assertEqual(heldout_draws.simulate_flags(config, "t.csv"),
                         ["--scheduler", "chunked", "--max-num-batched-tokens", "256", "--num-gpu-blocks", "910",
                          "--max-model-len", "1024", "--block-size", "16", "--max-num-seqs", "256", "--seed", "7",
                          "--enable-prefix-caching", "--trace", "t.csv", "--trace-format", "csv",
                          "--rate-scale", "0.607484"])

    def test_closed_workload_without_prefix_caching(self):
        config = {"scheduler": scheduler("continuous", 2048, prefix=False), "seed": 0,
                  "workload": {"arrival": "closed", "concurrency": 16, "num_requests": 40}}
        flags = heldout_draws.simulate_flags(config, "t.csv")
        self.assertNotIn("--enable-prefix-caching", flags)
        self.assertEqual(flags[-10:], ["--arrival", "closed", "--concurrency", "16", "--lengths-from-trace", "t.csv",
                                      "--trace-format", "csv", "--num-requests", "40"])

    def test_other_arrivals_are_refused(self):
        config = {"scheduler": scheduler(), "seed": 0, "workload": {"arrival": "poisson"}}
        with self.assertRaises(ValueError):
            heldout_draws.simulate_flags(config, "t.csv")


class Sigma(unittest.TestCase):
    def test_floor_is_the_mean_absolute_deviation(self):
        report = {"iteration_mape": {"floor": 0.04}}
        self.assertAlmostEqual(heldout_draws.sigma_of("floor", report), 0.04 * math.sqrt(math.pi / 2))
        self.assertIsNone(heldout_draws.sigma_of("floor", {"iteration_mape": {"floor": None}}))
        self.assertEqual(heldout_draws.sigma_of("0.02", report), 0.02)


class Refusals(unittest.TestCase):
    def run_script(self, *args):
        return subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)

    def test_bad_flags_are_named(self):
        for args, named in ((["--draws", "1", SUITE], "--draws"), (["--sigma", "2", SUITE], "--sigma"),
                            (["--sigma", "wide", SUITE], "--sigma")):
            r = self.run_script(*args)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(named, r.stderr, args)

    def test_a_folder_without_workloads_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = self.run_script(tmp)
            self.assertNotEqual(r.returncode, 0)


@unittest.skipUnless(SERVESIM and os.path.isfile(os.path.join(SUITE, "summary.csv")),
                     "needs SERVESIM (the built binary) and the committed one-thread held-out suite")
class CommittedSuite(unittest.TestCase):
    def run_script(self, suite, out_csv):
        return subprocess.run([sys.executable, SCRIPT, "--servesim", SERVESIM, "--draws", "5", "--csv", out_csv,
                               suite], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def test_reproduces_the_committed_predictions(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.csv")
            r = self.run_script(SUITE, out)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                rows = list(csv.DictReader(f))
            with open(os.path.join(SUITE, "summary.csv")) as f:
                committed = {c["workload"]: c for c in csv.DictReader(f)}
            self.assertEqual(len(rows), 8)
            for row in rows:
                c = committed[row["workload"]]
                for metric, q in heldout_draws.STATS:
                    self.assertAlmostEqual(float(row[f"{metric}_{q}_single"]),
                                           float(c[f"{metric}_{q}_rel_error"]), places=9)
                    self.assertTrue(math.isfinite(float(row[f"{metric}_{q}_draws"])))
                self.assertEqual(row["single_ok"], c["latency_ok"], row["workload"])
            self.assertIn("8 workloads: every P50/P90 within 10% at 5 (one simulation)", r.stdout)

    def test_an_altered_prediction_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            suite = heldout_fixtures.altered_suite(tmp, "ttft_s", "p50", 1.01)
            r = self.run_script(suite, os.path.join(tmp, "rows.csv"))
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not the same simulation", r.stderr)


if __name__ == "__main__":
    unittest.main()
