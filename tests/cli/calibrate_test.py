#!/usr/bin/python3
"""`servesim calibrate`'s timing flags end to end: --min-time and
--repetitions reach Google Benchmark (the raw JSON's repetitions, the
profile's settings), the profile says where its wall time went
(settings.phase_seconds), and bad values are refused by name before
anything runs.

Run one case:   calibrate_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: calibrate_test.py --list
"""

import collections
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, close, expect_input_error, run_case_from_argv  # noqa: E402

CASES, case = case_registry()

# The phases a CPU calibration's wall time splits into (calib/calibrate.cpp).
PHASES = {"ceilings", "setup", "gemm_qkv", "gemm_o", "gemm_gate_up", "gemm_down", "elementwise",
          "prefill_attention", "decode_attention", "lm_head", "sampling", "iteration_overhead", "whole_model",
          "whole_model_moments", "whole_model_fits"}


@case
def calibrate_timing_flags(ctx):
    profile = ctx.path("tiny.json")
    p = ctx.ok("calibrate", "--quick", "--model", "tiny-15m", "--threads", "1", "--max-num-batched-tokens", "64",
               "--max-num-seqs", "8", "--max-context", "128", "--min-time", "0.004", "--repetitions", "2",
               "--out", profile)
    with open(profile) as f:
        settings = json.load(f)["metadata"]["settings"]
    check(close(settings["min_time_s"], 0.004, rel=1e-12), f"min_time_s {settings['min_time_s']}")
    check(settings["repetitions"] == 2, f"repetitions {settings['repetitions']}")
    # Every benchmark ran exactly twice, each time for at least about the minimum.
    with open(os.path.join(ctx.path(), "tiny.benchmarks.json")) as f:
        runs = [b for b in json.load(f)["benchmarks"] if b.get("run_type") == "iteration"]
    per_benchmark = collections.Counter(b["run_name"] for b in runs)
    check(len(per_benchmark) == settings["benchmarks"], f"{len(per_benchmark)} benchmarks in the raw JSON")
    check(set(per_benchmark.values()) == {2}, f"repetitions per benchmark: {set(per_benchmark.values())}")
    check(all("min_time:0.004" in name for name in per_benchmark), "a benchmark ran with another min_time")
    # Where the wall time went: every phase, none negative, most of the wall time.
    phases = settings["phase_seconds"]
    check(set(phases) == PHASES, f"phases {sorted(phases)}")
    check(all(s >= 0 for s in phases.values()), "a negative phase")
    total = sum(phases.values())
    check(0.5 * settings["wall_time_s"] <= total <= settings["wall_time_s"],
          f"phases sum to {total:.2f} s of {settings['wall_time_s']:.2f} s")
    check("(longest: " in p.stderr, "the progress does not name the longest phases")
    # Out of range: refused by name, no profile written.
    bad = ctx.path("bad.json")
    for flag, value in (("--min-time", "0"), ("--min-time", "61"), ("--min-time", "-1"), ("--repetitions", "0"),
                        ("--repetitions", "1001"), ("--threads", "-1"), ("--threads", "100000")):
        expect_input_error(ctx, ["calibrate", "--quick", f"{flag}={value}", "--out", bad], [flag, value])
    check(not os.path.exists(bad), "a refused calibration wrote its profile")
    help_text = ctx.ok("calibrate", "--help").stdout
    check("--min-time" in help_text and "--repetitions" in help_text, "calibrate --help lacks the timing flags")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
