#!/usr/bin/python3
"""`servesim simulate` with speculative decoding: outputs, the acceptance
models end to end, feeding a run's histogram back, and every bad flag.

Run one case:   speculative_sim_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: speculative_sim_test.py --list
Expectations come from the acceptance models' closed forms and from the
outputs' own records, never from earlier output of the program.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import (case_registry, check, close,  # noqa: E402
                      expect_input_error, load_summary, read_csv, run_case_from_argv)

CASES, case = case_registry()


SPEC = ["--model", "llama-3.1-8b", "--hardware", "h200", "--num-requests", "300", "--rate", "4"]


def spec_run(ctx, name, *flags):
    out = ctx.path(name)
    ctx.simulate(*SPEC, *flags, "--out", out)
    return out, load_summary(out)


@case
def sim_spec_outputs(ctx):
    k, a = 4, 0.7
    out, s = spec_run(ctx, "spec", "--num-speculative-tokens", str(k), "--draft-model", "llama-3.2-1b",
                      "--acceptance-rate", str(a))
    sp = s["speculative"]
    check(sp["num_speculative_tokens"] == k, "speculative.num_speculative_tokens")
    rates = sp["acceptance_rate_per_position"]
    check(len(rates) == k, f"acceptance_rate_per_position has {len(rates)} entries, not {k}")
    # Per-position rates of an independent model are all a (each position has
    # thousands of attempts here: 4 standard errors is < 0.05).
    for j, r in enumerate(rates):
        n = sp["attempts_per_position"][j]
        se = math.sqrt(a * (1 - a) / n)
        check(abs(r - a) < 4 * se, f"position {j + 1}: rate {r} vs {a} (+- {se:.4f}, {n} attempts)")
    expected = (1 - a ** (k + 1)) / (1 - a)
    check(abs(sp["mean_accepted_tokens_per_step"] - expected) < 0.05 * expected,
          f"tokens per step {sp['mean_accepted_tokens_per_step']} vs {expected}")
    check(sum(sp["accepted_length_histogram"]) <= sp["steps"], "histogram counts more than the steps")
    cfg = s["config"]["speculative"]
    check(cfg["draft"]["name"] == "llama-3.2-1b", "config.speculative.draft")
    check(close(cfg["acceptance"]["expected_tokens_per_step"], expected), "config expected tokens per step")

    # Every request emitted exactly its output, in fewer emissions than tokens.
    reqs = [r for r in read_csv(os.path.join(out, "requests.csv")) if r["status"] == "completed"]
    check(len(reqs) == 300, "not every request completed")
    for r in reqs:
        check(int(r["tokens_emitted"]) == int(r["output_tokens"]), f"request {r['id']} emitted a wrong count")
    check(sum(int(r["emissions"]) for r in reqs) < sum(int(r["tokens_emitted"]) for r in reqs),
          "no emission carried several tokens")
    per_req = read_csv(os.path.join(out, "speculative_requests.csv"))
    check(sum(int(r["steps"]) for r in per_req) == sp["steps"], "speculative_requests.csv steps != summary")
    check(sum(int(r["accepted"]) for r in per_req) == sum(sp["accepts_per_position"]),
          "speculative_requests.csv accepted != summary")


@case
def sim_spec_speeds_up_light_load(ctx):
    # At light load a cheap draft with high acceptance lowers TPOT; the same
    # draft with acceptance 0 only adds its cost.
    _, plain = spec_run(ctx, "plain")
    _, good = spec_run(ctx, "good", "--num-speculative-tokens", "4", "--draft-model", "llama-3.2-1b",
                       "--acceptance-rate", "0.9")
    _, bad = spec_run(ctx, "bad", "--num-speculative-tokens", "4", "--draft-model", "llama-3.2-1b",
                      "--acceptance-rate", "0")
    check(good["tpot_s"]["p50"] < 0.7 * plain["tpot_s"]["p50"],
          f"TPOT {good['tpot_s']['p50']} not well below {plain['tpot_s']['p50']}")
    check(bad["tpot_s"]["p50"] > plain["tpot_s"]["p50"], "a draft that is never accepted made decoding faster")
    check(bad["speculative"]["mean_accepted_tokens_per_step"] == 1.0, "acceptance 0 accepted something")


@case
def sim_spec_histogram_round_trip(ctx):
    # A curve's run writes a histogram; fed back, it reproduces the curve.
    _, first = spec_run(ctx, "curve", "--num-speculative-tokens", "3", "--self-draft-layers", "8",
                        "--acceptance-curve", "0.9,0.6,0.3")
    out = ctx.path("curve")
    _, again = spec_run(ctx, "hist", "--num-speculative-tokens", "3", "--self-draft-layers", "8",
                        "--acceptance-hist", os.path.join(out, "summary.json"))
    hist = first["speculative"]["accepted_length_histogram"]
    total = sum(hist)
    at_least = [sum(hist[j:]) for j in range(len(hist))]
    conditional = [at_least[j] / at_least[j - 1] for j in range(1, len(hist))]
    got = again["config"]["speculative"]["acceptance"]["conditional_rates"]
    check(all(close(g, c) for g, c in zip(got, conditional)), f"conditional rates {got} != {conditional}")
    check(total > 1000, "too few steps for the comparison below")
    for j, (r, target) in enumerate(zip(again["speculative"]["acceptance_rate_per_position"], [0.9, 0.6, 0.3])):
        check(abs(r - target) < 0.05, f"position {j + 1}: {r} vs curve {target}")
    # A CSV histogram works the same way.
    csv_path = ctx.path("hist.csv")
    with open(csv_path, "w") as f:
        f.write("accepted,count\n" + "".join(f"{a},{c}\n" for a, c in enumerate(hist)))
    _, from_csv = spec_run(ctx, "csv", "--num-speculative-tokens", "3", "--self-draft-layers", "8",
                           "--acceptance-hist", csv_path)
    check(from_csv["config"]["speculative"]["acceptance"]["conditional_rates"] == got, "CSV and JSON differ")


@case
def sim_spec_disable_by_batch_size(ctx):
    # Heavy load: with speculation disabled at 8 running sequences most
    # decodes are plain.
    out = ctx.path("disabled")
    ctx.simulate("--num-requests", "300", "--rate", "40", "--num-speculative-tokens", "3", "--draft-model",
                 "llama-3.2-1b", "--acceptance-rate", "0.8", "--speculative-disable-by-batch-size", "8",
                 "--out", out)
    sp = load_summary(out)["speculative"]
    check(sp["plain_decodes"] > sp["steps"], f"{sp['plain_decodes']} plain decodes, {sp['steps']} steps")


@case
def sim_spec_k0_is_plain(ctx):
    # With K = 0 the draft and acceptance flags are accepted (a sweep over K
    # includes its baseline) and change nothing.
    plain = ctx.simulate(*SPEC, "--json").stdout
    k0 = ctx.simulate(*SPEC, "--json", "--num-speculative-tokens", "0", "--draft-model", "llama-3.2-1b",
                      "--acceptance-rate", "0.8").stdout
    a, b = json.loads(plain), json.loads(k0)
    check("speculative" not in b, "a K = 0 run reports speculation")
    check(a["tpot_s"] == b["tpot_s"] and a["ttft_s"] == b["ttft_s"], "K = 0 with a draft differs from no draft")
    # ...but they are still checked.
    expect_input_error(ctx, ["simulate", "--num-requests", "10", "--draft-model", "qwen2.5-7b"], ["vocabulary"])


@case
def sim_spec_errors(ctx):
    base = ["simulate", "--num-requests", "10"]
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--acceptance-rate", "0.5"],
                       ["--draft-model", "--self-draft-layers"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--draft-model", "llama-3.2-1b"],
                       ["--acceptance-rate"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--draft-model", "llama-3.2-1b",
                                    "--self-draft-layers", "4", "--acceptance-rate", "0.5"], ["not both"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "-1"], ["--num-speculative-tokens"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "4",
                                    "--acceptance-curve", "0.9,0.8"], ["--acceptance-curve", "2 positions"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "4",
                                    "--acceptance-curve", "0.9,abc,0.1"], ["--acceptance-curve", "abc"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "4",
                                    "--acceptance-rate", "1.5"], ["--acceptance-rate"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "4",
                                    "--acceptance-rate", "0.5", "--acceptance-beta", "2:1"], ["one of"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "40",
                                    "--acceptance-rate", "0.5"], ["--self-draft-layers", "1 .. 31"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--draft-model", "qwen2.5-7b",
                                    "--acceptance-rate", "0.5"], ["vocabulary"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "4",
                                    "--acceptance-hist", ctx.path("missing.json")], ["missing.json"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "3", "--self-draft-layers", "4",
                                    "--acceptance-beta", "2"], ["A:B"])


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
