"""Tests of experiments/gpu/summarize.py's breakdown: the per-point table of
predicted / measured by kind x sequences from each validation's
report_predict.json (or, for older runs, its iterations.csv with
validate's sequence buckets), buckets under 10 iterations left out, and
the count of decode buckets within issue 32's +-3%; and the whole summary
on a folder with nothing in it."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

GPU = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments", "gpu")
sys.path.insert(0, GPU)
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


if __name__ == "__main__":
    unittest.main()
