#!/usr/bin/python3
"""`servesim sweep --shard I/N` + `sweep merge`, and `capacity --search
--shard I/N` + `capacity merge`: the merged outputs equal one machine's byte
for byte for several N; bad shards and mixed sweeps are refused by name.

Run one case:   shard_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: shard_test.py --list
"""

import filecmp
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, run_case_from_argv  # noqa: E402

CASES, case = case_registry()


SWEEP = ["--grid", "rate=2,4,8", "--grid", "max-num-seqs=8,64", "--", "--num-requests", "40"]
SEARCH = ["--search", "--num-requests", "100", "--slo-ttft", "1s", "--slo-tpot", "50ms", "--seeds", "1",
          "--tolerance", "0.05", "--search-tensor-parallel-size", "1,2", "--search-quantization", "none,fp8"]


def same(a, b, names):
    for n in names:
        check(filecmp.cmp(os.path.join(a, n), os.path.join(b, n), shallow=False), f"{n}: {a} and {b} differ")


@case
def sweep_shards_merge_identical(ctx):
    full = ctx.path("full")
    ctx.ok("sweep", "--out", full, "-q", *SWEEP)
    for n in (1, 2, 4, 6):
        dirs = [ctx.path(f"n{n}_s{i}") for i in range(n)]
        for i, d in enumerate(dirs):
            ctx.ok("sweep", "--shard", f"{i}/{n}", "--out", d, "-q", *SWEEP)
        merged = ctx.path(f"n{n}_merged")
        ctx.ok("sweep", "merge", "--out", merged, *reversed(dirs))
        same(full, merged, ["sweep.csv", "sweep.json"])
    expect_input_error(ctx, ["sweep", "--shard", "3/2", *SWEEP], ["--shard '3/2'", "0 <= I < N"])
    expect_input_error(ctx, ["sweep", "--shard", "-1/2", *SWEEP], ["--shard '-1/2'"])
    expect_input_error(ctx, ["sweep", "--shard", "7/8", *SWEEP], ["only 6 points"])
    expect_input_error(ctx, ["sweep", "--shard", "0/2", "--keep-points", *SWEEP], ["--keep-points with --shard"])
    # Missing, doubled and foreign shards.
    expect_input_error(ctx, ["sweep", "merge", ctx.path("n2_s0")], ["shard 1/2 is missing"])
    expect_input_error(ctx, ["sweep", "merge", ctx.path("n2_s0"), ctx.path("n2_s0"), ctx.path("n2_s1")],
                       ["shard 0/2 is given twice"])
    other = ctx.path("other")
    ctx.ok("sweep", "--shard", "1/2", "--out", other, "-q", "--grid", "rate=2,4", "--", "--num-requests", "40")
    expect_input_error(ctx, ["sweep", "merge", ctx.path("n2_s0"), other], ["a shard of another sweep", "grid"])
    expect_input_error(ctx, ["sweep", "merge", ctx.path("n4_s0"), ctx.path("n2_s1")], ["count"])
    expect_input_error(ctx, ["sweep", "merge", full], ["not the sweep.json of a shard"])
    expect_input_error(ctx, ["sweep", "merge", ctx.path("nonesuch")], ["cannot read"])


@case
def capacity_shards_merge_identical(ctx):
    full = ctx.path("full")
    ctx.ok("capacity", "--out", full, "-q", *SEARCH)
    for n in (2, 3):
        dirs = [ctx.path(f"n{n}_s{i}") for i in range(n)]
        for i, d in enumerate(dirs):
            ctx.ok("capacity", "--shard", f"{i}/{n}", "--jobs", "1", "--out", d, "-q", *SEARCH)
        merged = ctx.path(f"n{n}_merged")
        ctx.ok("capacity", "merge", "--out", merged, *dirs)
        same(full, merged, ["search.csv", "capacity.json"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--shard", "0/2"], ["--shard applies with --search"])
    other = ctx.path("other")
    ctx.ok("capacity", "--shard", "1/2", "--out", other, "-q", *SEARCH[:-2], "--search-quantization", "none")
    expect_input_error(ctx, ["capacity", "merge", ctx.path("n2_s0"), other], ["a shard of another search"])
    expect_input_error(ctx, ["capacity", "merge", ctx.path("n3_s0"), ctx.path("n3_s1")], ["shard 2/3 is missing"])


if __name__ == "__main__":
    run_case_from_argv(CASES, __doc__)
