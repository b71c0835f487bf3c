#!/usr/bin/python3
"""--tensor-parallel-size, --pipeline-parallel-size and --interconnect in
`servesim simulate` and `calibrate`, and `servesim capacity`: what a run
records, TP 1 byte for byte as without the flags, the memory refusals and
the bad flags.

Run one case:   parallel_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: parallel_test.py --list
"""

import csv
import filecmp
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, load_summary, run_case_from_argv  # noqa: E402

CASES, case = case_registry()


WORKLOAD = ["--num-requests", "200", "--rate", "2", "--seed", "5"]
SLO = ["--slo-ttft", "1s", "--slo-tpot", "50ms"]


def simulate(ctx, name, *flags):
    out = ctx.path(name)
    ctx.simulate(*WORKLOAD, *flags, "--out", out)
    return load_summary(out)


@case
def parallel_tp1_unchanged(ctx):
    # --tensor-parallel-size 1 --pipeline-parallel-size 1 writes what no flag does, byte for byte.
    simulate(ctx, "plain", "--model", "llama-3.1-8b")
    simulate(ctx, "tp1", "--model", "llama-3.1-8b", "--tensor-parallel-size", "1", "--pipeline-parallel-size", "1")
    for name in ("summary.json", "requests.csv", "iterations.csv"):
        check(filecmp.cmp(ctx.path("plain", name), ctx.path("tp1", name), shallow=False), f"{name} differs at TP 1")
    check("parallel" not in load_summary(ctx.path("plain")), "summary.json gained 'parallel' on one GPU")


@case
def parallel_70b_layouts(ctx):
    expect_input_error(ctx, ["simulate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm"],
                       ["llama-3.1-70b weights (141.1 GB)", "--tensor-parallel-size 2 would leave room"])
    tp2 = simulate(ctx, "tp2", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tensor-parallel-size", "2")
    tp4 = simulate(ctx, "tp4", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tensor-parallel-size", "4")
    p2, p4 = tp2["parallel"], tp4["parallel"]
    check(p2["layout"] == "TP 2" and p2["world_size"] == 2, f"parallel: {p2}")
    check(p4["rank_shape"]["attention_heads"] == 16 and p4["rank_shape"]["kv_heads"] == 2, f"rank shape {p4}")
    mem2, mem4 = p2["memory_per_gpu"], p4["memory_per_gpu"]
    check(mem2["total_bytes"] <= 0.9 * 80e9 and mem4["total_bytes"] <= 0.9 * 80e9, "over 90% of 80 GB per GPU")
    check(abs(mem4["weights_bytes"] * 2 - mem2["weights_bytes"]) < 0.01 * mem2["weights_bytes"], "weights per GPU")
    check(tp4["config"]["scheduler"]["num_gpu_blocks"] > 10 * tp2["config"]["scheduler"]["num_gpu_blocks"],
          "TP 4 frees far more KV blocks than TP 2")
    # Communication is a share of the busy time, and the interconnect is named.
    check(0 < p4["communication_share"] < 0.5, f"communication share {p4['communication_share']}")
    comm = tp4["config"]["cost_model"]["parallel"]["communication"]
    check(comm["interconnect"]["name"] == "nvlink4" and comm["all_reduces_per_forward"] == 161, f"{comm}")
    check(tp4["tpot_s"]["p50"] < tp2["tpot_s"]["p50"], "TP 4 decodes faster than TP 2")
    # PP 2 x TP 2: four GPUs, 40 layers a stage, two virtual engines.
    pp = simulate(ctx, "tp2pp2", "--model", "llama-3.1-70b", "--hardware", "h100-sxm", "--tensor-parallel-size", "2",
                  "--pipeline-parallel-size", "2")
    check(pp["parallel"]["rank_shape"]["layers_per_stage"] == 40 and pp["parallel"]["virtual_engines"]["engines"] == 2,
          f"{pp['parallel']}")
    check(pp["requests"]["completed"] == 200, "PP lost requests")


@case
def parallel_interconnect_table(ctx):
    table = os.path.join(ctx.source_dir, "tests", "data", "interconnect", "all_reduce_perf_8xh100.txt")
    # The measured table covers 8 ranks only: TP 2 is refused naming what it covers.
    expect_input_error(ctx, ["simulate", "--tensor-parallel-size", "2", "--interconnect", table], ["8"])
    s = simulate(ctx, "measured", "--model", "llama-3.1-70b", "--tensor-parallel-size", "8", "--interconnect", table)
    check(s["config"]["cost_model"]["parallel"]["communication"]["interconnect"]["measured"] is True, "not measured")
    # nccl-tests output has no point-to-point figures: pipeline stages take the hardware's.
    pp = simulate(ctx, "measured_pp", "--model", "llama-3.1-70b", "--tensor-parallel-size", "8",
                  "--pipeline-parallel-size", "2", "--interconnect", table)
    link = pp["config"]["cost_model"]["parallel"]["communication"]["interconnect"]
    check("p2p (pipeline stages) from the nvlink4 preset of h200" in link["source"], f"{link['source']}")
    check(abs(link["p2p"]["bandwidth_gbps"] - 370) < 1e-9, f"{link['p2p']}")
    pcie = simulate(ctx, "pcie", "--model", "llama-3.1-70b", "--tensor-parallel-size", "8", "--interconnect", "pcie4")
    check(pcie["parallel"]["communication_share"] > s["parallel"]["communication_share"], "PCIe costs less than NVLink")
    expect_input_error(ctx, ["simulate", "--interconnect", "nvlink4"], ["--interconnect applies with"])
    expect_input_error(ctx, ["simulate", "--tensor-parallel-size", "2", "--interconnect", "infiniband"],
                       ["infiniband"])


@case
def parallel_hardware_interconnect(ctx):
    rows = {line.split()[0]: line.split() for line in ctx.ok("hardware").stdout.splitlines() if line.strip()}
    expected = {"h100-sxm": "nvlink4", "h200": "nvlink4", "a100-80gb": "nvlink3", "b200": "nvlink5",
                "l40s": "pcie4", "rtx-4090": "pcie4-consumer"}
    for name, link in expected.items():
        check(rows[name][7] == link, f"{name}: {rows[name]}")
    check("interconnect: NVLink 4" in ctx.ok("hardware", "--sources").stdout, "--sources names no interconnect")


@case
def parallel_hardware_json_interconnect(ctx):
    os.makedirs(ctx.work_dir, exist_ok=True)
    gpu = ctx.path("gpu.json")
    spec = '{"name": "mine", "bf16_tflops": 400, "memory_bandwidth_gbps": 2000, "memory_gb": 80'
    with open(gpu, "w") as f:
        f.write(spec + "}")
    flags = ["--model", "llama-3.1-8b", "--hardware", gpu, "--tensor-parallel-size", "2"]
    assumed = simulate(ctx, "assumed", *flags)
    link = assumed["config"]["cost_model"]["parallel"]["communication"]["interconnect"]
    check(link["name"] == "pcie4" and "assumed: mine names no interconnect" in link["description"], f"{link}")
    with open(gpu, "w") as f:
        f.write(spec + ', "interconnect": "nvlink4"}')
    named = simulate(ctx, "named", *flags)
    check(named["config"]["cost_model"]["parallel"]["communication"]["interconnect"]["name"] == "nvlink4", "not nvlink4")
    check(named["parallel"]["communication_share"] < assumed["parallel"]["communication_share"], "NVLink not cheaper")
    with open(gpu, "w") as f:
        f.write(spec + ', "interconnect": "ethernet"}')
    expect_input_error(ctx, ["simulate", *flags], [gpu, "'interconnect' is 'ethernet'"])


@case
def parallel_bad_flags(ctx):
    expect_input_error(ctx, ["simulate", "--tensor-parallel-size", "3"], ["--tensor-parallel-size 3", "32 attention heads"])
    expect_input_error(ctx, ["simulate", "--pipeline-parallel-size", "5"], ["--pipeline-parallel-size 5", "32 layers"])
    expect_input_error(ctx, ["simulate", "--tensor-parallel-size", "0"], ["--tensor-parallel-size must be in 1 .. 64"])
    expect_input_error(ctx, ["simulate", "--model", "llama-3.1-70b", "--tensor-parallel-size", "16"],
                       ["across nodes is not modelled"])
    expect_input_error(ctx, ["simulate", "--tensor-parallel-size", "two"], ["tensor-parallel-size"])
    expect_input_error(ctx, ["simulate", "--pipeline-parallel-size", "2", "--num-speculative-tokens", "2",
                             "--self-draft-layers", "4", "--acceptance-rate", "0.7"], ["pipeline-parallel-size > 1"])


@case
def capacity_answer_and_fleet(ctx):
    out = ctx.path("cap")
    p = ctx.ok("capacity", "--model", "llama-3.1-8b", "--num-requests", "300", *SLO, "--seeds", "2", "--jobs", "2",
               "--target-rate", "100", "--gpu-hour-price", "3", "--out", out, "--quiet")
    with open(os.path.join(out, "capacity.json")) as f:
        c = json.load(f)
    rate = c["max_request_rate"]
    check(c["spread"]["min"] <= rate <= c["spread"]["max"], f"spread {c['spread']} around {rate}")
    check(c["limit"]["slo"] in ("ttft", "tpot", "e2e", "rejected") and c["limit"]["bound_by"] in ("compute", "kv_capacity"),
          f"limit {c['limit']}")
    check(c["at_capacity"]["attainment"] >= 0.99, f"attainment at capacity {c['at_capacity']['attainment']}")
    fleet = c["fleet"]
    # The fewest replicas whose capacity covers 100 req/s.
    check(fleet["replicas"] >= 100 / rate > fleet["replicas"] - 1, f"fleet {fleet}")
    check(abs(fleet["cost_per_hour"] - 3 * fleet["gpus"]) < 1e-9, f"fleet {fleet}")
    check("max rate" in p.stdout and "fleet" in p.stdout, f"stdout: {p.stdout}")
    # The answer's rate, simulated directly: summary.json's slo_attainment agrees with capacity's.
    seed = c["median_seed"]
    sim = ctx.path("at_rate")
    ctx.simulate("--model", "llama-3.1-8b", "--num-requests", "300", "--rate", repr(rate), "--seed", str(seed), *SLO,
                 "--out", sim)
    s = load_summary(sim)
    check(abs(s["slo_attainment"] - c["at_capacity"]["attainment"]) < 1e-12,
          f"slo_attainment {s['slo_attainment']} vs {c['at_capacity']['attainment']}")
    # --json prints the same object.
    j = json.loads(ctx.ok("capacity", "--model", "llama-3.1-8b", "--num-requests", "300", *SLO, "--seeds", "2",
                          "--json", "--quiet").stdout)
    check(j["max_request_rate"] == rate, "--json and --out disagree (or --jobs changed the answer)")


@case
def capacity_search_grid(ctx):
    out = ctx.path("search")
    # TTFT 2 s: one H200 prefills 70B's longest prompts (8k tokens) in fp8 in about 1 s.
    ctx.ok("capacity", "--search", "--model", "llama-3.1-70b", "--num-requests", "150", "--slo-ttft", "2s",
           "--slo-tpot", "50ms", "--seeds", "1",
           "--tolerance", "0.05", "--search-tensor-parallel-size", "1,4", "--search-quantization", "none,fp8",
           "--out", out, "--quiet")
    with open(os.path.join(out, "search.csv")) as f:
        rows = list(csv.DictReader(f))
    check(len(rows) == 4, f"{len(rows)} rows")
    bf16_tp1 = rows[0]
    check(bf16_tp1["error"] and "leave no room" in bf16_tp1["error"], f"TP 1 bf16 of 70B should not fit: {bf16_tp1}")
    ok = [r for r in rows if not r["error"]]
    check(len(ok) == 3, f"rows without error: {ok}")
    check(any(r["pareto_tpot"] == "1" for r in ok), "no point on the Pareto front")
    for r in ok:
        check(abs(float(r["rate_per_gpu"]) * int(r["gpus"]) - float(r["max_request_rate"])) <
              1e-4 * float(r["max_request_rate"]), f"rate per GPU {r}")


@case
def capacity_bad_flags(ctx):
    expect_input_error(ctx, ["capacity"], ["at least one SLO"])
    expect_input_error(ctx, ["capacity", "--search", "--search-tensor-parallel-size", "1,2"], ["at least one SLO"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--tolerance", "1e-20"], ["--tolerance"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--slo-attainment", "0"], ["--slo-attainment must be in (0, 1]"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--slo-attainment", "1.2"], ["--slo-attainment"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--arrival", "closed", "--concurrency", "4"],
                       ["--arrival closed has none"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--gpu-hour-price", "2"], ["--gpu-hour-price applies with"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--search-quantization", "fp8"], ["applies with --search"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--search", "--search-tensor-parallel-size", "1,x"],
                       ["'x' is not a positive integer"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--search", "--search-quantization", "none,nf4"],
                       ["--quantization 'nf4'"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1s", "--seeds", "0"], ["--seeds must be in 1 .. 100"])
    # Rejections are the requests' own, the same at every rate: too many, and
    # capacity says so from its first probe, naming the limit they hit.
    expect_input_error(ctx, ["capacity", "--num-requests", "100", "--seeds", "1", "--slo-ttft", "10s",
                             "--max-model-len", "1500"],
                       ["requests are rejected at any rate", "max model length (1500 tokens)", "at most 74.0%"])
    expect_input_error(ctx, ["capacity", "--slo-ttft", "1us", "--num-requests", "20"], ["not met even at"])


@case
def calibrate_tensor_parallel_profile(ctx):
    profile = ctx.path("tp2.json")
    ctx.ok("calibrate", "--quick", "--quiet", "--model", "tiny-15m", "--threads", "1", "--tensor-parallel-size", "2",
           "--out", profile)
    with open(profile) as f:
        p = json.load(f)
    check(p["tensor_parallel_size"] == 2 and p["model"]["num_attention_heads"] == 6, "profile of one rank of TP 2")
    flags = ["--profile", profile, "--num-gpu-blocks", "4000", "--prompt-len", "fixed:64", "--output-len", "fixed:16"]
    s = simulate(ctx, "tp2", *flags)
    check(s["parallel"]["tensor_parallel_size"] == 2, "the profile's TP degree is taken")
    expect_input_error(ctx, ["simulate", *flags, "--tensor-parallel-size", "1"], ["one rank of TP 2, not of TP 1"])
    expect_input_error(ctx, ["calibrate", "--quick", "--model", "tiny-15m", "--tensor-parallel-size", "4",
                             "--out", ctx.path("bad.json")], ["6 attention heads"])


if __name__ == "__main__":
    run_case_from_argv(CASES, __doc__)
