"""Unit tests of the CPU validation study's tables:
experiments/validation_cpu/runs_table.py (which kept attempts passed their
run's gate, and how each run is labelled), and of the diagnostics in
experiments/diagnostics/: level_by_kind.py (each kind of iteration with
and without each tracked level), prefill_level_moment.py (the prefill
level read at an iteration's start, over its span, or blended),
light_sample_size.py (how many requests a light point needs),
floor_bands.py (MAPE and targets met by noise floor),
prefill_after_idle.py (prefills by the idle gap before them) and
run_to_run.py (how far two real runs of the same workloads lie apart)."""
import csv
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

EXPERIMENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments")
sys.path.insert(0, os.path.join(EXPERIMENTS, "validation_cpu"))
sys.path.insert(0, os.path.join(EXPERIMENTS, "diagnostics"))
import floor_bands  # noqa: E402
import grid_thinning  # noqa: E402
import level_by_kind  # noqa: E402
import light_sample_size  # noqa: E402
import prefill_after_idle  # noqa: E402
import prefill_level_moment  # noqa: E402
import profile_diff  # noqa: E402
import run_to_run  # noqa: E402
import runs_table  # noqa: E402


def write_csv(path, rows):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)


def probe(t, ratio, level):
    return {"time_s": t, "measured_over_predicted": ratio, "level": level}


def write_tracked(point, tracked, old_keys=False):
    """report_replay.json with the interleave timings `tracked` where validate
    writes them (host_drift.refresh.tracked), or with old_keys where it wrote
    them before --host-drift (in_situ.tracked)."""
    refresh = {"refreshed": True, "tracked": tracked} if tracked is not None else {"refreshed": True}
    report = ({"in_situ": refresh} if old_keys else
              {"host_drift": {"mode": "interleave", "drift_probes": {}, "placement": {}, "refresh": refresh}})
    with open(os.path.join(point, "report_replay.json"), "w") as f:
        json.dump(report, f)


class LevelByKind(unittest.TestCase):
    """One interleave point: prefill timings 1 s apart, the third 1.3x slow;
    the run applied the median over 5 (1.0 everywhere)."""
    old_keys = False

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.point = os.path.join(self.tmp.name, "chunked_light")
        os.makedirs(self.point)
        tracked = {"basis": "refresh", "levelled": ["decode", "prefill and mixed"],
                   "probes": [probe(0.0, 1.0, 1.0), probe(4.0, 1.0, 1.0)],
                   "prefill_probes": [probe(float(t), r, 1.0) for t, r in enumerate([1.0, 1.0, 1.3, 1.0, 1.0])]}
        write_tracked(self.point, tracked, self.old_keys)
        # (kind, start, predicted as the run applied it, measured)
        its = [("prefill", 0.5, 0.100, 0.100), ("decode", 1.0, 0.020, 0.020), ("prefill", 2.0, 0.100, 0.130)]
        write_csv(os.path.join(self.point, "iterations.csv"),
                  [{"index": i, "kind": k, "predicted_s": p, "measured_s": m, "prefill_tokens": 128 if k == "prefill" else 0}
                   for i, (k, _, p, m) in enumerate(its)])
        write_csv(os.path.join(self.point, "measured", "iterations.csv"),
                  [{"index": i, "start_s": s} for i, (_, s, _, _) in enumerate(its)])

    def tearDown(self):
        self.tmp.cleanup()

    def test_the_applied_level_misses_the_slow_prefill(self):
        errors, used = level_by_kind.errors_by_kind([self.point])
        self.assertEqual(used, 1)
        got = errors["prefill"]["prefill level"]
        self.assertAlmostEqual(got[0], 0.0)
        self.assertAlmostEqual(got[1], 0.100 / 0.130 - 1)
        self.assertEqual(errors["decode"]["with"], [0.0])

    def test_unsmoothed_the_slow_timing_sets_the_level_at_its_time(self):
        errors, _ = level_by_kind.errors_by_kind([self.point], prefill_smooth=1)
        got = errors["prefill"]["prefill level"]
        self.assertAlmostEqual(got[0], 0.0)  # between the two timings at 1.0
        self.assertAlmostEqual(got[1], 0.0)  # 0.100 x 1.3 against 0.130
        # a median over 5 reads through it, as the run did
        errors, _ = level_by_kind.errors_by_kind([self.point], prefill_smooth=5)
        self.assertAlmostEqual(errors["prefill"]["prefill level"][1], 0.100 / 0.130 - 1)

    def test_every_other_prefill_timing_misses_the_slow_one(self):
        # Timings 0, 2 and 4 s kept: the slow one (2 s) stays, the level at
        # 0.5 s is interpolated between 1.0 and 1.3.
        errors, _ = level_by_kind.errors_by_kind([self.point], prefill_every=2)
        got = errors["prefill"]["prefill level"]
        self.assertAlmostEqual(got[0], 0.100 * (1.0 + 0.25 * 0.3) / 0.100 - 1)
        self.assertAlmostEqual(got[1], 0.0)
        # Every 4th (0 and 4 s): the slow timing is gone, the level 1.0.
        errors, _ = level_by_kind.errors_by_kind([self.point], prefill_every=4)
        self.assertAlmostEqual(errors["prefill"]["prefill level"][1], 0.100 / 0.130 - 1)

    def test_a_folder_without_interleave_timings_is_skipped(self):
        write_tracked(self.point, None, self.old_keys)
        self.assertEqual(level_by_kind.errors_by_kind([self.point])[1], 0)
        with open(os.path.join(self.point, "report_replay.json"), "w") as f:  # --host-drift off
            json.dump({"host_drift": {"mode": "off", "drift_probes": None, "placement": None, "refresh": None}}, f)
        self.assertEqual(level_by_kind.errors_by_kind([self.point])[1], 0)
        self.assertEqual(prefill_level_moment.iterations_with_levels(self.point), [])

    def test_prefill_level_read_at_start_over_span_and_blended(self):
        records = prefill_level_moment.iterations_with_levels(self.point)
        self.assertEqual([(k, m) for k, _, m, _, _ in records], [("prefill", 0.100), ("prefill", 0.130)])
        _, _, _, bare, levels = records[1]
        self.assertAlmostEqual(bare, 0.100)  # the run applied 1.0
        self.assertAlmostEqual(levels["start"], 1.3)  # the slow timing at 2 s
        # Its predicted span, 0.13 s from 2 s, is on the way back to 1.0 at
        # 3 s: the mean of 1.3 - 0.3 x over the span's 8 sample points.
        self.assertAlmostEqual(levels["span"], 1.3 - 0.3 * 0.13 / 2)
        self.assertAlmostEqual(levels["blend"], 0.7 * 1.3 + 0.3 * 1.0)  # the median over 5 is 1.0
        self.assertEqual(levels["none"], 1.0)
        (kind, bin_, n, mape, slope), = [r for r in prefill_level_moment.table(records) if r[1] == (0, 200)]
        self.assertEqual((kind, n), ("prefill", 2))
        self.assertAlmostEqual(mape["start"], 0.0)
        self.assertAlmostEqual(mape["none"], (1 - 0.100 / 0.130) / 2)
        # log(measured / bare) against log(level): (0, 0) and (log 1.3, log 1.3).
        self.assertAlmostEqual(slope, 1.0)
        # A folder without prefill timings gives nothing.
        write_tracked(self.point, {"basis": "refresh", "probes": []}, self.old_keys)
        self.assertEqual(prefill_level_moment.iterations_with_levels(self.point), [])


class LevelByKindFromBeforeHostDrift(LevelByKind):
    """The same, from reports written before --host-drift (in_situ.tracked)."""
    old_keys = True


class RunsTableCommandLine(unittest.TestCase):
    def test_help_and_a_folder_without_a_study(self):
        script = os.path.join(os.path.dirname(runs_table.__file__), "runs_table.py")
        done = subprocess.run([sys.executable, script, "--help"], capture_output=True, text=True)
        self.assertEqual(done.returncode, 0)
        self.assertIn("Usage:", done.stdout)
        with tempfile.TemporaryDirectory() as tmp:
            done = subprocess.run([sys.executable, script, tmp], capture_output=True, text=True)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("not a study folder (no summary.csv)", done.stderr)


class RunsTableGate(unittest.TestCase):
    def row(self, score, floor):
        return {"gate_score": score, "iteration_mape_floor": floor}

    def test_the_label_names_host_drift_and_the_timing_intervals(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "metadata.json"), "w") as f:
                json.dump({"command": "run.py --host-drift interleave --validate-args --interleave-interval 0.05",
                           "commit": "abc1234", "max_drift": 0.0, "max_floor": 0.045}, f)
            write_csv(os.path.join(tmp, "summary.csv"), [{"scheduler": "chunked", "mode": "replay"}])
            label = runs_table.load(tmp)[0]
        self.assertEqual(label, "abc1234, host-drift interleave every 0.05 s, floor gate 0.045")

    def test_a_run_from_before_host_drift_keeps_its_flags_in_the_label(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "metadata.json"), "w") as f:
                json.dump({"command": "run.py --in-situ interleave --validate-args --interleave-interval 0.05 "
                                      "--interleave-prefill-interval 0.25", "commit": "abc1234"}, f)
            write_csv(os.path.join(tmp, "summary.csv"), [{"scheduler": "chunked", "mode": "replay"}])
            label = runs_table.load(tmp)[0]
        self.assertIn("in-situ interleave every 0.05 s, prefill timings every 0.25 s", label)

    def test_each_bound_above_zero_gates(self):
        floor_only = {"max_drift": 0.0, "max_floor": 0.05}
        self.assertTrue(runs_table.passed(self.row(0.3, 0.04), floor_only))
        self.assertFalse(runs_table.passed(self.row(0.0, 0.06), floor_only))
        self.assertFalse(runs_table.passed(self.row(0.0, "nan"), floor_only))
        both = {"max_drift": 0.05, "max_floor": 0.05}
        self.assertFalse(runs_table.passed(self.row(0.3, 0.04), both))
        self.assertTrue(runs_table.passed(self.row(0.05, 0.05), both))
        drift_only = {"max_drift": 0.05, "max_floor": 0.0}
        self.assertTrue(runs_table.passed(self.row(0.01, 0.09), drift_only))

    def test_the_label_names_a_floor_gate(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "metadata.json"), "w") as f:
                json.dump({"command": "run.py --max-floor 0.05 --in-situ interleave", "commit": "abc1234",
                           "max_drift": 0.0, "max_floor": 0.05, "predict_draws": 51}, f)
            write_csv(os.path.join(tmp, "summary.csv"), [{"scheduler": "chunked", "mode": "replay"}])
            label, rows, gate = runs_table.load(tmp)
        self.assertIn("floor gate 0.05", label)
        self.assertNotIn("prefill timings", label)
        self.assertNotIn("rounds", label)
        self.assertEqual(gate, {"max_drift": 0.0, "max_floor": 0.05})
        self.assertEqual(len(rows), 1)


    def test_the_label_names_attempts_in_rounds(self):
        with tempfile.TemporaryDirectory() as tmp:
            with open(os.path.join(tmp, "metadata.json"), "w") as f:
                json.dump({"command": "run.py --max-floor 0.05 --spread --attempts 4", "commit": "abc1234",
                           "max_drift": 0.0, "max_floor": 0.05, "attempts": 4, "spread": True}, f)
            write_csv(os.path.join(tmp, "summary.csv"), [{"scheduler": "chunked", "mode": "replay"}])
            label = runs_table.load(tmp)[0]
        self.assertIn("floor gate 0.05, 4 attempts in rounds", label)


def write_light_point(folder, requests):
    """A light point's requests.csv: (prompt tokens, measured TTFT, replayed
    TTFT, predicted TTFT)."""
    write_csv(os.path.join(folder, "requests.csv"),
              [{"id": i, "prompt_tokens": t, "measured_ttft_s": m, "replay_ttft_s": r, "predict_ttft_s": p}
               for i, (t, m, r, p) in enumerate(requests)])


class LightSampleSize(unittest.TestCase):
    def test_pools_split_the_scatter_from_the_level(self):
        # Replayed TTFT 0.01 s + 0.001 s/token. Point a runs at its
        # prediction but for one request at 1.2x; point b runs 1.1x with one
        # request 1.21x (1.1 over its point's median).
        a = [(t, 0.01 + 0.001 * t, 0.01 + 0.001 * t, 0) for t in (10, 20, 30)] + [(40, 1.2 * 0.05, 0.05, 0)]
        b = [(t, 1.1 * (0.01 + 0.001 * t), 0.01 + 0.001 * t, 0) for t in (10, 20, 30)] + [(40, 1.21 * 0.05, 0.05, 0)]
        noise, bias, (intercept, per_token) = light_sample_size.pools([a, b])
        self.assertEqual(sorted(round(x, 6) for x in bias), [1.0, 1.1])
        # The median of 4 ratios is between the 2nd and 3rd: 1.0 in a (1, 1, 1, 1.2), 1.1 in b.
        self.assertEqual(sorted(round(x, 6) for x in noise), [1.0] * 6 + [1.1, 1.2])
        self.assertAlmostEqual(intercept, 0.01)
        self.assertAlmostEqual(per_token, 0.001)

    def test_observed_counts_errors_outside_the_target_by_size(self):
        # Four requests of 0.1 s; replay exact, predict 1.2x at the longest:
        # its P50 0.1 s (0%), its P90 0.1 + 0.7 x 0.02 s (+14%).
        four = [(t, 0.1, 0.1, 0.12 if t > 30 else 0.1) for t in (10, 20, 30, 40)]
        eight = [(t, 0.1, 0.1, 0.1) for t in range(8)]
        seen = light_sample_size.observed([four, four, eight])
        self.assertEqual(seen, {4: (2, 8, 2), 8: (1, 4, 0)})

    def test_no_scatter_no_misses_and_more_requests_fewer(self):
        rng = light_sample_size.np.random.default_rng(3)
        line = (0.03, 0.001)
        exact = light_sample_size.misses(light_sample_size.np.array([1.0]), None, line, 16, 500, (16, 256), rng)
        self.assertEqual(exact, {"p50": (0.0, 0.0), "p90": (0.0, 0.0)})
        # A third of the requests run 0.8x and a third 1.2x: the P50 and P90
        # of few requests move with which requests they hit, of many hardly.
        noise = light_sample_size.np.array([0.8, 1.0, 1.2])
        few = light_sample_size.misses(noise, None, line, 8, 4000, (16, 256), rng)
        many = light_sample_size.misses(noise, None, line, 512, 4000, (16, 256), rng)
        for q in ("p50", "p90"):
            self.assertGreater(few[q][0], 0.2)
            self.assertLess(many[q][0], 0.02)
            self.assertGreater(few[q][1], 2 * many[q][1])
        # A level of 1.5 on every point misses every time.
        biased = light_sample_size.misses(light_sample_size.np.array([1.0]), light_sample_size.np.array([1.5]),
                                          line, 16, 100, (16, 256), rng)
        self.assertEqual(biased["p50"][0], 1.0)

    def test_command_line(self):
        script = os.path.join(os.path.dirname(light_sample_size.__file__), "light_sample_size.py")
        with tempfile.TemporaryDirectory() as tmp:
            for k, slow in enumerate((1.0, 1.3)):
                write_light_point(os.path.join(tmp, f"p{k}"),
                                  [(t, (slow if t % 3 == 0 else 1.0) * (0.02 + 0.001 * t), 0.02 + 0.001 * t,
                                    0.02 + 0.001 * t) for t in range(16, 256, 15)])
            points = [os.path.join(tmp, "p0"), os.path.join(tmp, "p1")]
            os.makedirs(os.path.join(tmp, "empty"))
            with open(os.path.join(tmp, "empty", "requests.csv"), "w") as f:
                f.write("id,prompt_tokens,measured_ttft_s,replay_ttft_s,predict_ttft_s\n")
            done = subprocess.run([sys.executable, script, "--draws", "200", "--sizes", "8,32", "--json"] + points,
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            report = json.loads(done.stdout)
            self.assertEqual((report["points"], report["requests"]), (2, 32))
            self.assertEqual([s["requests"] for s in report["sizes"]], [8, 32])
            self.assertEqual([(o["requests"], o["points"], o["errors"]) for o in report["observed"]], [(16, 2, 8)])
            done = subprocess.run([sys.executable, script, "--draws", "200"] + points, capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("P90, + bias", done.stdout)
            self.assertIn("2 points:", done.stdout)
            for bad, says in ((["--sizes", "1"], "--sizes"), (["--prompt-len", "9"], "--prompt-len"),
                              ([os.path.join(tmp, "none")], "none: no requests.csv"),
                              ([os.path.join(tmp, "empty")], "requests.csv: no requests")):
                done = subprocess.run([sys.executable, script] + bad + points[:1], capture_output=True, text=True)
                self.assertNotEqual(done.returncode, 0)
                self.assertIn(says, done.stderr)


def write_reports(point, floor, mape, errors):
    """A validate folder's two reports: replay with the floor and MAPE, and
    eight rel_errors in the order floor_bands reads them (replay then
    predict; TTFT then TPOT; P50 then P90)."""
    os.makedirs(point, exist_ok=True)
    for k, mode in enumerate(("replay", "predict")):
        e = errors[4 * k:4 * k + 4]
        report = {"iteration_mape": {"all": mape, "floor": floor},
                  "ttft_s": {"rel_error": {"p50": e[0], "p90": e[1]}},
                  "tpot_s": {"rel_error": {"p50": e[2], "p90": e[3]}}}
        with open(os.path.join(point, f"report_{mode}.json"), "w") as f:
            json.dump(report, f)


class FloorBands(unittest.TestCase):
    def test_bands_count_misses_by_floor(self):
        fine = [0.01] * 8
        points = [(0.030, 0.032, fine),                      # low band: every target
                  (0.035, 0.045, fine[:7] + [-0.15]),         # low band: one error outside
                  (0.047, 0.051, fine),                       # high band: MAPE over 5%
                  (0.048, 0.049, fine),                       # high band: every target
                  (0.060, 0.070, [0.2] * 8)]                  # above the last edge
        rows = floor_bands.bands(points, [0.04, 0.05])
        self.assertEqual([(r["floor_from"], r["floor_to"], r["points"]) for r in rows],
                         [(0.0, 0.04, 2), (0.04, 0.05, 2), (0.05, None, 1)])
        low, high, top = rows
        self.assertAlmostEqual(low["excess_median"], (0.002 + 0.010) / 2)
        self.assertAlmostEqual(low["excess_max"], 0.010)
        self.assertEqual((low["mape_misses"], low["errors_outside"], low["errors"], low["every_target"]),
                         (0, 1, 16, 1))
        self.assertEqual((high["mape_misses"], high["errors_outside"], high["every_target"]), (1, 0, 1))
        self.assertEqual((top["mape_misses"], top["errors_outside"], top["every_target"]), (1, 8, 0))

    def test_read_point_and_command_line(self):
        script = os.path.join(os.path.dirname(floor_bands.__file__), "floor_bands.py")
        with tempfile.TemporaryDirectory() as tmp:
            write_reports(os.path.join(tmp, "a"), 0.03, 0.034, [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, -0.12])
            write_reports(os.path.join(tmp, "b"), 0.049, 0.052, [0.0] * 8)
            write_reports(os.path.join(tmp, "old"), None, 0.04, [0.0] * 8)
            self.assertEqual(floor_bands.read_point(os.path.join(tmp, "a")),
                             (0.03, 0.034, [0.01, 0.02, 0.03, 0.04, 0.05, 0.06, 0.07, -0.12]))
            self.assertIsNone(floor_bands.read_point(os.path.join(tmp, "old")))
            points = [os.path.join(tmp, p) for p in ("a", "b", "old")]
            done = subprocess.run([sys.executable, script, "--json", "--bands", "0.045"] + points,
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            report = json.loads(done.stdout)
            self.assertEqual((report["points"], report["without_floor"]), (2, 1))
            self.assertEqual([(r["points"], r["errors_outside"], r["mape_misses"]) for r in report["bands"]],
                             [(1, 1, 0), (1, 0, 1)])
            done = subprocess.run([sys.executable, script] + points, capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("every target", done.stdout)
            self.assertIn("1 without", done.stdout)
            with open(os.path.join(tmp, "broken.json"), "w") as f:
                f.write("{")
            os.makedirs(os.path.join(tmp, "bad"))
            os.rename(os.path.join(tmp, "broken.json"), os.path.join(tmp, "bad", "report_replay.json"))
            os.makedirs(os.path.join(tmp, "odd"))
            for mode in ("replay", "predict"):
                with open(os.path.join(tmp, "odd", f"report_{mode}.json"), "w") as f:
                    json.dump({"iteration_mape": [0.04]}, f)
            for bad, says in ((["--bands", "0.05,0.04"], "--bands"), (["--bands", "x"], "--bands"),
                              ([os.path.join(tmp, "odd")], "odd: a report without iteration_mape.all"),
                              ([os.path.join(tmp, "none")], "none: no report_replay.json"),
                              ([os.path.join(tmp, "bad")], "report_replay.json: not JSON"),
                              ([os.path.join(tmp, "old")], "none of the folders")):
                done = subprocess.run([sys.executable, script] + bad + (points[:1] if bad[0] == "--bands" else []),
                                      capture_output=True, text=True)
                self.assertNotEqual(done.returncode, 0, bad)
                self.assertIn(says, done.stderr)


def write_iterations(point, iterations):
    """A validate folder's iterations.csv and measured/iterations.csv from
    (kind, start s, measured s, replayed s)."""
    write_csv(os.path.join(point, "iterations.csv"),
              [{"index": i, "kind": k, "measured_s": m, "predicted_s": p} for i, (k, _, m, p) in enumerate(iterations)])
    write_csv(os.path.join(point, "measured", "iterations.csv"),
              [{"index": i, "kind": k, "start_s": t, "duration_s": m} for i, (k, t, m, _) in enumerate(iterations)])


class PrefillAfterIdle(unittest.TestCase):
    # A first prefill (not counted: nothing before it), a decode, a prefill
    # straight after it at 1.0x, an idle second, then a prefill at 1.2x, a
    # decode and one more after 0.3 s idle at 1.1x.
    ITERATIONS = [("prefill", 0.0, 0.10, 0.10), ("decode", 0.10, 0.02, 0.02), ("prefill", 0.12, 0.10, 0.10),
                  ("prefill", 1.22, 0.12, 0.10), ("decode", 1.34, 0.02, 0.02), ("prefill", 1.66, 0.11, 0.10)]

    def test_prefills_grouped_by_the_gap_before_them(self):
        with tempfile.TemporaryDirectory() as tmp:
            write_iterations(tmp, self.ITERATIONS)
            prefills = prefill_after_idle.read_point(tmp)
            self.assertEqual(len(prefills), 3)
            for (gap, ratio), (want_gap, want_ratio) in zip(prefills, [(0.0, 1.0), (1.0, 1.2), (0.3, 1.1)]):
                self.assertAlmostEqual(gap, want_gap)
                self.assertAlmostEqual(ratio, want_ratio)
            rows = prefill_after_idle.bands(prefills, [0.001, 0.5])
            self.assertEqual([(r["gap_from_s"], r["gap_to_s"], r["prefills"]) for r in rows],
                             [(0.0, 0.001, 1), (0.001, 0.5, 1), (0.5, None, 1)])
            self.assertAlmostEqual(rows[2]["median"], 1.2)

    def test_command_line(self):
        script = os.path.join(os.path.dirname(prefill_after_idle.__file__), "prefill_after_idle.py")
        with tempfile.TemporaryDirectory() as tmp:
            point = os.path.join(tmp, "p")
            write_iterations(point, self.ITERATIONS)
            done = subprocess.run([sys.executable, script, "--json", "--gaps", "0.2"] + [point],
                                  capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            report = json.loads(done.stdout)
            self.assertEqual(report["prefills"], 3)
            self.assertEqual([r["prefills"] for r in report["bands"]], [1, 2])
            self.assertAlmostEqual(report["bands"][1]["median"], 1.15)
            done = subprocess.run([sys.executable, script, point], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("gap before", done.stdout)
            decodes = os.path.join(tmp, "decodes")
            write_iterations(decodes, [("decode", 0.0, 0.02, 0.02)])
            short = os.path.join(tmp, "short")
            write_iterations(short, self.ITERATIONS)
            write_csv(os.path.join(short, "iterations.csv"), [{"index": 0, "kind": "decode", "measured_s": 0.02,
                                                               "predicted_s": 0.02}])
            for bad, says in ((["--gaps", "0.5,0.1", point], "--gaps"),
                              ([os.path.join(tmp, "none")], "none: no iterations.csv"),
                              ([short], "iterations.csv has 1 iterations, measured/iterations.csv 6"),
                              ([decodes], "no prefill-only iterations")):
                done = subprocess.run([sys.executable, script] + bad, capture_output=True, text=True)
                self.assertNotEqual(done.returncode, 0, bad)
                self.assertIn(says, done.stderr)



def write_suite(folder, rates, measured, style):
    """A held-out suite folder as run.py ('run') or compare_profiles.py ('compare') writes it."""
    os.makedirs(folder, exist_ok=True)
    names = sorted(rates)
    with open(os.path.join(folder, "workloads.jsonl"), "w") as f:
        for n in names:
            f.write(json.dumps({"name": n}) + "\n")
    write_csv(os.path.join(folder, "summary.csv"), [{"workload": n, "rate": rates[n]} for n in names])
    if style == "compare":
        with open(os.path.join(folder, "metadata.json"), "w") as f:
            json.dump({"profiles": {"full": "p.json", "quick": "q.json"}}, f)
    for n in names:
        report = {m: {"measured": {s: measured[n] * (2 if m == "ttft_s" else 1) * (1.5 if s == "p90" else 1)
                                   for s in ("p50", "p90")}} for m in ("ttft_s", "tpot_s")}
        path = os.path.join(folder, n, "report_predict.json") if style == "run" else \
            os.path.join(folder, n, "full", "report.json")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            json.dump(report, f)


class RunToRun(unittest.TestCase):
    def test_spread_of_the_same_workloads_in_two_suites(self):
        with tempfile.TemporaryDirectory() as tmp:
            a, b = os.path.join(tmp, "a"), os.path.join(tmp, "b")
            write_suite(a, {"w0": "1.5", "w1": ""}, {"w0": 0.10, "w1": 0.02}, "run")
            write_suite(b, {"w0": "1.5", "w1": ""}, {"w0": 0.12, "w1": 0.021}, "compare")
            rows = run_to_run.spreads([run_to_run.measured_of(a), run_to_run.measured_of(b)])
            self.assertEqual(len(rows), 8)
            by = {(r["workload"], r["metric"], r["stat"]): r for r in rows}
            self.assertAlmostEqual(by[("w0", "tpot_s", "p50")]["spread"], 0.2)
            self.assertAlmostEqual(by[("w1", "ttft_s", "p90")]["spread"], 0.05)
            self.assertEqual(by[("w0", "ttft_s", "p90")]["measured_s"], [0.30000000000000004, 0.36])
            script = os.path.join(EXPERIMENTS, "diagnostics", "run_to_run.py")
            done = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("4 of 8 latencies spread more than 10% between the runs, at 1 of 2 workloads", done.stdout)
            # Another arrival rate is another workload: refused by name.
            c = os.path.join(tmp, "c")
            write_suite(c, {"w0": "1.2", "w1": ""}, {"w0": 0.1, "w1": 0.02}, "run")
            done = subprocess.run([sys.executable, script, a, c], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("w0:", done.stderr)
            self.assertIn("not the same workload", done.stderr)
            done = subprocess.run([sys.executable, script, a], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("two or more", done.stderr)


def tiny_profile(scale=1.0, decode_factor=1.0):
    """A hand-made CPU profile of 2 layers: every time `scale` times a base, g(B) = decode_factor."""
    one_d = {"x": [1, 2, 4], "seconds": [scale * 1e-4, scale * 2e-4, scale * 4e-4]}
    tables = {name: dict(one_d) for name in profile_diff.ONE_D}
    tables["prefill_attention"] = {"x": [1, 16], "y": [1, 16], "seconds": [[scale * 1e-5, scale * 2e-5],
                                                                          [scale * 4e-5, scale * 8e-5]]}
    tables["decode_attention"] = {"x": [1, 4], "y": [16, 128], "seconds": [[scale * 1e-5, scale * 3e-5],
                                                                          [scale * 2e-5, scale * 6e-5]]}
    tables["decode_in_situ"] = {"x": [1, 4], "factor": [decode_factor, decode_factor]}
    tables["gemm_in_situ"] = {"x": [16], "factor": [1.0]}
    return {"model": {"num_hidden_layers": 2}, "tables": tables,
            "metadata": {"settings": {"mode": "full", "threads": 1, "min_time_s": 0.03, "repetitions": 5,
                                      "wall_time_s": 1.0}}}


class ProfileDiff(unittest.TestCase):
    def test_every_table_and_iteration_moves_by_the_scale(self):
        tables, iterations = profile_diff.compare(tiny_profile(), tiny_profile(scale=1.1))
        self.assertEqual(len(tables), 9)
        for row in tables:
            self.assertAlmostEqual(row["median_signed"], 0.1, msg=row["table"])
            self.assertAlmostEqual(row["p90_abs"], 0.1, msg=row["table"])
        self.assertEqual(len(iterations), len(profile_diff.DECODE_BATCHES) + len(profile_diff.PREFILL_TOKENS))
        for it in iterations:
            self.assertAlmostEqual(it["ratio"], 1.1, msg=it["iteration"])

    def test_the_decode_step_factor_moves_decode_steps_only(self):
        _, iterations = profile_diff.compare(tiny_profile(), tiny_profile(decode_factor=2.0))
        for it in iterations:
            self.assertAlmostEqual(it["ratio"], 2.0 if it["iteration"].startswith("decode") else 1.0,
                                   msg=it["iteration"])

    def test_a_decode_step_sums_the_layers_the_head_and_the_attention(self):
        # B = 2, context 128: 2 layers x (5 x 2e-4 + attention between b 1 and 4 at y 128) + 2 x 2e-4.
        attention = math.exp(0.5 * math.log(3e-5) + 0.5 * math.log(6e-5))
        self.assertAlmostEqual(profile_diff.decode_step(tiny_profile(), 2), 2 * (5 * 2e-4 + attention) + 2 * 2e-4)

    def test_command_line(self):
        script = os.path.join(EXPERIMENTS, "diagnostics", "profile_diff.py")
        with tempfile.TemporaryDirectory() as tmp:
            a, b, bad = (os.path.join(tmp, n) for n in ("a.json", "b.json", "bad.json"))
            for path, p in ((a, tiny_profile()), (b, tiny_profile(scale=0.9)), (bad, {"tables": {}})):
                with open(path, "w") as f:
                    json.dump(p, f)
            done = subprocess.run([sys.executable, script, a, b], capture_output=True, text=True)
            self.assertEqual(done.returncode, 0, done.stderr)
            self.assertIn("gemm_qkv", done.stdout)
            self.assertIn("-10.0%", done.stdout)
            self.assertIn("decode B=1 0.900", done.stdout)
            done = subprocess.run([sys.executable, script, a, bad], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("bad.json", done.stderr)
            done = subprocess.run([sys.executable, script, a], capture_output=True, text=True)
            self.assertNotEqual(done.returncode, 0)
            self.assertIn("at least two", done.stderr)


class GridThinningDecodeSteps(unittest.TestCase):
    def test_an_lm_head_point_off_the_sampling_axis_counts(self):
        # The LM head at S = 3 costs twice its interpolation; sampling is not
        # timed at 3. Thinning the LM head to 1, 2, 4 moves the 3-sequence step.
        p = tiny_profile()
        for name in grid_thinning.TABLES:
            p["tables"][name] = {"x": [1, 2, 4], "seconds": [1e-4, 2e-4, 4e-4]}
        for name in ("gemm_qkv", "lm_head"):
            p["tables"][name] = {"x": [1, 2, 3, 4], "seconds": [1e-4, 2e-4, 3e-4, 4e-4]}
        p["tables"]["lm_head"]["seconds"][2] = 2 * math.sqrt(2e-4 * 4e-4)
        thinned = {name: (p["tables"][name]["x"], p["tables"][name]["seconds"]) for name in grid_thinning.TABLES}
        thinned["lm_head"] = ([1, 2, 4], [1e-4, 2e-4, 4e-4])
        change, at = grid_thinning.iteration_effect(p, thinned)["decode step"]
        self.assertEqual(at, "T = 3, S = 3")
        self.assertLess(change, -0.05)


if __name__ == "__main__":
    unittest.main()
