#!/usr/bin/python3
"""End-to-end tests of `servesim sweep`: the grid, the CSV against direct
`servesim simulate` runs, determinism across --jobs, ranking, constraints,
failed points and bad input.

Run one case:   sweep_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: sweep_test.py --list
Expectations come from the flags and from direct `simulate --json` runs of
the same points, never from earlier output of sweep itself.
"""

import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, read_csv, run_case_from_argv  # noqa: E402

# Small, fast points: 40 requests of the default model on the h200 roofline.
BASE = ["--num-requests", "40"]

# sweep.csv column -> path in summary.json, written out here independently of
# the C++ table so a wrong or missing mapping is caught.
METRICS = {
    "requests_submitted": ("requests", "submitted"),
    "requests_completed": ("requests", "completed"),
    "requests_rejected": ("requests", "rejected"),
    "output_tokens": ("tokens", "output"),
    "duration_s": ("duration_s",),
    "requests_per_s": ("throughput", "requests_per_s"),
    "output_tokens_per_s": ("throughput", "output_tokens_per_s"),
    "goodput_requests_per_s": ("goodput_requests_per_s",),
    "slo_requests_met": ("slo", "requests_met"),
    "preemptions": ("preemptions",),
    "iterations": ("iterations",),
    "mean_batch_sequences": ("mean_batch", "sequences"),
    "mean_batch_tokens": ("mean_batch", "tokens"),
    "kv_peak_utilization": ("kv_cache", "peak_utilization"),
    "speculative_mean_accepted_tokens_per_step": ("speculative", "mean_accepted_tokens_per_step"),
    "speculative_draft_acceptance_rate": ("speculative", "draft_acceptance_rate"),
}
for _m, _s in itertools.product(["ttft", "tpot", "itl", "e2e", "queueing"],
                                ["mean", "p50", "p90", "p95", "p99"]):
    METRICS[f"{_m}_{_s}_s"] = (f"{_m}_s", _s)


def lookup(summary, path):
    for key in path:
        if not isinstance(summary, dict) or key not in summary:
            return None
        summary = summary[key]
    return summary


def sweep(ctx, out, grid, base=BASE, *flags):
    """Runs a sweep; returns (process, sweep.csv rows, sweep.json)."""
    args = ["sweep", "--quiet", "--out", out]
    for axis in grid:
        args += ["--grid", axis]
    p = ctx.ok(*args, *flags, "--", *base)
    rows = read_csv(os.path.join(out, "sweep.csv"))
    with open(os.path.join(out, "sweep.json")) as f:
        report = json.load(f)
    return p, rows, report


def label(row, axes):
    return " ".join(f"{a}={row[a]}" for a in axes)


def expected_ranks(rows, column, maximize):
    """Ranks of the feasible (status ok) rows: by the column, ties by grid order."""
    ok = [i for i, r in enumerate(rows) if r["status"] == "ok"]
    ok.sort(key=lambda i: ((-1 if maximize else 1) * float(rows[i][column]), i))
    return {i: rank + 1 for rank, i in enumerate(ok)}


# ---------------------------------------------------------------- cases

CASES, case = case_registry()


@case
def sweep_help(ctx):
    p = ctx.ok("sweep", "--help")
    for text in ["--grid", "--jobs", "--objective", "--constraint", "--out", "--json",
                 "--keep-points", "max-throughput", "max-goodput", "min-tpot-p50", "sweep.csv",
                 "sweep.json", "servesim sweep --grid"]:
        check(text in p.stdout, f"sweep --help does not mention {text}")
    check("sweep" in ctx.ok("--help").stdout, "servesim --help does not list sweep")


@case
def sweep_grid_matches_simulate(ctx):
    # Two axes: every combination once, in grid order (first axis outermost),
    # and every metric equal to a direct `simulate --json` of the same point.
    rates, seqs = ["2", "8"], ["1", "4", "16"]
    out = ctx.path("sweep")
    _, rows, report = sweep(ctx, out, [f"rate={','.join(rates)}", f"max-num-seqs={','.join(seqs)}"],
                            BASE + ["--slo-ttft", "200ms"])
    expected = list(itertools.product(rates, seqs))
    got = [(r["rate"], r["max-num-seqs"]) for r in rows]
    check(got == expected, f"rows {got} != grid order {expected}")
    header = list(rows[0].keys())
    check(header[:3] == ["rate", "max-num-seqs", "status"], f"header starts {header[:3]}")
    for column in METRICS:
        check(column in header, f"sweep.csv lacks column {column}")
    check(len(report["points"]) == len(expected), "sweep.json point count")
    compared = 0
    for row, point, (rate, seq) in zip(rows, report["points"], expected):
        check(row["status"] == "ok", f"point {rate},{seq}: status {row['status']}")
        direct = json.loads(ctx.simulate("--json", *BASE, "--slo-ttft", "200ms", "--rate", rate,
                                         "--max-num-seqs", seq).stdout)
        check(point["summary"] == direct,
              f"sweep.json summary of rate={rate} max-num-seqs={seq} differs from simulate --json")
        check(point["values"] == {"rate": rate, "max-num-seqs": seq}, f"values {point['values']}")
        for column, path in METRICS.items():
            want = lookup(direct, path)
            if want is None:
                check(row[column] == "", f"{column}: {row[column]!r} where summary.json has none")
                continue
            check(row[column] != "" and float(row[column]) == float(want),
                  f"rate={rate} max-num-seqs={seq}: {column} {row[column]!r} != summary {want!r}")
            compared += 1
    # Every column but the speculative ones (no speculation here) has a number;
    # goodput is among them: the base flags give an SLO.
    plain = [c for c in METRICS if not c.startswith("speculative_")]
    check(compared >= len(expected) * len(plain), f"only {compared} cells compared")
    check(len({r["ttft_p90_s"] for r in rows}) > 1, "every point has the same TTFT: grid not applied")


@case
def sweep_jobs_deterministic(ctx):
    grid = ["max-num-seqs=1,2,4,8,16", "rate=4,16"]
    outputs = {}
    for name, jobs in [("j1", "1"), ("j2", "2"), ("j3", "3"), ("j2b", "2")]:
        out = ctx.path(name)
        sweep(ctx, out, grid, BASE, "--jobs", jobs)
        outputs[name] = {}
        for f in ["sweep.csv", "sweep.json"]:
            with open(os.path.join(out, f), "rb") as fh:
                # sweep.json names no folder, so outputs of different --out compare.
                outputs[name][f] = fh.read()
    for name in ["j2", "j3", "j2b"]:
        for f in ["sweep.csv", "sweep.json"]:
            check(outputs[name][f] == outputs["j1"][f], f"{f} with {name} differs from --jobs 1")


@case
def sweep_objective_ranking(ctx):
    axes = ["rate", "max-num-seqs"]
    grid = ["rate=2,8", "max-num-seqs=2,4,16"]
    base = BASE + ["--slo-ttft", "100ms"]
    for objective, column, maximize in [("max-throughput", "output_tokens_per_s", True),
                                        ("max-goodput", "goodput_requests_per_s", True),
                                        ("min-tpot-p90", "tpot_p90_s", False),
                                        ("min-ttft-p50", "ttft_p50_s", False),
                                        ("min:queueing_p99_s", "queueing_p99_s", False)]:
        out = ctx.path(objective.replace(":", "_"))
        p, rows, report = sweep(ctx, out, grid, base, "--objective", objective)
        values = [float(r[column]) for r in rows]
        check(len(set(values)) > 2, f"{objective}: {column} hardly varies ({values}): vacuous")
        ranks = expected_ranks(rows, column, maximize)
        for i, r in enumerate(rows):
            check(r["rank"] == str(ranks[i]),
                  f"{objective}: {label(r, axes)} rank {r['rank']!r} != {ranks[i]}")
        best = min(ranks, key=ranks.get)
        best_line = [ln for ln in p.stdout.splitlines() if ln.startswith("best:")]
        check(len(best_line) == 1 and f"best: {label(rows[best], axes)} ->" in best_line[0],
              f"{objective}: stdout does not name {label(rows[best], axes)} best: {best_line}")
        check(report["best"] == best and report["ranking"][0] == best,
              f"{objective}: sweep.json best {report['best']} != {best}")
        check(report["objective"]["column"] == column, "sweep.json objective column")


@case
def sweep_constraint(ctx):
    axes = ["rate", "max-num-seqs"]
    grid = ["rate=2,8", "max-num-seqs=1,4,16"]
    _, rows, _ = sweep(ctx, ctx.path("free"), grid)
    tpot = sorted(float(r["tpot_p90_s"]) for r in rows)
    # A bound between the 3rd and 4th smallest TPOT P90: half the points meet it.
    bound = (tpot[2] + tpot[3]) / 2
    check(tpot[2] < bound < tpot[3], f"TPOT P90 values do not separate: {tpot}")
    for text in [f"tpot_p90_s<={bound!r}", f"tpot_p90_s<={bound * 1e3!r}ms"]:
        p, rows, report = sweep(ctx, ctx.path("bound"), grid, BASE, "--constraint", text)
        meets = [float(r["tpot_p90_s"]) <= bound for r in rows]
        check(sum(meets) == 3, f"{text}: {sum(meets)} points meet it, expected 3")
        for r, m in zip(rows, meets):
            check(r["status"] == ("ok" if m else "infeasible"),
                  f"{text}: {label(r, axes)} TPOT P90 {r['tpot_p90_s']} status {r['status']}")
            check((r["rank"] != "") == m, f"{text}: {label(r, axes)} rank {r['rank']!r}")
            # Infeasible rows still carry their metrics.
            check(r["output_tokens_per_s"] != "", "infeasible row lost its metrics")
        ranks = expected_ranks(rows, "output_tokens_per_s", True)
        for i, r in enumerate(rows):
            if r["status"] == "ok":
                check(r["rank"] == str(ranks[i]), f"{text}: rank {r['rank']} != {ranks[i]}")
        for point, m in zip(report["points"], meets):
            check((point["violations"] == []) == m, f"sweep.json violations {point['violations']}")
    # Two constraints, one no point meets: no best, still exit 0.
    p, rows, report = sweep(ctx, ctx.path("none"), grid, BASE, "--constraint", "tpot_p90_s<=1s",
                            "--constraint", "requests_completed>40")
    check(all(r["status"] == "infeasible" and r["rank"] == "" for r in rows), "a point was ranked")
    check("best: none" in p.stdout and report["best"] is None, "no point meets: no best expected")


@case
def sweep_failed_point(ctx):
    # llama-3.1-70b does not fit an h100-sxm (141 GB of weights in 80 GB):
    # that point is an error row, the others run.
    out = ctx.path("sweep")
    models = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b"]
    p, rows, report = sweep(ctx, out, ["model=" + ",".join(models)],
                            BASE + ["--hardware", "h100-sxm"])
    check([r["model"] for r in rows] == models, "rows not in grid order")
    check([r["status"] for r in rows] == ["ok", "error", "ok"], f"statuses {[r['status'] for r in rows]}")
    bad = rows[1]
    check("llama-3.1-70b" in bad["error"] and "h100-sxm" in bad["error"],
          f"error column does not say why: {bad['error']!r}")
    check(bad["rank"] == "" and bad["output_tokens_per_s"] == "", "failed row has a rank or metrics")
    check(rows[0]["error"] == "" and rows[2]["error"] == "", "ok rows have an error")
    check(report["points"][1]["exit_code"] == 2, "sweep.json lacks simulate's exit status")
    check("1 of 3 points failed" in p.stderr, f"stderr does not report the failure: {p.stderr!r}")
    # The same failure on the first point stops the sweep: bad input.
    expect_input_error(ctx, ["sweep", "--out", ctx.path("first"), "--grid",
                             "model=llama-3.1-70b,llama-3.1-8b", "--", *BASE, "--hardware", "h100-sxm"],
                       ["first point", "llama-3.1-70b", "h100-sxm"])
    check(not os.path.exists(ctx.path("first", "sweep.csv")), "sweep.csv written after bad input")


@case
def sweep_value_syntax(ctx):
    # Integer ranges (HI included, with a step) beside plain values; values with
    # colons are not ranges; semicolons separate values too.
    _, rows, _ = sweep(ctx, ctx.path("range"), ["max-num-seqs=2..8:3,32", "rate=1..2"])
    got = [(r["max-num-seqs"], r["rate"]) for r in rows]
    check(got == list(itertools.product(["2", "5", "8", "32"], ["1", "2"])), f"range rows {got}")
    _, rows, report = sweep(ctx, ctx.path("semi"), ["output-len=fixed:16;uniform:8:32"])
    check([r["output-len"] for r in rows] == ["fixed:16", "uniform:8:32"], "semicolon values")
    s = report["points"][0]["summary"]
    check(s["tokens"]["output"] == 40 * 16, f"fixed:16 outputs: {s['tokens']['output']} tokens")
    check(s["config"]["workload"]["output_len"] == "fixed:16", "value not passed to simulate")


@case
def sweep_speculative_columns(ctx):
    # The draft length k and the acceptance rate as axes: the speculative
    # columns carry summary.json's "speculative" figures, and the mean
    # accepted tokens per step grows with k and alpha.
    base = BASE + ["--draft-model", "llama-3.2-1b"]
    _, rows, report = sweep(ctx, ctx.path("sweep"),
                            ["num-speculative-tokens=1,3", "acceptance-rate=0.5,0.9"], base)
    for r, point in zip(rows, report["points"]):
        spec = point["summary"].get("speculative")
        check(spec is not None, f"{label(r, ['num-speculative-tokens'])}: summary has no speculative")
        for column in ["speculative_mean_accepted_tokens_per_step", "speculative_draft_acceptance_rate"]:
            key = column[len("speculative_"):]
            check(r[column] != "" and float(r[column]) == spec[key],
                  f"{column} {r[column]!r} != summary {spec[key]!r}")
    tokens = {(r["num-speculative-tokens"], r["acceptance-rate"]):
              float(r["speculative_mean_accepted_tokens_per_step"]) for r in rows}
    check(tokens[("1", "0.5")] < tokens[("3", "0.5")] < tokens[("3", "0.9")] and
          tokens[("1", "0.5")] < tokens[("1", "0.9")] < tokens[("3", "0.9")],
          f"accepted tokens per step do not grow with k and alpha: {tokens}")


@case
def sweep_json_stdout(ctx):
    out = ctx.path("sweep")
    p = ctx.ok("sweep", "--quiet", "--json", "--out", out, "--grid", "rate=2,4",
               "--objective", "min-e2e-p50", "--", *BASE)
    with open(os.path.join(out, "sweep.json")) as f:
        check(p.stdout == f.read(), "--json stdout differs from sweep.json")
    r = json.loads(p.stdout)
    check(r["grid"] == [{"flag": "rate", "values": ["2", "4"]}], f"grid {r['grid']}")
    check(r["base_args"] == BASE, f"base_args {r['base_args']}")
    check(r["objective"] == {"name": "min-e2e-p50", "column": "e2e_p50_s", "direction": "min"},
          f"objective {r['objective']}")
    check(r["points"][1]["args"][-1] == "--rate=4", f"args {r['points'][1]['args']}")
    check(sorted(r["ranking"]) == [0, 1], f"ranking {r['ranking']}")


@case
def sweep_keep_points(ctx):
    out = ctx.path("sweep")
    _, rows, _ = sweep(ctx, out, ["rate=2,4"], BASE, "--keep-points")
    for i in range(2):
        folder = os.path.join(out, "points", str(i))
        for f in ["summary.json", "requests.csv", "iterations.csv"]:
            check(os.path.isfile(os.path.join(folder, f)), f"points/{i}/{f} not written")
        with open(os.path.join(folder, "summary.json")) as f:
            s = json.load(f)
        check(float(rows[i]["ttft_p99_s"]) == s["ttft_s"]["p99"], f"points/{i} is not point {i}")


@case
def sweep_errors_flags(ctx):
    out = ["--out", ctx.path("out")]
    expect_input_error(ctx, ["sweep", *out], ["--grid"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--objective", "fastest"],
                       ["--objective", "fastest", "max-throughput"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--jobs", "0"], ["--jobs"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--", "--rate", "3"],
                       ["--rate", "--grid"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--num-requests", "3"],
                       ["--num-requests", "--"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--", "--out", "x"], ["--out"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--constraint", "speed<=3"],
                       ["--constraint", "speed"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--constraint", "tpot_p90_s=3"],
                       ["--constraint", "<="])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--constraint", "requests_per_s>=x"],
                       ["--constraint", "'x'"])
    check(not os.path.exists(ctx.path("out")), "--out created despite bad input")


@case
def sweep_errors_grid(ctx):
    out = ["--out", ctx.path("out")]
    for spec, words in [("rate", ["rate", "FLAG=V1"]),
                        ("rate=", ["rate=", "no values"]),
                        ("rate=1,,2", ["rate=1,,2", "empty"]),
                        ("rate=1,2,", ["rate=1,2,", "empty"]),
                        ("Max_Seqs=1", ["Max_Seqs", "flag name"]),
                        ("rate=1,1", ["rate", "'1'", "twice"]),
                        ("max-num-seqs=8..2", ["8..2", "empty"]),
                        ("max-num-seqs=1..99999", ["1..99999", "10000"]),
                        ("json=1,2", ["--json"])]:
        expect_input_error(ctx, ["sweep", *out, "--grid", spec], words)
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1", "--grid", "rate=2"], ["rate", "twice"])


@case
def sweep_errors_from_simulate(ctx):
    # What only simulate knows is bad: the first point says so, exit 2.
    out = ["--out", ctx.path("out")]
    expect_input_error(ctx, ["sweep", *out, "--grid", "no-such-flag=1,2"], ["no-such-flag"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--", "--scheduler", "bogus"],
                       ["--scheduler", "bogus"])
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=-1,2"], ["--rate", "-1"])
    # Goodput needs an SLO among the simulate flags.
    expect_input_error(ctx, ["sweep", *out, "--grid", "rate=1,2", "--objective", "max-goodput",
                             "--", *BASE], ["max-goodput", "--slo-ttft"])


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
