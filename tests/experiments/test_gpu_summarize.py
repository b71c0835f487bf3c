"""Tests of experiments/gpu/summarize.py's breakdown: the per-point table of
predicted / measured by kind x sequences from each validation's
report_predict.json (or, for older runs, its iterations.csv with
validate's sequence buckets), buckets under 10 iterations left out, and
the count of decode buckets within issue 32's +-3%; decode_buckets.py's
padding rule (the CUDA decoder's, or the profile's) and its table of steps
by the bucket they ran at; gemm_buckets.py's algorithm buckets (the C++
rule's values) and its table of prefill and mixed iterations by bucket;
prefill_sequences.py's table of prefills by their sequences beside the
profile's launch cost; and the whole summary on a folder with nothing in
it."""
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
import gemm_buckets  # noqa: E402
import prefill_sequences  # noqa: E402
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
            self.assertIn("GEMM buckets: no validation with prefill or mixed iterations", done.stdout)
            self.assertIn("prefill sequences: no validation with prefill iterations", done.stdout)


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


def write_token_iterations(work, model, point, rows, columns=("prefill_tokens", "decode_tokens")):
    """iterations.csv with validate's token columns: rows of (kind, prefill, decode, measured_s, predicted_s)."""
    folder = os.path.join(work, "validation", model, point)
    os.makedirs(folder)
    with open(os.path.join(folder, "iterations.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["index", "kind", "measured_s", "predicted_s"] + list(columns) + ["sequences"])
        for i, (kind, prefill, decode, measured, predicted) in enumerate(rows):
            w.writerow([i, kind, measured, predicted, prefill, decode, 1])


class GemmBuckets(unittest.TestCase):
    def test_the_rule(self):
        # The values tests/kernels/test_gemm_buckets.cpp holds the C++ rule to.
        for t, b in ((1, 1), (2, 2), (3, 4), (5, 8), (9, 16), (17, 24), (256, 256), (257, 320), (320, 320),
                     (321, 384), (513, 640), (4097, 5120), (8192, 8192)):
            self.assertEqual(gemm_buckets.bucket(t), b, t)
        for top, bottom in ((1, 1), (4, 3), (16, 9), (320, 257), (448, 385), (640, 513)):
            self.assertEqual(gemm_buckets.bucket_bottom(top), bottom, top)

    def test_iterations_by_bucket(self):
        with tempfile.TemporaryDirectory() as work:
            # 257-320: the lower half predicted 20% short, the upper half right.
            rows = ([("prefill", 260, 0, 0.010, 0.008)] * 2 + [("mixed", 250, 20, 0.010, 0.008)] +
                    [("prefill", 300, 0, 0.010, 0.010)] * 3 +
                    [("prefill", 100, 0, 0.004, 0.004)] * 2 +  # two iterations: a bucket left out
                    [("decode", 0, 300, 0.005, 0.001)] * 5)  # decode steps are decode_buckets.py's
            write_token_iterations(work, "m", "p", rows)
            lines = gemm_buckets.gemm_buckets(work).splitlines()
            self.assertIn("| 257-320 | 6 | 10.00 | 0.900 | 0.800 | 1.000 |", lines)
            self.assertFalse(any(line.startswith("| 97-104 |") for line in lines), "a bucket of 2 was kept")
            self.assertEqual(sum(line.startswith("| ") and not line.startswith("| bucket") for line in lines), 1)
            # --min-tokens leaves the smaller iterations out
            self.assertIn("| 257-320 | 3 | 10.00 | 1.000 | - | 1.000 |",
                          gemm_buckets.gemm_buckets(work, min_tokens=280).splitlines())

    def test_a_run_without_token_columns(self):
        with tempfile.TemporaryDirectory() as work:
            write_token_iterations(work, "m", "p", [("prefill", 300, 0, 0.01, 0.01)] * 3, columns=("a", "b"))
            self.assertIn("no validation with prefill or mixed iterations", gemm_buckets.gemm_buckets(work))

    def test_refuses_bad_flags(self):
        script = os.path.join(GPU, "gemm_buckets.py")
        with tempfile.TemporaryDirectory() as work:
            for args in ([os.path.join(work, "absent")], [work, "--min-tokens", "0"]):
                done = subprocess.run([sys.executable, script] + args, capture_output=True, text=True)
                self.assertEqual(done.returncode, 2, args)
                self.assertTrue("not a folder" in done.stderr or "--min-tokens" in done.stderr, done.stderr)


class PrefillSequences(unittest.TestCase):
    def write(self, work, rows, profile=True):
        """rows: (kind, prefill_sequences, prefill_tokens, measured_s, predicted_s)."""
        folder = os.path.join(work, "validation", "m", "p")
        os.makedirs(os.path.join(folder, "measured"))
        with open(os.path.join(folder, "iterations.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["index", "kind", "measured_s", "predicted_s", "prefill_tokens", "decode_tokens"])
            for i, (kind, _, tokens, measured, predicted) in enumerate(rows):
                w.writerow([i, kind, measured, predicted, tokens, 0])
        with open(os.path.join(folder, "measured", "iterations.csv"), "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["index", "kind", "prefill_sequences"])
            for i, (kind, n, *_rest) in enumerate(rows):
                w.writerow([i, kind, n])
        if profile:
            with open(os.path.join(work, "validation", "m", "profile.json"), "w") as f:
                json.dump({"model": {"num_hidden_layers": 4}, "attention_launches": "two_launches",
                           "tables": {"prefill_attention": {"seconds": [[2e-5, 1e-5], [3e-5, 4e-5]]}}}, f)

    def test_by_sequences_beside_the_launch_cost(self):
        with tempfile.TemporaryDirectory() as work:
            # Two sequences: 80 us over in 4 layers = 20 us per extra sequence and layer.
            rows = ([("prefill", 1, 100, 0.001, 0.001)] * 3 + [("prefill", 2, 200, 0.002, 0.00208)] * 2 +
                    [("decode", 1, 0, 0.001, 0.002)] * 4)  # decode steps are not counted
            self.write(work, rows)
            text = prefill_sequences.prefill_sequences(work)
            self.assertIn("smallest time (one launch) 10.0 us per layer, the profile pays it once", text)
            lines = text.splitlines()
            self.assertIn("| 1 | 3 | 100 | 1.000 | - | - |", lines)
            self.assertIn("| 2 | 2 | 200 | 1.040 | 20.0 | - |", lines)  # the profile pays it once already
            self.assertEqual(sum(line.startswith("| ") and not line.startswith("| sequences") for line in lines), 2)

    def test_without_a_profile(self):
        with tempfile.TemporaryDirectory() as work:
            self.write(work, [("prefill", 2, 200, 0.002, 0.00208)], profile=False)
            lines = prefill_sequences.prefill_sequences(work).splitlines()
            self.assertIn("| 2 | 1 | 200 | 1.040 | - | - |", lines)

    def test_what_paying_once_would_give(self):
        with tempfile.TemporaryDirectory() as work:
            self.write(work, [("prefill", 3, 300, 0.002, 0.00216)])
            path = os.path.join(work, "validation", "m", "profile.json")
            with open(path) as f:
                profile = json.load(f)
            del profile["attention_launches"]  # per_chunk
            with open(path, "w") as f:
                json.dump(profile, f)
            # 160 us over in 4 layers and 2 extra sequences: 20 us each; paying
            # the 10 us launch once takes 80 us off: 2.08 / 2.00.
            text = prefill_sequences.prefill_sequences(work)
            self.assertIn("the profile pays it per chunk", text)
            self.assertIn("| 3 | 1 | 300 | 1.080 | 20.0 | 1.040 |", text.splitlines())


if __name__ == "__main__":
    unittest.main()
