"""Unit tests of experiments/diagnostics/decode_jitter/compare.py: the jitter
of a burst of decode steps against their rolling median, the per-burst
statistics, the table over rounds, and the whole comparison driven with two
stand-in binaries that print fixed steps."""
import csv
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
COMPARE = os.path.join(HERE, "..", "..", "experiments", "diagnostics", "decode_jitter", "compare.py")
sys.path.insert(0, os.path.dirname(COMPARE))
import compare  # noqa: E402


class Jitter(unittest.TestCase):
    def test_steady_steps_have_no_jitter(self):
        self.assertEqual(compare.jitter_pct([10.0] * 20), 0.0)

    def test_drift_is_not_jitter(self):
        # A slow, steady climb: each step equals its rolling median.
        self.assertAlmostEqual(compare.jitter_pct([10.0 + 0.1 * i for i in range(30)]), 0.0)

    def test_one_slow_step(self):
        # 11 steps with NEIGHBOURS = 4 on each side: steps 4..6 are scored.
        # Step 5 is 20% slow; its window's median is still 10.
        steps = [10.0] * 11
        steps[5] = 12.0
        self.assertAlmostEqual(compare.jitter_pct(steps), 20.0 / 3)

    def test_too_short_a_burst_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "too short"):
            compare.jitter_pct([10.0] * 8)

    def test_burst_stats(self):
        steps = [10.0] * 9 + [15.0]  # the slowest is the 10th of 10: p90 is it
        s = compare.burst_stats(steps)
        self.assertEqual(s["median_ms"], 10.0)
        self.assertAlmostEqual(s["p90_over_median"], 1.5)
        self.assertEqual(s["jitter_pct"], 0.0)  # the slow step has no 4 neighbours after it

    def test_read_steps_drops_the_warm_up(self):
        text = "elapsed_s,step_ms\n0,50\n0.05,40\n0.09,10\n0.1,11\n"
        self.assertEqual(compare.read_steps(text), [10.0, 11.0])
        with self.assertRaisesRegex(ValueError, "step_ms"):
            compare.read_steps("elapsed_s,decode\n0,1\n")


class Summary(unittest.TestCase):
    def test_means_over_rounds_base_first(self):
        bursts = [{"round": r, "batch": b, "build": build, "median_ms": m, "jitter_pct": j, "p90_over_median": 1.1}
                  for r, b, build, m, j in [(0, 8, "head", 30, 2.0), (0, 8, "base", 32, 4.0), (0, 1, "head", 15, 1.0),
                                            (0, 1, "base", 17, 3.0), (1, 8, "head", 34, 3.0), (1, 8, "base", 36, 6.0),
                                            (1, 1, "head", 15, 1.0), (1, 1, "base", 17, 3.0)]]
        rows = compare.summarize(bursts)
        self.assertEqual([(r["batch"], r["build"]) for r in rows], [(1, "base"), (1, "head"), (8, "base"), (8, "head")])
        self.assertEqual(rows[2]["bursts"], 2)
        self.assertAlmostEqual(rows[2]["jitter_pct"], 5.0)
        self.assertAlmostEqual(rows[3]["median_ms"], 32.0)
        self.assertIn("base 4.00%, head 1.75%", compare.format_table(rows))  # (1 + 2.5) / 2
        # Paired speed: each round's head over its base, the median over rounds.
        paired = compare.paired_speed(bursts)
        self.assertAlmostEqual(paired[1][0], 15 / 17)
        self.assertAlmostEqual(paired[8][0], (30 / 32 + 34 / 36) / 2)
        self.assertEqual(paired[8][1:], (2, 2))
        self.assertIn("0.882 (2 of 2)", compare.format_table(rows, bursts))


class EndToEnd(unittest.TestCase):
    def test_two_stand_in_builds(self):
        with tempfile.TemporaryDirectory() as tmp:
            # Each stand-in prints 2 warm-up steps, then a steady or a
            # jittery pattern, and checks it was asked for one batch size.
            def stand_in(name, pattern):
                path = os.path.join(tmp, name)
                with open(path, "w") as f:
                    f.write("#!/bin/sh\n[ \"$1\" = --batch ] && [ \"$3\" = --seconds ] || exit 3\n"
                            "echo elapsed_s,step_ms\necho 0,99\necho 0,99\n"
                            f"for s in {' '.join(map(str, pattern))}; do echo 0,$s; done\n")
                os.chmod(path, 0o755)
                return path
            base = stand_in("base", [10, 10, 13] * 7)
            head = stand_in("head", [10] * 20)
            out = os.path.join(tmp, "out")
            done = subprocess.run([sys.executable, COMPARE, "--base", base, "--head", head, "--batches", "1,16",
                                   "--seconds", "0.1", "--rounds", "2", "--out", out],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            with open(os.path.join(out, "bursts.csv")) as f:
                bursts = list(csv.DictReader(f))
            self.assertEqual(len(bursts), 8)  # 2 rounds x 2 batches x 2 builds
            self.assertEqual([b["build"] for b in bursts[:2]], ["base", "head"])
            # Every third base step is 30% slow: each 9-step window's median
            # is 10, so the scored steps stray by 30% a third of the time.
            base_jitter = [float(b["jitter_pct"]) for b in bursts if b["build"] == "base"]
            self.assertTrue(all(abs(j - 10) < 1 for j in base_jitter), base_jitter)
            self.assertTrue(all(float(b["jitter_pct"]) == 0 for b in bursts if b["build"] == "head"))
            self.assertIn("head 0.00%", done.stdout)
            self.assertTrue(os.path.getsize(os.path.join(out, "jitter.png")) > 0)
            self.assertIn("1.000 (0 of 2)", done.stdout)  # equal medians: head never faster
            # --summarize reads bursts.csv back: the same table.
            again = subprocess.run([sys.executable, COMPARE, "--summarize", out], capture_output=True, text=True)
            self.assertEqual(again.returncode, 0, again.stderr)
            self.assertEqual(again.stdout, done.stdout)

    def test_summarize_needs_a_bursts_csv(self):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, COMPARE, "--summarize", tmp], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("bursts.csv: no such file", done.stderr)

    def test_a_failing_build_is_reported(self):
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, COMPARE, "--base", "/bin/false", "--head", "/bin/false",
                                   "--rounds", "1", "--batches", "1", "--out", tmp], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("--batch 1 failed", done.stderr)


@unittest.skipUnless(os.environ.get("SERVESIM_DECODE_STEPS"),
                     "SERVESIM_DECODE_STEPS (the path of the built servesim_decode_steps) not set")
class RealDecodeSteps(unittest.TestCase):
    """servesim_decode_steps itself (tools/; its path from SERVESIM_DECODE_STEPS):
    the CSV compare.py reads, and bad flags."""

    def run_it(self, *args):
        # One thread: under ctest -j the two cores are shared, and OpenMP
        # threads that wait on each other make every step far slower.
        return subprocess.run([os.environ["SERVESIM_DECODE_STEPS"], *args], capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})

    def test_prints_one_row_per_step(self):
        done = self.run_it("--batch", "2", "--context", "20", "--seconds", "0.5", "--model", "tiny-15m")
        self.assertEqual(done.returncode, 0, done.stderr)
        # The first step always runs (the time is checked before each), so
        # there is at least one row, whatever the load; compare.py's reader
        # takes the same CSV (it drops WARMUP_STEPS rows first).
        rows = list(csv.DictReader(done.stdout.splitlines()))
        self.assertGreater(len(rows), 0)
        self.assertEqual(list(rows[0]), ["elapsed_s", "step_ms"])
        self.assertTrue(all(float(r["step_ms"]) > 0 for r in rows), rows)
        self.assertEqual(len(compare.read_steps(done.stdout)), max(0, len(rows) - compare.WARMUP_STEPS))

    def test_bad_flags_exit_2_naming_the_flag(self):
        for args, says in [(("--batch", "0"), "--batch"), (("--seconds", "x"), "--seconds"),
                           (("--context", "5000"), "--context"), (("--model", "nope"), "--model"),
                           (("--frobnicate", "1"), "unknown flag")]:
            done = self.run_it(*args)
            self.assertEqual(done.returncode, 2, args)
            self.assertIn(says, done.stderr)
            self.assertEqual(done.stdout, "")


if __name__ == "__main__":
    unittest.main()
