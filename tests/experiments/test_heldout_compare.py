"""Unit tests of experiments/heldout/compare_profiles.py: a thinned profile
keeps exactly the asked points of the 1-D tables (and every point above
64), leaves the rest of the profile as it was, and says where it came from;
a `validate --measured --iteration-log` report becomes run.py's row; bad
flags are refused by name before anything runs."""
import json
import os
import subprocess
import sys
import tempfile
import unittest

HELDOUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "heldout")
sys.path.insert(0, HELDOUT)
import compare_profiles  # noqa: E402
import workloads  # noqa: E402

SCRIPT = os.path.join(HELDOUT, "compare_profiles.py")


def table(xs):
    return {"x": [float(x) for x in xs], "seconds": [1e-3 * x for x in xs]}


def profile():
    dense = list(range(1, 65)) + [128, 256, 2048]
    tables = {name: table(dense) for name in compare_profiles.TOKEN_TABLES + compare_profiles.ROW_TABLES}
    tables["decode_in_situ"] = {"x": [1.0, 2.0, 4.0], "factor": [1.0, 0.9, 0.95]}
    return {"format": "servesim-profile/1", "tables": tables, "metadata": {"settings": {"mode": "full"}}}


class ThinProfile(unittest.TestCase):
    def test_keeps_the_asked_points_and_everything_above_64(self):
        with tempfile.TemporaryDirectory() as tmp:
            source, thinned = os.path.join(tmp, "p.json"), os.path.join(tmp, "t.json")
            with open(source, "w") as f:
                json.dump(profile(), f)
            compare_profiles.thin_profile(source, thinned, [1, 2, 4, 7, 8, 64], [1, 3])
            with open(thinned) as f:
                t = json.load(f)
            for name in compare_profiles.TOKEN_TABLES:
                self.assertEqual(t["tables"][name]["x"], [1, 2, 4, 7, 8, 64, 128, 256, 2048], name)
                self.assertEqual(t["tables"][name]["seconds"], [1e-3 * x for x in t["tables"][name]["x"]], name)
            for name in compare_profiles.ROW_TABLES:
                self.assertEqual(t["tables"][name]["x"], [1, 3, 128, 256, 2048], name)
            self.assertEqual(t["tables"]["decode_in_situ"], profile()["tables"]["decode_in_situ"])
            self.assertEqual(t["metadata"]["thinned"]["tokens"], [1, 2, 4, 7, 8, 64])
            self.assertEqual(t["metadata"]["settings"], {"mode": "full"})
            with open(source) as f:
                self.assertEqual(json.load(f), profile(), "the source profile changed")


class RowOf(unittest.TestCase):
    def test_a_measured_report_becomes_run_py_s_row(self):
        w = workloads.draw("heldout", 3, 40)
        bucket = {"kind": "decode", "sequences": "5-8", "count": 12, "median_ratio": 1.06, "mape": 0.06,
                  "bias": 0.06}
        small = {"kind": "decode", "sequences": "1", "count": 9, "median_ratio": 1.5, "mape": 0.5, "bias": 0.5}
        errors = {"rel_error": {"p50": 0.04, "p90": -0.12}}
        report = {"server_iterations": {
            "iteration_mape": {"all": 0.05, "floor": 0.02, "counts": {"all": 80},
                               "bias": {"decode": 0.03, "prefill": -0.01, "mixed": None}},
            "iteration_breakdown": {"by_kind_sequences": [bucket, small]}},
            "ttft_s": errors, "tpot_s": {"rel_error": {"p50": 0.01, "p90": 0.02}}}
        r = compare_profiles.row_of(w, 1.5, "quick", report)
        self.assertEqual(r["profile"], "quick")
        self.assertEqual(r["worst_bucket"], "decode x 5-8")  # the 9-iteration bucket does not count
        self.assertTrue(r["mape_ok"])
        self.assertFalse(r["buckets_ok"])
        self.assertFalse(r["latency_ok"])  # TTFT P90 -12%
        self.assertEqual(r["ttft_p90_rel_error"], -0.12)


class Refusals(unittest.TestCase):
    def test_bad_flags_are_refused_by_name(self):
        with tempfile.TemporaryDirectory() as tmp:
            source = os.path.join(tmp, "p.json")
            with open(source, "w") as f:
                json.dump(profile(), f)
            out = os.path.join(tmp, "out")
            for args, says in ((["--profile", "p"], "NAME=VALUE"),
                               (["--profile", "p=" + os.path.join(tmp, "none.json")], "no file"),
                               (["--calibrate", "c=fast"], "full or quick"),
                               (["--profile", "p=" + source, "--thin", "t=q:1,2"], "SOURCE one of ['p']"),
                               (["--profile", "p=" + source, "--thin", "t=p:1,x"], "not a list of integers"),
                               (["--profile", "p=" + source, "--thin", "t=p:0,2"], "positive"),
                               ([], "at least one")):
                done = subprocess.run([sys.executable, SCRIPT, "--out", out, "--servesim", "/nonexistent"] + args,
                                      capture_output=True, text=True)
                self.assertNotEqual(done.returncode, 0, args)
                self.assertIn(says, done.stderr, args)


if __name__ == "__main__":
    unittest.main()
