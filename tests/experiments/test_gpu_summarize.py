"""Tests of experiments/gpu/summarize.py's breakdown: the per-point table of
predicted / measured by kind x sequences from each validation's
report_predict.json (or, for older runs, its iterations.csv with
validate's sequence buckets), buckets under 10 iterations left out, and
the count of decode buckets within issue 32's +-3%; decode_buckets.py's
padding rule (the CUDA decoder's, or the profile's) and its table of steps
by the bucket they ran at; and the whole summary on a folder with nothing
in it."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "gpu")
sys.path.insert(0, GPU)
import decode_buckets  # noqa: E402
import summarize  # noqa: E402


def bucket(kind, sequences, count, ratio):
    return {"kind": kind, "sequences": sequences, "count": count, "median_ratio": ratio, "mape": 0.0, "bias": 0.0}


def write_point(work, model, point, breakdown=None, iterations=None):
    folder = os.path.join(work, "validation", model, point)
    os.makedirs(folder)
    report = {"mode": "predict"}
    if breakdown is not None:
        report["iteration_breakdown"] = {"by_kind_sequences": breakdown}
    with open(os.path.join(folder, "report_predict.json"), "w") as f:
        json.dump(report, f)
    if iterations is not None:
        with open(os.path.join(folder, "iterations.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["index", "kind", "measured_s", "predicted_s", "sequences"])
            for i, (kind, n, measured, predicted) in enumerate(iterations):
                w.writerow([i, kind, measured, predicted, n])


class SequenceLabel(unittest.TestCase):
    def test_validates_buckets(self):
        for n, label in ((1, "1"), (2, "2"), (3, "3-4"), (4, "3-4"), (5, "5-8"), (16, "9-16"), (17, "17-32"),
                         (64, "33-64"), (65, "65+"), (256, "65+")):
            self.assertEqual(summarize.sequence_label(n), label, n)


class Breakdown(unittest.TestCase):
    def test_table_and_decode_count(self):
        with tempfile.TemporaryDirectory() as work:
            write_point(work, "m", "continuous_light", breakdown=[
                bucket("decode", "1", 50, 1.02), bucket("decode", "2", 20, 1.05),
                bucket("decode", "3-4", 5, 1.20), bucket("prefill", "1", 30, 0.90)])
            # An older run: the breakdown from iterations.csv (predicted / measured, median per bucket).
            rows = [("decode", 1, 1.0, 0.99)] * 6 + [("decode", 1, 1.0, 1.01)] * 6 + [("decode", 9, 2.0, 2.0)] * 3
            write_point(work, "m", "chunked_light", iterations=rows)
            text = summarize.breakdown(work)
            lines = text.splitlines()
            self.assertIn("| kind | sequences | chunked_light | continuous_light |", lines)
            self.assertIn("| prefill | 1 | - | 0.900 (30) |", lines)
            self.assertIn("| decode | 1 | 1.000 (12) | 1.020 (50) |", lines)
            self.assertIn("| decode | 2 | - | 1.050 (20) |", lines)
            self.assertFalse(any(line.startswith("| decode | 3-4 ") for line in lines), "a bucket of 5 was kept")
            self.assertFalse(any(line.startswith("| decode | 9-16 ") for line in lines), "a bucket of 3 was kept")
            # prefill rows come before decode rows
            self.assertLess(lines.index("| prefill | 1 | - | 0.900 (30) |"),
                            lines.index("| decode | 1 | 1.000 (12) | 1.020 (50) |"))
            self.assertIn("decode buckets within +-3%: 2 of 3; outside: continuous_light decode x 2 (1.050)", text)

    def test_nothing_to_tabulate(self):
        with tempfile.TemporaryDirectory() as work:
            self.assertIn("no validation report", summarize.breakdown(work))
            done = subprocess.run([sys.executable, os.path.join(GPU, "summarize.py"), work], capture_output=True,
                                  text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("breakdown: no validation report", done.stdout)
            self.assertIn("decode buckets: no validation with decode steps", done.stdout)


class DecodeBuckets(unittest.TestCase):
    def test_the_cuda_rule(self):
        rule = decode_buckets.CUDA_GRAPHS
        for n, b in ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (32, 32), (33, 40), (512, 512), (513, 513)):
            self.assertEqual(decode_buckets.bucket(n, rule), b, n)
        self.assertEqual(decode_buckets.bucket(5, {"sizes": [2], "multiple": 4, "max_batch": 100}), 8)

    def test_the_profile_rule_first(self):
        with tempfile.TemporaryDirectory() as work:
            self.assertEqual(decode_buckets.padding_rule(work), decode_buckets.CUDA_GRAPHS)
            rule = {"sizes": [1], "multiple": 16, "max_batch": 64}
            with open(os.path.join(work, "profile.json"), "w") as f:
                json.dump({"decode_padding": rule}, f)
            self.assertEqual(decode_buckets.padding_rule(work), rule)

    def test_steps_by_bucket(self):
        with tempfile.TemporaryDirectory() as work:
            # Batches 33 and 40 both run as 40: the same measured step, a
            # prediction that rises with the batch.
            rows = ([("decode", 33, 0.006, 0.0054)] * 3 + [("decode", 40, 0.006, 0.0060)] * 3 +
                    [("decode", 32, 0.005, 0.005)] * 2 + [("prefill", 1, 0.01, 0.02)])
            write_point(work, "m", "p", iterations=rows)
            lines = decode_buckets.decode_buckets(work).splitlines()
            self.assertIn("| 40 | 6 | 6.00 | 0.950 | 33: 0.900 | 40: 1.000 |", lines)
            self.assertIn("| 32 | 2 | 5.00 | 1.000 | - | - |", lines)
            self.assertFalse(any(line.startswith("| 1 |") for line in lines), "a prefill was counted")


if __name__ == "__main__":
    unittest.main()
