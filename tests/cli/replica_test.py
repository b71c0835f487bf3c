#!/usr/bin/python3
"""--num-replicas and --router in `servesim simulate` (and capacity): what a
cluster run writes (the replica of each request and iteration, each
replica's metrics), one replica byte for byte as without the flags, and the
bad flags.

Run one case:   replica_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: replica_test.py --list
"""

import csv
import filecmp
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, load_summary, run_case_from_argv  # noqa: E402

CASES, case = case_registry()


def simulate(ctx, name, *flags):
    out = ctx.path(name)
    ctx.simulate("--num-requests", "300", "--seed", "4", *flags, "--out", out)
    return load_summary(out), out


@case
def replicas_one_unchanged(ctx):
    _, plain = simulate(ctx, "plain", "--rate", "3")
    _, one = simulate(ctx, "one", "--rate", "3", "--num-replicas", "1")
    for name in ("summary.json", "requests.csv", "iterations.csv"):
        check(filecmp.cmp(os.path.join(plain, name), os.path.join(one, name), shallow=False),
              f"{name} differs with --num-replicas 1")


@case
def replicas_outputs(ctx):
    s, out = simulate(ctx, "four", "--rate", "12", "--num-replicas", "4", "--router", "least-requests")
    rep = s["replicas"]
    check(rep["num_replicas"] == 4 and rep["router"] == "least-requests", f"{rep}")
    check(s["config"]["replicas"]["num_replicas"] == 4, "config.replicas")
    with open(os.path.join(out, "requests.csv")) as f:
        rows = list(csv.DictReader(f))
    counts = [sum(1 for r in rows if r["replica"] == str(j)) for j in range(4)]
    check(counts == [p["requests"]["submitted"] for p in rep["per_replica"]], f"{counts} vs per_replica")
    check(all(c > 40 for c in counts), f"least-requests left a replica idle: {counts}")
    with open(os.path.join(out, "iterations.csv")) as f:
        its = list(csv.DictReader(f))
    check({r["replica"] for r in its} == {"0", "1", "2", "3"}, "iterations.csv names no replica")
    starts = [float(r["start_s"]) for r in its]
    check(starts == sorted(starts), "iterations.csv is not in start order")
    total = sum(p["output_tokens_per_s"] for p in rep["per_replica"])
    check(abs(total - s["throughput"]["output_tokens_per_s"]) < 1e-6 * total, "per-replica throughput does not add up")
    blocks = sum(p["kv_cache"]["num_gpu_blocks"] for p in rep["per_replica"])
    check(blocks == s["kv_cache"]["num_gpu_blocks"], "the cluster's KV blocks are not the replicas' sum")
    # Prefix affinity keeps a shared prefix's requests where it is cached.
    shared = ["--rate", "8", "--shared-prefix-groups", "4", "--shared-prefix-len", "2048", "--prompt-len", "256"]
    aff, _ = simulate(ctx, "affinity", *shared, "--num-replicas", "4", "--router", "prefix-affinity")
    rr, _ = simulate(ctx, "round_robin", *shared, "--num-replicas", "4", "--router", "round-robin")
    check(aff["prefix_cache"]["hit_rate"] >= rr["prefix_cache"]["hit_rate"],
          f"prefix-affinity hit rate {aff['prefix_cache']['hit_rate']} below round-robin's "
          f"{rr['prefix_cache']['hit_rate']}")


@case
def replicas_bad_flags(ctx):
    expect_input_error(ctx, ["simulate", "--num-replicas", "0"], ["--num-replicas must be in 1 .. 4096"])
    expect_input_error(ctx, ["simulate", "--num-replicas", "2", "--router", "sticky"], ["--router 'sticky'"])
    expect_input_error(ctx, ["simulate", "--router", "random"], ["--router applies with --num-replicas > 1"])
    expect_input_error(ctx, ["simulate", "--num-replicas", "2", "--router-balance-abs-threshold", "4"],
                       ["applies with --router prefix-affinity"])
    expect_input_error(ctx, ["simulate", "--num-replicas", "2", "--router", "prefix-affinity",
                             "--router-balance-rel-threshold", "0.5"], ["must be >= 1"])


@case
def replicas_of_pipeline_groups(ctx):
    # Two replicas of a PP 2 group (4 GPUs each with TP 2) behind least-requests:
    # the summary, requests.csv and iterations.csv name the replica, not the engine.
    out = ctx.path("pp_replicas")
    flags = ["--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tensor-parallel-size", "2",
             "--pipeline-parallel-size", "2", "--num-requests", "200", "--rate", "4", "--seed", "3"]
    ctx.ok("simulate", "-q", *flags, "--num-replicas", "2", "--router", "least-requests", "--out", out)
    s = load_summary(out)
    per = s["replicas"]["per_replica"]
    check(len(per) == 2, f"{len(per)} replicas in the summary")
    check(s["requests"]["completed"] == 200, "not every request completed")
    with open(os.path.join(out, "requests.csv")) as f:
        replicas = {row["replica"] for row in csv.DictReader(f)}
    check(replicas == {"0", "1"}, f"requests.csv replicas {sorted(replicas)}")
    with open(os.path.join(out, "iterations.csv")) as f:
        rows = list(csv.DictReader(f))
    check({row["replica"] for row in rows} == {"0", "1"}, "iterations.csv does not name both replicas")
    starts = [float(row["start_s"]) for row in rows]
    check(starts == sorted(starts), "iterations.csv is not in start order")
    # One group at half the rate serves each request about as the two do.
    single = ctx.path("pp_one")
    half = [*flags[:-6], "--num-requests", "100", "--rate", "2", "--seed", "3"]
    ctx.ok("simulate", "-q", *half, "--out", single)
    one = load_summary(single)
    for metric in ("tpot_s",):
        a, b = one[metric]["p50"], s[metric]["p50"]
        check(abs(b - a) <= 0.15 * a, f"{metric} p50: two replicas {b:.4g} against one {a:.4g}")


@case
def capacity_fleet_of_replicas(ctx):
    # Two replicas behind round-robin serve about twice one replica's rate.
    slo = ["--slo-ttft", "1s", "--slo-tpot", "50ms", "--num-requests", "400", "--seeds", "1", "--json", "-q"]
    import json
    one = json.loads(ctx.ok("capacity", *slo).stdout)
    two = json.loads(ctx.ok("capacity", *slo, "--num-replicas", "2").stdout)
    ratio = two["max_request_rate"] / one["max_request_rate"]
    check(1.6 < ratio < 2.4, f"two replicas serve {ratio:.2f}x one")
    # --target-rate counts groups of the searched two replicas, each of TP x PP GPUs.
    target = 3 * two["max_request_rate"] + 0.1
    fleet = json.loads(ctx.ok("capacity", *slo, "--num-replicas", "2", "--tensor-parallel-size", "2",
                              "--target-rate", repr(target)).stdout)["fleet"]
    check(fleet["replicas_per_group"] == 2 and fleet["replicas"] % 2 == 0, f"fleet {fleet}")
    check(fleet["gpus"] == fleet["replicas"] * 2 == fleet["replicas"] * fleet["gpus_per_replica"], f"fleet {fleet}")


if __name__ == "__main__":
    run_case_from_argv(CASES, __doc__)
