"""Tests of experiments/gpu/repredict.py on the committed H200 run
(experiments/results/h200/results.tar.gz) with the real servesim ($SERVESIM):
the profile as it is reproduces every committed prediction's TTFT and TPOT
P50/P90 errors, a --set that changes nothing changes no figure, the CUDA
attention launches lower the 1B's prefill-heavy TTFT; and its refusals."""
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import unittest

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
SCRIPT = os.path.join(ROOT, "experiments", "gpu", "repredict.py")
RESULTS = os.path.join(ROOT, "experiments", "results", "h200", "results.tar.gz")
SERVESIM = os.environ.get("SERVESIM", os.path.join(ROOT, "build", "release", "cli", "servesim"))
ROW = re.compile(r"^\| (\S+) \| (\S+) \| ([-+\d.]+)% / ([-+\d.]+)% \| ([-+\d.]+)% / ([-+\d.]+)% \| "
                 r"([-+\d.]+)% / ([-+\d.]+)% \| ([-+\d.]+)% / ([-+\d.]+)% \|$")


def run(args):
    return subprocess.run([sys.executable, SCRIPT] + args, capture_output=True, text=True)


def rows(stdout):
    """{(model, point): [ttft p50, p90 as is, with; tpot p50, p90 as is, with] in percent}."""
    out = {}
    for line in stdout.splitlines():
        m = ROW.match(line)
        if m:
            out[(m.group(1), m.group(2))] = [float(v) for v in m.groups()[2:]]
    return out


@unittest.skipUnless(os.access(SERVESIM, os.X_OK), f"no servesim binary at {SERVESIM}")
class Repredict(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        with tarfile.open(RESULTS) as t:
            t.extractall(cls.tmp.name)
        cls.work = cls.tmp.name

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_as_is_reproduces_the_committed_predictions(self):
        done = run([self.work, "--servesim", SERVESIM, "--model", "llama-3.2-1b",
                    "--set", 'attention_launches="per_chunk"'])
        self.assertEqual(done.returncode, 0, done.stderr)
        table = rows(done.stdout)
        self.assertEqual(len(table), 6, done.stdout)
        for (model, point), v in table.items():
            with open(os.path.join(self.work, "validation", model, point, "report_predict.json")) as f:
                committed = json.load(f)
            for i, (metric, p) in enumerate([("ttft_s", "p50"), ("ttft_s", "p90")]):
                self.assertAlmostEqual(v[i * 1], 100 * committed[metric]["rel_error"][p], delta=0.051, msg=point)
            self.assertAlmostEqual(v[4], 100 * committed["tpot_s"]["rel_error"]["p50"], delta=0.051, msg=point)
            # per_chunk is what an older profile without the field means: nothing moves.
            self.assertEqual(v[0:2], v[2:4], point)
            self.assertEqual(v[4:6], v[6:8], point)

    def test_two_launches_lower_the_prefill_heavy_ttft(self):
        done = run([self.work, "--servesim", SERVESIM, "--model", "llama-3.2-1b",
                    "--set", 'attention_launches="two_launches"'])
        self.assertEqual(done.returncode, 0, done.stderr)
        near = rows(done.stdout)[("llama-3.2-1b", "continuous_near-saturation")]
        self.assertLess(near[2], near[0])  # TTFT P50: several prompts prefilled together cost less
        self.assertLess(near[3], near[1])

    def test_refusals(self):
        for args, says in (([self.work, "--set", "attention_launches"], "FIELD=JSON"),
                           ([self.work, "--set", "x=not json"], "not JSON"),
                           ([os.path.join(self.work, "absent"), "--set", "x=1"], "no validation/"),
                           ([self.work, "--set", "x=1", "--servesim", "/nonexistent"], "not an executable")):
            done = run(args)
            self.assertEqual(done.returncode, 2, args)
            self.assertIn(says, done.stderr)


if __name__ == "__main__":
    unittest.main()
