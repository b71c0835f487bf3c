"""Tests of experiments/diagnostics/heldout_sample_size.py: its flags
refused by name, the profile's in-situ factors scaled and nothing else,
the closed loop's request count rewritten, the largest move over the cost
changes, and (with SERVESIM set to the built binary) a run on the committed
one-thread held-out suite: it runs (at 40 requests and no cost change
the script checks the committed prediction itself), a cost change moves
a percentile, and an altered prediction is refused."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DIAGNOSTICS = os.path.join(ROOT, "experiments", "diagnostics")
sys.path.insert(0, DIAGNOSTICS)
import heldout_sample_size as sample_size  # noqa: E402
from heldout_fixtures import SUITE  # noqa: E402
import heldout_fixtures  # noqa: E402

SCRIPT = os.path.join(DIAGNOSTICS, "heldout_sample_size.py")
SERVESIM = os.environ.get("SERVESIM")


class Flags(unittest.TestCase):
    def test_lists_parse(self):
        self.assertEqual(sample_size.request_counts("40,120"), [40, 120])
        self.assertEqual(sample_size.cost_changes("-0.02,0,0.01"), [-0.02, 0.0, 0.01])

    def test_bad_lists_are_refused(self):
        for bad in ("", "40,x", "0", "40,-1"):
            with self.assertRaises(ValueError):
                sample_size.request_counts(bad)
        for bad in ("0.01,0.02", "0,0.5", "-0.6,0", "0,a"):
            with self.assertRaises(ValueError):
                sample_size.cost_changes(bad)

    def test_bad_flags_are_named_with_exit_2(self):
        for args, named in ((["--requests", "0", SUITE], "--requests"), (["--eps", "0.01", SUITE], "--eps")):
            r = subprocess.run([sys.executable, SCRIPT, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
            self.assertEqual(r.returncode, 2, args)
            self.assertIn(named, r.stderr, args)

    def test_a_folder_without_workloads_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            r = subprocess.run([sys.executable, SCRIPT, "--servesim", sys.executable, tmp],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("workloads.jsonl", r.stderr)


class Arithmetic(unittest.TestCase):
    def test_only_the_in_situ_factors_scale(self):
        base = {"tables": {"gemm_in_situ": {"x": [32.0, 128.0], "factor": [1.0, 0.5]},
                           "decode_in_situ": {"x": [1.0], "factor": [2.0]},
                           "lm_head": {"x": [1.0], "seconds": [0.25]}}}
        with tempfile.TemporaryDirectory() as tmp:
            with open(sample_size.scaled_profile(base, 0.02, os.path.join(tmp, "p.json"))) as f:
                p = json.load(f)
        self.assertEqual(p["tables"]["gemm_in_situ"]["factor"], [1.02, 0.51])
        self.assertEqual(p["tables"]["decode_in_situ"]["factor"], [2.04])
        self.assertEqual(p["tables"]["lm_head"], base["tables"]["lm_head"])
        self.assertEqual(base["tables"]["gemm_in_situ"]["factor"], [1.0, 0.5])  # the base untouched

    def test_a_profile_without_factors_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp, self.assertRaises(SystemExit):
            sample_size.scaled_profile({"tables": {}}, 0.01, os.path.join(tmp, "p.json"))

    def test_moves_take_the_largest_within_the_limit(self):
        values = {0.0: [1.0, 2.0, 1.0, 1.0], 0.01: [1.05, 2.0, 1.0, 1.0], -0.02: [0.9, 2.6, 1.0, 1.0],
                  0.03: [1.5, 2.0, 1.0, 1.2]}
        eps = [0.0, 0.01, -0.02, 0.03]
        small = sample_size.moves(values, eps, 0.02)
        self.assertAlmostEqual(small[0], 0.10)
        self.assertAlmostEqual(small[1], 0.30)
        self.assertEqual(small[2:], [0.0, 0.0])
        every = sample_size.moves(values, eps, 1.0)
        self.assertAlmostEqual(every[0], 0.5)
        self.assertAlmostEqual(every[3], 0.2)

    def test_the_closed_loop_serves_the_count_asked_for(self):
        config = {"seed": 1, "scheduler": {"policy": "continuous", "max_num_batched_tokens": 2048,
                                           "num_gpu_blocks": 910, "max_model_len": 1024, "block_size": 16,
                                           "max_num_seqs": 256},
                  "workload": {"arrival": "closed", "concurrency": 4, "num_requests": 40}}
        w = sample_size.workloads.draw("heldout", 0, 40)
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "t.csv")
            flags = sample_size.flags_at(config, w, 120, trace)
            with open(trace) as f:
                rows = list(csv.DictReader(f))
        self.assertEqual(flags[flags.index("--num-requests") + 1], "120")
        self.assertEqual(config["workload"]["num_requests"], 40)  # the report's config untouched
        self.assertEqual(len(rows), 120)
        # The same draw, extended: its first 40 requests are the 40-request workload's.
        first = [(f"{t:.6f}", str(p), str(o)) for t, p, o in sample_size.workloads.requests_of(w)]
        self.assertEqual([(r["arrival_s"], r["prompt_tokens"], r["output_tokens"]) for r in rows[:40]], first)


@unittest.skipUnless(SERVESIM and os.path.isfile(os.path.join(SUITE, "summary.csv")),
                     "needs SERVESIM (the built binary) and the committed one-thread held-out suite")
class CommittedSuite(unittest.TestCase):
    def test_no_change_at_40_requests_is_the_committed_prediction(self):
        with tempfile.TemporaryDirectory() as tmp:
            out = os.path.join(tmp, "rows.csv")
            r = subprocess.run([sys.executable, SCRIPT, "--servesim", SERVESIM, "--requests", "40,60",
                                "--eps", "0,0.05", "--csv", out, SUITE], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            with open(out) as f:
                rows = list(csv.DictReader(f))
        self.assertEqual(len(rows), 16)
        self.assertIn("40 requests:", r.stdout)
        self.assertIn("60 requests:", r.stdout)
        # A 5% cost change moves some percentile of some workload, and never by
        # more than the whole run (a sanity bound).
        moved = [float(row[f"{m}_{q}_move_all"]) for row in rows for m, q in sample_size.STATS]
        self.assertGreater(max(moved), 0.0)
        self.assertLess(max(moved), 10.0)
        # Within +-2% there is only eps = 0 here: nothing moves.
        self.assertEqual({float(row[f"{m}_{q}_move_small"]) for row in rows for m, q in sample_size.STATS}, {0.0})

    def test_an_altered_prediction_is_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            suite = heldout_fixtures.altered_suite(tmp, "tpot_s", "p90", 0.99)
            r = subprocess.run([sys.executable, SCRIPT, "--servesim", SERVESIM, "--requests", "40", "--eps", "0",
                                suite], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("not the same simulation", r.stderr)


if __name__ == "__main__":
    unittest.main()
