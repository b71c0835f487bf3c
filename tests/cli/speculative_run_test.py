#!/usr/bin/python3
"""`servesim run` with speculative decoding: a separate draft, a self-draft,
controlled acceptance, the outputs they write, and every bad flag.

Run one case:   speculative_run_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: speculative_run_test.py --list
Expectations come from the flags, the closed forms and the outputs' own
records (tokens asked, steps taken), never from earlier output of the program.
"""

import json
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import (case_registry, check, close,  # noqa: E402
                      expect_input_error, load_summary, read_csv, run_case_from_argv)

CASES, case = case_registry()


# A few short requests, two at a time: a few seconds on 2 cores.
SMALL = ["--arrival", "closed", "--concurrency", "2", "--num-requests", "4",
         "--prompt-len", "uniform:8:32", "--output-len", "uniform:8:24", "--kv-cache-memory", "128MiB"]


def spec_run(ctx, name, *flags):
    out = ctx.path(name)
    ctx.ok("run", "--quiet", *SMALL, *flags, "--out", out)
    return out, load_summary(out)


def check_speculative_outputs(out, s, k):
    """The "speculative" object and speculative_requests.csv agree with each
    other and with the requests served."""
    check(s["config"]["executor"] == "speculative decoder", f"executor {s['config']['executor']!r}")
    check(s["config"]["speculative"]["num_speculative_tokens"] == k, "config.speculative.num_speculative_tokens")
    sp = s["speculative"]
    check(sp["num_speculative_tokens"] == k, "speculative.num_speculative_tokens")
    check(len(sp["acceptance_rate_per_position"]) == k,
          f"acceptance_rate_per_position has {len(sp['acceptance_rate_per_position'])} entries, not {k}")
    check(all(0 <= r <= 1 for r in sp["acceptance_rate_per_position"]), "a rate outside [0, 1]")
    check(len(sp["accepted_length_histogram"]) == k + 1, "accepted_length_histogram has k + 1 entries")
    steps, accepted = sp["steps"], sum(sp["accepts_per_position"])
    check(steps > 0, "no speculative step")
    check(sp["attempts_per_position"][0] == steps, "every step attempts its first draft")
    check(sum(sp["accepted_length_histogram"]) <= steps, "histogram counts more than the steps")
    # Tokens per step include the bonus: (accepted + steps) / steps, in 1 .. k + 1.
    mean = sp["mean_accepted_tokens_per_step"]
    check(close(mean, (accepted + steps) / steps), f"mean_accepted_tokens_per_step {mean}")
    check(1 <= mean <= k + 1, f"mean_accepted_tokens_per_step {mean} outside 1 .. {k + 1}")
    check(sp["draft_seconds"] > 0, "draft_seconds")

    reqs = read_csv(os.path.join(out, "requests.csv"))
    asked = 0
    for r in reqs:
        check(int(r["tokens_emitted"]) == int(r["output_tokens"]),
              f"request {r['id']} emitted {r['tokens_emitted']} of {r['output_tokens']}")
        asked += int(r["output_tokens"])
    # Every token came from a step (accepted + 1), a plain decode or a
    # request's prefill (one each without preemption).
    if s["preemptions"] == 0:
        check(steps + accepted + sp["plain_decodes"] + len(reqs) == asked,
              f"{steps} steps + {accepted} accepted + {sp['plain_decodes']} plain decodes + {len(reqs)} prefills "
              f"!= {asked} tokens")
    rows = read_csv(os.path.join(out, "speculative_requests.csv"))
    check(rows, "speculative_requests.csv has no rows")
    check(sum(int(r["steps"]) for r in rows) == steps, "per-request steps do not add up")
    check(sum(int(r["accepted"]) for r in rows) == accepted, "per-request accepted drafts do not add up")
    ids = {r["id"] for r in reqs}
    for r in rows:
        check(r["request_id"] in ids, f"speculative_requests.csv names unknown request {r['request_id']}")
        check(int(r["accepted"]) <= int(r["proposed"]) <= k * int(r["steps"]), f"request {r['request_id']}")
    return sp


def mini_model(ctx, name, layers):
    """A config.json folder: a 64-wide llama with tiny-15m's 32000-token
    vocabulary, fast enough for the sanitizer build."""
    folder = ctx.path(name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": layers,
                   "num_attention_heads": 4, "num_key_value_heads": 4, "vocab_size": 32000,
                   "max_position_embeddings": 256, "tie_word_embeddings": True, "rms_norm_eps": 1e-5,
                   "rope_theta": 10000.0, "torch_dtype": "float32"}, f)
    return folder


@case
def run_spec_help(ctx):
    p = ctx.ok("run", "--help")
    for flag in ["--draft-model", "--draft-weights", "--draft-weights-seed", "--self-draft-layers",
                 "--acceptance-rate", "--num-speculative-tokens", "--speculative-disable-by-batch-size"]:
        check(flag in p.stdout, f"run --help lacks {flag}")


@case
def run_spec_draft_model(ctx):
    # A separate draft over the target's vocabulary: a 2-layer, 64-wide model
    # from a config.json drafting for tiny-15m. (The pair, tiny-15m
    # for small-110m, is served by experiments/speculative/run.py; here it
    # would take minutes under the sanitizer build.)
    k = 3
    draft_dir = mini_model(ctx, "draft_model", layers=2)
    out, s = spec_run(ctx, "draft", "--model", "tiny-15m", "--draft-model", draft_dir,
                      "--num-speculative-tokens", str(k))
    check_speculative_outputs(out, s, k)
    cfg = s["config"]["speculative"]
    check(cfg["draft"]["num_hidden_layers"] == 2 and cfg["draft"]["hidden_size"] == 64,
          f"config.speculative.draft {cfg['draft']}")
    check(cfg["draft"]["shares_target_weights"] is False, "a separate draft owns its weights")
    check(cfg["draft"]["weights"]["bytes"] > 0, "config.speculative.draft.weights.bytes")
    check(cfg["acceptance"]["mode"] == "exact", "temperature 0 verifies exactly")


@case
def run_spec_self_draft(ctx):
    # A self-draft of tiny-15m's first 2 layers, sampling at temperature 0.8
    # (rejection sampling).
    k = 2
    out, s = spec_run(ctx, "self", "--model", "tiny-15m", "--self-draft-layers", "2", "--temperature", "0.8",
                      "--num-speculative-tokens", str(k))
    check_speculative_outputs(out, s, k)
    cfg = s["config"]["speculative"]
    check(cfg["draft"]["name"] == "tiny-15m[:2 layers]", f"draft name {cfg['draft'].get('name')!r}")
    check(cfg["draft"]["self_draft_layers"] == 2 and cfg["draft"]["shares_target_weights"] is True,
          "config.speculative.draft of a self-draft")
    check(cfg["acceptance"]["mode"] == "rejection_sampling", f"acceptance mode {cfg['acceptance']}")


@case
def run_spec_controlled_acceptance(ctx):
    # Controlled acceptance at a = 0.5: each position is accepted with
    # probability 0.5 given the earlier ones (4 standard errors).
    k, a = 3, 0.5
    out = ctx.path("controlled")
    ctx.ok("run", "--quiet", "--model", mini_model(ctx, "target", layers=4), "--self-draft-layers", "3",
           "--num-speculative-tokens", str(k),
           "--acceptance-rate", str(a), "--arrival", "closed", "--concurrency", "8", "--num-requests", "16",
           "--prompt-len", "8", "--output-len", "60", "--kv-cache-memory", "128MiB", "--out", out)
    s = load_summary(out)
    sp = check_speculative_outputs(out, s, k)
    for j, r in enumerate(sp["acceptance_rate_per_position"]):
        n = sp["attempts_per_position"][j]
        se = math.sqrt(a * (1 - a) / n)
        check(abs(r - a) < 4 * se, f"position {j + 1}: rate {r} vs {a} (+- {se:.4f}, {n} attempts)")
    acc = s["config"]["speculative"]["acceptance"]
    check(acc["mode"] == "controlled" and acc["rate"] == a, f"config.speculative.acceptance {acc}")
    check(close(acc["expected_tokens_per_step"], (1 - a ** (k + 1)) / (1 - a)), "expected_tokens_per_step")


@case
def run_spec_disabled_by_batch_size(ctx):
    # Speculation off while 2 or more sequences run: with two in flight most
    # decodes are plain, and the run still serves every token.
    out, s = spec_run(ctx, "disabled", "--model", "tiny-15m", "--self-draft-layers", "2",
                      "--num-speculative-tokens", "2", "--speculative-disable-by-batch-size", "2")
    sp = s["speculative"]
    check(sp["plain_decodes"] > 0, "no plain decode although speculation was disabled at batch 2")
    reqs = read_csv(os.path.join(out, "requests.csv"))
    check(all(int(r["tokens_emitted"]) == int(r["output_tokens"]) for r in reqs), "a request fell short")


@case
def run_spec_errors(ctx):
    base = ["run", "--model", "tiny-15m"]
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2"],
                       ["--num-speculative-tokens", "--draft-model", "--self-draft-layers"])
    expect_input_error(ctx, base + ["--draft-model", "tiny-15m"], ["--num-speculative-tokens"])
    expect_input_error(ctx, base + ["--self-draft-layers", "2"], ["--num-speculative-tokens"])
    expect_input_error(ctx, base + ["--acceptance-rate", "0.5"], ["--acceptance-rate"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--draft-model", "tiny-15m",
                                    "--self-draft-layers", "2"], ["--draft-model", "--self-draft-layers"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--self-draft-layers", "2",
                                    "--acceptance-rate", "1.5"], ["--acceptance-rate"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--self-draft-layers", "2",
                                    "--acceptance-rate", "-0.1"], ["--acceptance-rate"])
    # tiny-15m has 6 layers: a self-draft keeps 1 .. 5 of them.
    for layers in ["0", "6", "-1"]:
        expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--self-draft-layers", layers],
                           ["--self-draft-layers", "1 .. 5"])
    # A draft over another vocabulary (128256 tokens against 32000).
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--draft-model", "llama-3.2-1b"],
                       ["--draft-model", "llama-3.2-1b"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--self-draft-layers", "2",
                                    "--draft-weights-seed", "3"], ["--draft-weights-seed"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--self-draft-layers", "2",
                                    "--draft-weights", ctx.path("none")], ["--draft-weights"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "2", "--draft-model", "tiny-15m",
                                    "--draft-weights", ctx.path("no-such-dir")], ["no-such-dir"])
    expect_input_error(ctx, base + ["--num-speculative-tokens", "-1"], ["--num-speculative-tokens"])


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
