#!/usr/bin/python3
"""`servesim validate --measured` and `servesim fit` end to end: a simulate
folder predicted with its own settings (no error), a hand-made vLLM
`bench serve --save-result` JSON put beside a prediction (the measured side
checked against vLLM's definitions computed here), fit recovering the costs a
run was simulated with and `simulate --cost-file` reading them, and bad
inputs refused by name; and `run --iteration-log` feeding `validate
--measured --iteration-log` with two cost models on the same iterations.

Run one case:   measured_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: measured_test.py --list
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import (case_registry, check, close,  # noqa: E402
                      expect_input_error, percentile, read_csv, run_case_from_argv)

CASES, case = case_registry()

# The costs a "measured" run is simulated with, for fit to find again.
TRUTH = {"compute_efficiency": 0.45, "memory_efficiency": 0.62, "iteration_overhead_s": 1.2e-3}
TRUTH_FLAGS = ["--compute-efficiency", "0.45", "--memory-efficiency", "0.62", "--iteration-overhead", "1.2ms"]


def load(path):
    with open(path) as f:
        return json.load(f)


def write_json(path, obj):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(obj, f)
    return path


@case
def measured_validate_predicts_its_own_run(ctx):
    run = ctx.path("run")
    ctx.simulate("--num-requests", "120", "--rate", "6", "--seed", "5", "--out", run)
    out = ctx.path("v")
    p = ctx.ok("validate", "--measured", run, "--out", out, "--quiet")
    check("TTFT" in p.stdout and "ITL" in p.stdout, "the table lacks TTFT or ITL")
    report = load(os.path.join(out, "report.json"))
    check(report["mode"] == "measured" and report["measured"]["format"] == "servesim", "mode or format")
    check(report["measured"]["submitted"] == 120 and report["predicted_run"]["completed"] == 120, "request counts")
    for metric in ["ttft_s", "tpot_s", "itl_s", "e2e_s"]:
        for stat in ["mean", "p50", "p90", "p99"]:
            e = report[metric]["rel_error"][stat]
            check(e is not None and abs(e) < 1e-9, f"{metric}.{stat}: error {e} predicting its own run")
    for f in ["requests.csv", "predicted/summary.json", "predicted/requests.csv", "predicted/iterations.csv"]:
        check(os.path.exists(os.path.join(out, f)), f"no {f}")
    rows = read_csv(os.path.join(out, "requests.csv"))
    check(len(rows) == 120, f"{len(rows)} rows in requests.csv")
    # The existing modes are untouched: validate without --measured still wants a real run's flags.
    p = ctx.ok("validate", "--help")
    check("--predict-draws" in p.stdout and "--measured" in p.stdout, "validate --help")
    p = ctx.ok("validate", "--measured", run, "--help")
    check("--cost-file" in p.stdout and "--max-num-seqs" in p.stdout, "validate --measured --help")


@case
def measured_validate_reads_a_vllm_json(ctx):
    # Four requests of 128..512 prompt tokens, 8..16 output tokens, with start times.
    inputs = [128, 256, 512, 200]
    outputs = [8, 16, 12, 10]
    ttfts = [0.031, 0.045, 0.080, 0.040]
    itls = [[0.006 + 0.0001 * k for k in range(n - 1)] for n in outputs]
    starts = [1000.0, 1000.5, 1001.25, 1002.0]
    path = write_json(ctx.path("vllm", "result.json"), {
        "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B", "request_rate": 2.0, "burstiness": 1.0,
        "input_lens": inputs, "output_lens": outputs, "ttfts": ttfts, "itls": itls, "start_times": starts,
        "errors": [""] * 4})
    out = ctx.path("v")
    ctx.ok("validate", "--measured", path, "--out", out, "--quiet")
    report = load(os.path.join(out, "report.json"))
    check(report["measured"]["format"] == "vllm" and not report["measured"]["arrivals"]["assumed"], "format")
    # vLLM's definitions: TPOT = sum(itls) / (output - 1), E2E = TTFT + sum(itls).
    tpots = sorted(sum(g) / (n - 1) for g, n in zip(itls, outputs))
    e2es = sorted(t + sum(g) for t, g in zip(ttfts, itls))
    m = report["tpot_s"]["measured"]
    check(abs(m["p50"] - percentile(tpots, 50)) < 1e-12, f"TPOT p50 {m['p50']} vs {percentile(tpots, 50)}")
    m = report["e2e_s"]["measured"]
    check(abs(m["mean"] - sum(e2es) / 4) < 1e-12, "E2E mean")
    check(report["itl_s"]["measured"]["count"] == sum(n - 1 for n in outputs), "ITL samples")
    check(abs(report["ttft_s"]["measured"]["p90"] - percentile(sorted(ttfts), 90)) < 1e-12, "TTFT p90")
    # The prediction simulated the same four requests at the same times (from t = 0).
    rows = read_csv(os.path.join(out, "predicted", "requests.csv"))
    check(sorted(float(r["arrival_s"]) for r in rows) == [s - 1000.0 for s in starts], "arrivals not replayed")
    check(sorted(int(r["prompt_tokens"]) for r in rows) == sorted(inputs), "prompt lengths")
    # Without start times: the arrivals are assumed from request_rate, and said so.
    path = write_json(ctx.path("vllm", "no_starts.json"), {
        "request_rate": 2.0, "input_lens": inputs, "output_lens": outputs, "ttfts": ttfts, "itls": itls})
    p = ctx.ok("validate", "--measured", path, "--out", ctx.path("v2"), "--quiet")
    check("assumed" in p.stdout, "assumed arrivals not said")
    check(load(os.path.join(ctx.path("v2"), "report.json"))["measured"]["arrivals"]["assumed"], "assumed")


@case
def measured_validate_refuses_bad_input(ctx):
    out = ctx.path("v")
    expect_input_error(ctx, ["validate", "--measured", ctx.path("missing.json"), "--out", out],
                       ["missing.json", "no such"])
    bad = write_json(ctx.path("in", "no_inputs.json"), {"output_lens": [1], "ttfts": [0.1], "itls": [[]]})
    expect_input_error(ctx, ["validate", "--measured", bad, "--out", out], ["no_inputs.json", "input_lens"])
    bad = write_json(ctx.path("in", "unequal.json"),
                     {"input_lens": [10, 20], "output_lens": [2], "ttfts": [0.1, 0.2], "itls": [[0.01], [0.01]]})
    expect_input_error(ctx, ["validate", "--measured", bad, "--out", out], ["unequal.json", "output_lens", "equal"])
    bad = write_json(ctx.path("in", "negative.json"),
                     {"input_lens": [10], "output_lens": [2], "ttfts": [-0.1], "itls": [[0.01]]})
    expect_input_error(ctx, ["validate", "--measured", bad, "--out", out], ["negative.json", "ttfts[0]", "negative"])
    os.makedirs(ctx.path("empty"), exist_ok=True)
    expect_input_error(ctx, ["validate", "--measured", ctx.path("empty"), "--out", out], ["requests.csv"])
    good = write_json(ctx.path("in", "good.json"),
                      {"input_lens": [10], "output_lens": [2], "ttfts": [0.1], "itls": [[0.01]]})
    expect_input_error(ctx, ["validate", "--measured", good, "--out", out, "--num-requests", "5"],
                       ["--num-requests", "--measured"])
    expect_input_error(ctx, ["validate", "--measured", good], ["--out"])
    expect_input_error(ctx, ["fit", "--out", out], ["--measured"])
    expect_input_error(ctx, ["fit", "--measured", good, "--out", out, "--fit-parameters", "speed"],
                       ["--fit-parameters", "speed"])
    missing = ctx.path("missing_held_out")
    p = ctx.run("fit", "--measured", good, "--held-out", missing, "--out", out)
    check(p.returncode == 2 and f"--held-out {missing}: no such file" in p.stderr,
          f"a missing --held-out run is not named by its flag: {p.stderr[:300]}")


@case
def measured_fit_then_simulate_cost_file(ctx):
    # A light-load run simulated with known costs; fit finds the compute
    # efficiency and the overhead (the memory efficiency given), and a
    # held-out run at a higher load is then predicted closely.
    light = ctx.path("light")
    common = ["--prompt-len", "lognormal:1024:0.6:64:4096", "--output-len", "lognormal:128:0.6:8:256",
              "--memory-efficiency", "0.62"]
    ctx.simulate(*TRUTH_FLAGS[:2], *TRUTH_FLAGS[4:], *common, "--num-requests", "60", "--rate", "0.5", "--out", light)
    mid = ctx.path("mid")
    ctx.simulate(*TRUTH_FLAGS[:2], *TRUTH_FLAGS[4:], *common, "--num-requests", "60", "--rate", "4", "--out", mid)
    out = ctx.path("fit")
    p = ctx.ok("fit", "--measured", light, "--held-out", mid, "--memory-efficiency", "0.62",
               "--fit-parameters", "compute-efficiency,iteration-overhead", "--max-evaluations", "400",
               "--out", out)
    check("fit:" in p.stderr, "no progress on stderr")
    cost = load(os.path.join(out, "cost.json"))
    r = cost["roofline"]
    check(abs(r["compute_efficiency"] / TRUTH["compute_efficiency"] - 1) < 0.03,
          f"compute efficiency {r['compute_efficiency']}")
    check(abs(r["iteration_overhead_s"] / TRUTH["iteration_overhead_s"] - 1) < 0.08,
          f"overhead {r['iteration_overhead_s']}")
    check(r["memory_efficiency"] == 0.62, "the held parameter moved")
    report = load(os.path.join(out, "fit.json"))
    check(report["rms_rel_error"]["fitted"] < 0.02, f"fitted RMS error {report['rms_rel_error']['fitted']}")
    held = report["held_out_objective"]
    check(held["fitted"] < held["start"] and held["fitted"] ** 0.5 < 0.05, f"held-out objective {held}")
    # simulate --cost-file predicts with the fitted costs: the same as the flags would.
    a = ctx.simulate("--cost-file", os.path.join(out, "cost.json"), "--num-requests", "20", "--json")
    b = ctx.simulate("--compute-efficiency", repr(r["compute_efficiency"]), "--memory-efficiency",
                     repr(r["memory_efficiency"]), "--iteration-overhead", f"{r['iteration_overhead_s']}s",
                     "--num-requests", "20", "--json")
    sa, sb = json.loads(a.stdout), json.loads(b.stdout)
    check(abs(sa["tpot_s"]["mean"] / sb["tpot_s"]["mean"] - 1) < 1e-6, "cost file and flags differ")
    check(sa["config"]["cost_model"]["compute_efficiency"] == r["compute_efficiency"], "config.cost_model")
    # --max-evaluations N is a budget the search never exceeds, with every
    # parameter searched (the overheads' own line searches first).
    for budget in ("10", "37"):
        few = ctx.path(f"fit_{budget}")
        ctx.ok("fit", "--quiet", "--measured", light, "--max-evaluations", budget, "--fit-parameters",
               "compute-efficiency,memory-efficiency,iteration-overhead,sequence-overhead", "--out", few)
        spent = load(os.path.join(few, "fit.json"))["evaluations"]
        check(spent == int(budget), f"--max-evaluations {budget}: {spent} evaluations")


@case
def measured_cost_file_refused_where_it_does_not_apply(ctx):
    path = write_json(ctx.path("c", "cost.json"), {"servesim_cost_file": 1, "cost_model": "roofline",
                                                   "hardware": "h200", "roofline": {"compute_efficiency": 0.5}})
    expect_input_error(ctx, ["simulate", "--cost-file", path, "--compute-efficiency", "0.6"],
                       ["--compute-efficiency", "--cost-file"])
    expect_input_error(ctx, ["simulate", "--cost-file", path, "--hardware", "h100-sxm"], ["h200", "h100-sxm"])
    typo = write_json(ctx.path("c", "typo.json"), {"servesim_cost_file": 1, "roofline": {"compute": 0.5}})
    expect_input_error(ctx, ["simulate", "--cost-file", typo], ["typo.json", "roofline.compute"])
    expect_input_error(ctx, ["simulate", "--cost-file", ctx.path("c", "none.json")], ["none.json"])
    p = ctx.ok("simulate", "--help")
    check("--cost-file" in p.stdout, "simulate --help lacks --cost-file")
    # Only the file's compute efficiency replaces a default: memory efficiency stays 0.85.
    s = json.loads(ctx.simulate("--cost-file", path, "--num-requests", "5", "--json").stdout)
    check(s["config"]["cost_model"]["compute_efficiency"] == 0.5, "file value not used")
    check(s["config"]["cost_model"]["memory_efficiency"] == 0.85, "default replaced")


@case
def run_iteration_log(ctx):
    """run --iteration-log: one line per iteration of iterations.csv (same start and measured time), every
    prompt and output token accounted for, and validate --measured costs the same iterations with any
    cost model. A refused run leaves an earlier log as it was."""
    out, log = ctx.path("run"), ctx.path("log.jsonl")
    os.makedirs(ctx.path(), exist_ok=True)
    ctx.ok("run", "--quiet", "--model", "tiny-15m", "--num-requests", "8", "--rate", "40", "--seed", "4",
           "--prompt-len", "uniform:8:96", "--output-len", "uniform:2:12", "--scheduler", "chunked",
           "--max-num-batched-tokens", "48", "--iteration-log", log, "--out", out)
    lines = [json.loads(line) for line in open(log)]
    its = read_csv(os.path.join(out, "iterations.csv"))
    check(len(lines) == len(its) > 0, f"{len(lines)} log lines for {len(its)} iterations")
    for x, i in zip(lines, its):
        check(close(x["start_s"], float(i["start_s"]), rel=1e-6, abs_=1e-6)
              and close(x["measured_s"], float(i["duration_s"]), rel=1e-6, abs_=1e-9),
              f"iteration {i['index']}: log {x['start_s']}, {x['measured_s']} against {i['start_s']}, "
              f"{i['duration_s']}")
        prefill = sum(q for _, q, _, p, _, _ in x["sequences"] if p)
        check(prefill == int(i["prefill_tokens"]), f"iteration {i['index']}: {prefill} prefill tokens logged")
    prompt, emitted = {}, {}
    for x in lines:
        for rid, query, cached, prefill, samples, n in x["sequences"]:
            if prefill:
                check(cached == prompt.get(rid, 0), f"request {rid}: chunk at {cached} after {prompt.get(rid, 0)}")
                prompt[rid] = prompt.get(rid, 0) + query
            if samples:
                emitted[rid] = emitted.get(rid, 0) + (1 if n == -1 else n)
    reqs = {int(r["id"]): r for r in read_csv(os.path.join(out, "requests.csv"))}
    check(prompt == {k: int(r["prompt_tokens"]) for k, r in reqs.items()}, f"prompts {prompt}")
    check(emitted == {k: int(r["tokens_emitted"]) for k, r in reqs.items()}, f"outputs {emitted}")
    # Two cost models on the same measured iterations: the same measured side, different predictions.
    reports = []
    for name, flags in (("roofline", []), ("slow", ["--iteration-overhead", "5ms"])):
        v = ctx.path("validate_" + name)
        ctx.ok("validate", "--measured", out, "--iteration-log", log, "--model", "tiny-15m", "--scheduler",
               "chunked", "--max-num-batched-tokens", "48", "--out", v, "-q", *flags)
        reports.append(json.load(open(os.path.join(v, "report.json")))["server_iterations"])
    check(reports[0]["iterations"] == reports[1]["iterations"] == len(lines), "iterations costed")
    check(reports[0]["tpot_s"]["measured"] == reports[1]["tpot_s"]["measured"], "the measured side differs")
    check(reports[1]["tpot_s"]["predicted"]["p50"] > reports[0]["tpot_s"]["predicted"]["p50"],
          "5 ms more per iteration did not raise the replayed TPOT")
    # Refused before the weights load: a log that cannot be written; a model that does not fit keeps the old log.
    expect_input_error(ctx, ["run", "--model", "tiny-15m", "--iteration-log", ctx.path("no", "dir", "log.jsonl")],
                       ["--iteration-log", "cannot open"])
    before = open(log).read()
    expect_input_error(ctx, ["run", "--model", "llama-3.1-70b", "--iteration-log", log], ["llama-3.1-70b"])
    check(open(log).read() == before, "a refused run changed the earlier log")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
