"""Unit tests of experiments/heldout/compare_profiles.py: a thinned profile
keeps exactly the asked points of the 1-D tables (and every point above
64), leaves the rest of the profile as it was, and says where it came from;
a `validate --measured --iteration-log` report becomes run.py's row; the
batch table reads decode iterations against the measured and the first
profile; pruning keeps what costs a run again; bad
flags are refused by name before anything runs."""
import contextlib
import csv
import gzip
import io
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
            # Dropping a batch size the decode-step factor was measured at is said.
            said = io.StringIO()
            with contextlib.redirect_stderr(said):
                compare_profiles.thin_profile(source, thinned, [1, 2, 64], [1, 2])
            self.assertIn("at [4] sequences", said.getvalue())


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


def write_iterations(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["index", "kind", "decode_sequences", "measured_s", "predicted_s"])
        w.writeheader()
        for i, (kind, b, measured, predicted) in enumerate(rows):
            w.writerow({"index": i, "kind": kind, "decode_sequences": b, "measured_s": measured,
                        "predicted_s": predicted})


class BatchTableAndPrune(unittest.TestCase):
    def test_decode_iterations_by_sequences_against_the_measured_and_the_reference(self):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = os.path.join(tmp, "w0"), os.path.join(tmp, "w1")
            measured = [("decode", 3, 0.02, 0.021), ("decode", 3, 0.02, 0.019), ("prefill", 0, 0.1, 0.2),
                        ("decode", 8, 0.05, 0.05)]
            write_iterations(os.path.join(a, "full", "iterations.csv"), measured)
            write_iterations(os.path.join(a, "quick", "iterations.csv"),
                             [(k, n, m, 1.1 * p) for k, n, m, p in measured])
            write_iterations(os.path.join(b, "full", "iterations.csv"), [("decode", 3, 0.01, 0.011)])
            write_iterations(os.path.join(b, "quick", "iterations.csv"), [("decode", 3, 0.01, 0.0121)])
            rows = {(r["profile"], r["sequences"]): r for r in compare_profiles.batch_rows([a, b], ["full", "quick"])}
            self.assertEqual(sorted(rows), [("full", 3), ("full", 8), ("quick", 3), ("quick", 8)])
            self.assertEqual(rows[("full", 3)]["iterations"], 3)
            self.assertAlmostEqual(rows[("full", 3)]["median_predicted_over_measured"], 1.05)
            self.assertAlmostEqual(rows[("quick", 3)]["median_predicted_over_measured"], 1.155)
            self.assertAlmostEqual(rows[("quick", 8)]["median_predicted_over_full"], 1.1)
            self.assertAlmostEqual(rows[("full", 8)]["median_predicted_over_full"], 1.0)
            write_iterations(os.path.join(b, "quick", "iterations.csv"), [])
            with self.assertRaises(SystemExit) as refused:
                compare_profiles.batch_rows([a, b], ["full", "quick"])
            self.assertIn("quick costed 0 iterations, full 1", str(refused.exception))

    def test_prune_keeps_what_costs_the_run_again(self):
        with tempfile.TemporaryDirectory() as tmp:
            folder = os.path.join(tmp, "w0")
            files = {"run/iteration_log.jsonl": '{"index": 0}\n', "run/requests.csv": "id\n", "run/summary.json": "{}",
                     "run/iterations.csv": "x", "full/report.json": "{}", "full/iteration_breakdown.csv": "k",
                     "full/iterations.csv": "x", "full/predicted/summary.json": "{}", "trace.csv": "t",
                     "quick/report.json": "{}", "quick/iteration_breakdown.csv": "k"}
            for name, text in files.items():
                os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
                with open(os.path.join(folder, name), "w") as f:
                    f.write(text)
            compare_profiles.prune(folder, ["full", "quick"])
            kept = sorted(os.path.relpath(os.path.join(d, f), folder) for d, _, fs in os.walk(folder) for f in fs)
            self.assertEqual(kept, ["full/iteration_breakdown.csv", "full/report.json", "quick/iteration_breakdown.csv",
                                    "run/iteration_log.jsonl.gz", "run/requests.csv", "run/summary.json"])
            with gzip.open(os.path.join(folder, "run", "iteration_log.jsonl.gz"), "rt") as f:
                self.assertEqual(f.read(), files["run/iteration_log.jsonl"])


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
