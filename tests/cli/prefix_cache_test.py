#!/usr/bin/python3
"""`servesim simulate` with prefix caching: a workload without token identity
is unchanged by it, the flags' errors, and the hit rate of a Mooncake trace
against an independent computation.

Run one case:   prefix_cache_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: prefix_cache_test.py --list
Expectations come from the trace itself (tuples of token positions, no
hashing), never from earlier output of the program.
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, load_summary, read_csv, run_case_from_argv  # noqa: E402

CASES, case = case_registry()


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


@case
def prefix_no_identity_same_outputs(ctx):
    """No token identity: caching on and off give byte-identical CSVs and the
    same summary apart from the flag echoed in config."""
    for policy in ("chunked", "continuous"):
        common = ["--num-requests", "300", "--rate", "30", "--scheduler", policy, "--num-gpu-blocks", "3000"]
        on, off = ctx.path(f"on_{policy}"), ctx.path(f"off_{policy}")
        ctx.simulate(*common, "--out", on)
        ctx.simulate(*common, "--no-enable-prefix-caching", "--out", off)
        for name in ("requests.csv", "iterations.csv"):
            check(read_bytes(os.path.join(on, name)) == read_bytes(os.path.join(off, name)),
                  f"{policy}: {name} differs with caching on and off")
        s_on, s_off = load_summary(on), load_summary(off)
        check(s_on["config"]["scheduler"]["enable_prefix_caching"] is True, "default is on")
        check(s_off["config"]["scheduler"]["enable_prefix_caching"] is False, "off is echoed")
        check(s_on["preemptions"] > 0, f"{policy}: the run should preempt (readmissions look nothing up)")
        for s in (s_on, s_off):
            del s["config"]["scheduler"]["enable_prefix_caching"]
        check(s_on == s_off, f"{policy}: summary.json differs beyond the flag")
        pc = s_on["prefix_cache"]
        check(pc["queries_tokens"] == 0 and pc["hit_rate"] is None, f"prefix_cache {pc}")
        reqs = read_csv(os.path.join(on, "requests.csv"))
        check(all(r["cached_tokens"] == "0" for r in reqs), "cached_tokens without identity")


@case
def prefix_flag_errors(ctx):
    expect_input_error(ctx, ["simulate", "--enable-prefix-caching", "--no-enable-prefix-caching"],
                       ["--enable-prefix-caching", "--no-enable-prefix-caching"])
    expect_input_error(ctx, ["simulate", "--scheduling-policy", "priority"], ["--scheduling-policy", "priority"])


def independent_hit_tokens(lines, block_size):
    """vLLM's rules one request at a time with an unbounded cache: the hit is
    the longest run of full blocks some earlier prompt held, at most
    (n - 1) // block_size blocks. A block is named by the tuple of Mooncake
    ids up to its own and its position in that 512-token id (ids are chained
    prefix hashes, and a partial last block is a prefix of the full one)."""
    seen, hits, queries = set(), 0, 0
    for rec in lines:
        ids, n = rec["hash_ids"], rec["input_length"]
        keys = []
        for b in range(n // block_size):
            first = b * block_size
            # Block b covers tokens [first, first + bs): inside Mooncake block
            # first // 512 when 512 is a multiple of the block size.
            keys.append((tuple(ids[:first // 512 + 1]), first % 512))
        hit = 0
        for k in keys[:(n - 1) // block_size]:
            if k not in seen:
                break
            hit += block_size
        hits += hit
        queries += n
        seen.update(keys)
    return hits, queries


@case
def prefix_mooncake_hit_rate(ctx):
    """The first 400 requests of the Mooncake conversation trace, served one
    at a time with a cache that never evicts: hits equal the independent
    computation, request by request."""
    trace = os.path.join(ctx.source_dir, "data", "traces", "mooncake_conversation.jsonl")
    with open(trace) as f:
        lines = [json.loads(next(f)) for _ in range(400)]
    out = ctx.path("mooncake")
    ctx.simulate("--trace", trace, "--trace-format", "mooncake", "--max-requests", "400", "--model", "llama-3.1-8b",
                 "--hardware", "h200", "--scheduler", "continuous", "--max-num-seqs", "1",
                 "--num-gpu-blocks", "400000", "--out", out)
    s = load_summary(out)
    hits, queries = independent_hit_tokens(lines, 16)
    pc = s["prefix_cache"]
    check(pc["queries_tokens"] == queries, f"queries {pc['queries_tokens']} vs {queries}")
    check(pc["hits_tokens"] == hits, f"hits {pc['hits_tokens']} vs {hits}")
    check(pc["evicted_blocks"] == 0, "an unbounded cache evicted")
    check(abs(pc["hit_rate"] - hits / queries) < 1e-12, "hit_rate")
    # requests.csv: each request's cached tokens, in the trace's order.
    reqs = read_csv(os.path.join(out, "requests.csv"))
    check(sum(int(r["cached_tokens"]) for r in reqs) == hits, "cached_tokens do not sum to the hits")
    its = read_csv(os.path.join(out, "iterations.csv"))
    check(sum(int(r["prefix_hit_tokens"]) for r in its) == hits, "prefix_hit_tokens do not sum to the hits")
    check(0 < hits < queries, f"{hits} hits of {queries}: the trace shares its system prompt at least")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
