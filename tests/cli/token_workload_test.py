#!/usr/bin/python3
"""End-to-end tests of the workloads that carry token identity: Mooncake
trace replay (--trace-format mooncake), shared prefixes
(--shared-prefix-groups/--shared-prefix-len) and multi-turn sessions
(--session-turns/--think-time), with their flag errors.

Run one case:   token_workload_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: token_workload_test.py --list
Expectations come from the trace file and the flags, never from earlier
output of the program. The trace is the Mooncake conversation trace in
data/traces/.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import (case_registry, check, check_summary_schema, close, expect_input_error,  # noqa: E402
                      load_summary, read_csv, run_case_from_argv)


def mooncake_trace(ctx):
    return os.path.join(ctx.source_dir, "data", "traces", "mooncake_conversation.jsonl")


def trace_lines(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def by_id(out):
    return sorted(read_csv(os.path.join(out, "requests.csv")), key=lambda r: int(r["id"]))


CASES, case = case_registry()


@case
def token_workload_help(ctx):
    p = ctx.ok("simulate", "--help")
    for word in ["--shared-prefix-groups", "--shared-prefix-len", "--session-turns",
                 "--think-time", "mooncake"]:
        check(word in p.stdout, f"simulate --help does not mention {word}")


@case
def mooncake_trace_replay(ctx):
    path = mooncake_trace(ctx)
    out = ctx.path("run")
    ctx.simulate("--trace", path, "--trace-format", "mooncake", "--max-requests", "200",
                 "--out", out)
    s = load_summary(out)
    check_summary_schema(s, with_goodput=False)
    check(s["requests"]["submitted"] == 200, f"submitted {s['requests']['submitted']} != 200")
    trace = s["config"]["workload"]["trace"]
    check(trace["format"] == "mooncake", f"config trace format {trace['format']!r}")
    # The first 200 lines by timestamp (a stable sort), shifted to start at 0.
    rows = sorted(trace_lines(path), key=lambda r: r["timestamp"])[:200]
    reqs = by_id(out)
    check(len(reqs) == 200, "requests.csv rows")
    t0 = rows[0]["timestamp"] / 1000.0
    for row, r in zip(rows, reqs):
        check(int(r["prompt_tokens"]) == row["input_length"] and
              int(r["output_tokens"]) == row["output_length"],
              f"request {r['id']}: ({r['prompt_tokens']}, {r['output_tokens']}) != trace "
              f"({row['input_length']}, {row['output_length']})")
        check(close(float(r["arrival_s"]), row["timestamp"] / 1000.0 - t0),
              f"request {r['id']}: arrival {r['arrival_s']}")


@case
def mooncake_trace_window(ctx):
    path = mooncake_trace(ctx)
    out = ctx.path("run")
    ctx.simulate("--trace", path, "--trace-format", "mooncake", "--trace-start", "50",
                 "--trace-duration", "30", "--rate-scale", "2", "--out", out)
    rows = [r for r in trace_lines(path) if 50.0 <= r["timestamp"] / 1000.0 < 80.0]
    reqs = by_id(out)
    check(len(reqs) == len(rows) > 0, f"{len(reqs)} requests, {len(rows)} trace lines in window")
    first = rows[0]["timestamp"] / 1000.0
    for row, r in zip(rows, reqs):
        check(int(r["prompt_tokens"]) == row["input_length"], f"request {r['id']} prompt")
        check(close(float(r["arrival_s"]), (row["timestamp"] / 1000.0 - first) / 2),
              f"request {r['id']}: arrival {r['arrival_s']}")


@case
def mooncake_lengths_from_trace(ctx):
    path = mooncake_trace(ctx)
    out = ctx.path("run")
    ctx.simulate("--lengths-from-trace", path, "--trace-format", "mooncake",
                 "--num-requests", "60", "--out", out)
    pairs = {(r["input_length"], r["output_length"]) for r in trace_lines(path)}
    for r in by_id(out):
        check((int(r["prompt_tokens"]), int(r["output_tokens"])) in pairs,
              f"request {r['id']}: lengths not a pair of the trace")


@case
def mooncake_block_tokens(ctx):
    """--mooncake-block-tokens 32: the same requests, lengths scaled by
    32/512 (rounded up), and the same sharing: hits are in the same
    proportion of 16-token blocks as the independent rule gives at the scale."""
    path = mooncake_trace(ctx)
    out = ctx.path("scaled")
    ctx.simulate("--trace", path, "--trace-format", "mooncake", "--max-requests", "120",
                 "--mooncake-block-tokens", "32", "--model", "small-110m", "--out", out)
    rows = sorted(trace_lines(path), key=lambda r: r["timestamp"])[:120]
    reqs = by_id(out)
    scaled = lambda n: max(1, (n * 32 + 511) // 512)
    for row, r in zip(rows, reqs):
        if r["status"] == "rejected":
            continue
        check(int(r["prompt_tokens"]) == scaled(row["input_length"]) and
              int(r["output_tokens"]) == scaled(row["output_length"]),
              f"request {r['id']}: ({r['prompt_tokens']}, {r['output_tokens']}) != scaled trace lengths")
    s = load_summary(out)
    check(s["config"]["workload"]["trace"]["mooncake_block_tokens"] == 32, "config echoes the scale")
    check(s["prefix_cache"]["hits_tokens"] > 0, "the scaled trace still shares its system prompt")
    expect_input_error(ctx, ["simulate", "--trace", path, "--trace-format", "mooncake", "--mooncake-block-tokens",
                             "0"], ["--mooncake-block-tokens", "0"])
    expect_input_error(ctx, ["simulate", "--trace", path, "--trace-format", "mooncake", "--mooncake-block-tokens",
                             "513"], ["--mooncake-block-tokens", "513"])
    expect_input_error(ctx, ["simulate", "--trace", ctx.code_trace, "--mooncake-block-tokens", "32"],
                       ["--mooncake-block-tokens", "mooncake"])
    expect_input_error(ctx, ["simulate", "--mooncake-block-tokens", "32"], ["--mooncake-block-tokens"])


@case
def error_mooncake_trace(ctx):
    os.makedirs(ctx.work_dir, exist_ok=True)
    path = ctx.path("bad.jsonl")
    good = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n'
    cases = [
        ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0]}\n',
         ["hash_ids", "input_length 600"]),
        ('{"timestamp": 5, "input_length": 600, "output_length": 5, "hash_ids": [0, -1]}\n',
         ["hash_ids", "-1"]),
        ('{"timestamp": 5, "input_length": 600, "hash_ids": [0, 1]}\n', ["output_length"]),
        ('{"timestamp": -5, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}\n',
         ["timestamp"]),
        ('{"timestamp": 5, "input_length": 0, "output_length": 5, "hash_ids": []}\n',
         ["input_length"]),
        ("not json\n", ["JSON"]),
    ]
    for bad, words in cases:
        with open(path, "w") as f:
            f.write(good + bad)
        expect_input_error(ctx, ["simulate", "--trace", path, "--trace-format", "mooncake"],
                           [f"{path}:2:", *words])


@case
def shared_prefix_workload(ctx):
    base = ["--num-requests", "100", "--prompt-len", "uniform:50:150", "--seed", "4"]
    plain, out = ctx.path("plain"), ctx.path("run")
    ctx.simulate(*base, "--out", plain)
    ctx.simulate(*base, "--shared-prefix-groups", "4", "--shared-prefix-len", "1000",
                 "--out", out)
    s = load_summary(out)
    check(s["config"]["workload"]["shared_prefix"] == {"groups": 4, "len": 1000},
          f"config shared_prefix {s['config']['workload'].get('shared_prefix')}")
    check("shared_prefix" not in load_summary(plain)["config"]["workload"],
          "a workload without shared prefixes records one")
    # The groups have their own random stream: arrivals and tails as without them.
    for a, b in zip(by_id(plain), by_id(out)):
        check(a["arrival_s"] == b["arrival_s"], f"request {a['id']}: arrival moved")
        check(int(b["prompt_tokens"]) == 1000 + int(a["prompt_tokens"]),
              f"request {a['id']}: prompt {b['prompt_tokens']} != 1000 + {a['prompt_tokens']}")
        check(a["output_tokens"] == b["output_tokens"], f"request {a['id']}: output moved")


@case
def shared_prefix_hit_rate(ctx):
    """G groups of an N-token prefix, block size 16, a cache that never
    evicts and a light load: every request but the first of its group hits
    floor(N / 16) * 16 tokens (the block holding the prefix's end also holds
    the request's own tail)."""
    n, groups, prefix, tail = 200, 4, 1000, 256
    out = ctx.path("run")
    ctx.simulate("--num-requests", str(n), "--rate", "5", "--prompt-len", str(tail),
                 "--shared-prefix-groups", str(groups), "--shared-prefix-len", str(prefix),
                 "--out", out)
    pc = load_summary(out)["prefix_cache"]
    hits, queries = (n - groups) * (prefix // 16 * 16), n * (prefix + tail)
    check(pc["queries_tokens"] == queries, f"queries {pc['queries_tokens']} != {queries}")
    check(pc["hits_tokens"] == hits, f"hits {pc['hits_tokens']} != {hits}")


@case
def sessions_workload(ctx):
    out = ctx.path("run")
    ctx.simulate("--session-turns", "4", "--think-time", "1s", "--num-requests", "40",
                 "--prompt-len", "100", "--output-len", "20", "--rate", "2", "--out", out)
    s = load_summary(out)
    check_summary_schema(s, with_goodput=False)
    check(s["requests"]["completed"] == 40, "not every turn completed")
    check(s["config"]["workload"]["sessions"] == {"turns": "fixed:4", "think_time_s": "fixed:1"},
          f"config sessions {s['config']['workload'].get('sessions')}")
    reqs = by_id(out)
    # 10 sessions of 4 turns, numbered session by session: turn t > 0 of a
    # session is sent 1 s after turn t - 1 finished, its prompt the previous
    # prompt, the previous 20 output tokens and a new 100-token message.
    for r in reqs:
        i = int(r["id"])
        if i % 4 == 0:
            check(int(r["prompt_tokens"]) == 100, f"first turn {i}: prompt {r['prompt_tokens']}")
            check(int(r["cached_tokens"]) == 0, f"first turn {i} hit {r['cached_tokens']} tokens")
            continue
        prev = reqs[i - 1]
        check(close(float(r["arrival_s"]), float(prev["finish_s"]) + 1.0),
              f"turn {i}: arrival {r['arrival_s']} != finish of {i - 1} ({prev['finish_s']}) + 1 s")
        check(int(r["prompt_tokens"]) == int(prev["prompt_tokens"]) + 20 + 100,
              f"turn {i}: prompt {r['prompt_tokens']}")
        # The cache holds the previous turn's full 16-token blocks of prompt and
        # output, less its last output token, which is sampled but never fed
        # back (so has no KV).
        cached = (int(prev["prompt_tokens"]) + 20 - 1) // 16 * 16
        check(int(r["cached_tokens"]) == cached,
              f"turn {i}: {r['cached_tokens']} cached tokens, expected {cached}")
    firsts = [float(r["arrival_s"]) for r in reqs if int(r["id"]) % 4 == 0]
    check(firsts == sorted(firsts), "sessions are not numbered by their first arrival")


@case
def sessions_same_seed_same_bytes(ctx):
    args = ["--session-turns", "uniform:1:6", "--think-time", "exponential:2s",
            "--shared-prefix-groups", "3", "--shared-prefix-len", "500", "--num-requests", "120"]
    files = {}
    for name, seed in [("a", "5"), ("b", "5"), ("c", "6")]:
        out = ctx.path(name)
        ctx.simulate(*args, "--seed", seed, "--out", out)
        files[name] = {}
        for f in ["summary.json", "requests.csv", "iterations.csv"]:
            with open(os.path.join(out, f), "rb") as fh:
                files[name][f] = fh.read()
    for f in files["a"]:
        check(files["a"][f] == files["b"][f], f"{f} differs between two runs with seed 5")
    check(files["a"]["requests.csv"] != files["c"]["requests.csv"], "seed 6 gives seed 5's run")


@case
def error_token_workload_flags(ctx):
    trace = mooncake_trace(ctx)
    cases = [
        (["--arrival", "closed", "--concurrency", "4", "--session-turns", "3"], ["--session-turns"]),
        (["--trace", trace, "--trace-format", "mooncake", "--session-turns", "3"],
         ["--session-turns", "trace"]),
        (["--think-time", "2s"], ["--think-time", "--session-turns"]),
        (["--shared-prefix-groups", "4"], ["--shared-prefix-len"]),
        (["--shared-prefix-len", "100"], ["--shared-prefix-groups"]),
        (["--trace", trace, "--trace-format", "mooncake", "--shared-prefix-groups", "2",
          "--shared-prefix-len", "10"], ["--shared-prefix-groups", "trace"]),
        (["--shared-prefix-groups", "0", "--shared-prefix-len", "10"], ["--shared-prefix-groups"]),
        (["--shared-prefix-groups", "2", "--shared-prefix-len", "-3"], ["--shared-prefix-len"]),
        (["--session-turns", "3", "--think-time", "soon"], ["--think-time", "soon"]),
        (["--session-turns", "uniform:4"], ["--session-turns"]),
        (["--trace-format", "jsonl", "--trace", trace], ["jsonl", "mooncake"]),
    ]
    for args, words in cases:
        expect_input_error(ctx, ["simulate", *args], words)


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
