#!/usr/bin/python3
"""--quantization and --kv-cache-dtype in `servesim simulate`, `models` and
`hardware`, and --dtype with them in the CPU decoder (run, calibrate,
validate): what a run records, what the dtypes change, and the refusals.

Run one case:   quantization_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: quantization_test.py --list
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, load_summary, run_case_from_argv  # noqa: E402

CASES, case = case_registry()


WORKLOAD = ["--num-requests", "200", "--rate", "4", "--prompt-len", "fixed:512", "--output-len", "fixed:128",
            "--seed", "3"]


def simulate(ctx, name, *flags):
    out = ctx.path(name)
    ctx.simulate("--model", "llama-3.1-8b", "--hardware", "h200", *WORKLOAD, *flags, "--out", out)
    return load_summary(out)


@case
def quantization_simulate(ctx):
    base = simulate(ctx, "bf16")
    w4 = simulate(ctx, "w4a16", "--quantization", "w4a16")
    fp8 = simulate(ctx, "fp8", "--quantization", "fp8", "--kv-cache-dtype", "fp8")
    model = w4["config"]["model"]
    check(model["quantization"] == {"quantization": "w4a16", "kv_cache_dtype": "auto", "group_size": 128},
          f"config.model.quantization: {model['quantization']}")
    check(base["config"]["model"]["quantization"]["quantization"] == "none", "the default is not recorded")
    # Freed weight memory becomes KV blocks; an fp8 KV cache doubles them and more.
    blocks = {n: s["config"]["scheduler"]["num_gpu_blocks"] for n, s in
              (("bf16", base), ("w4a16", w4), ("fp8", fp8))}
    check(blocks["bf16"] < blocks["w4a16"], f"KV blocks {blocks}")
    check(blocks["fp8"] > 2 * blocks["bf16"], f"KV blocks {blocks}")
    # A light load decodes small batches: int4 weights stream a quarter of the
    # bytes, so TPOT drops by more than half; fp8 by a third or so.
    tpot = {n: s["tpot_s"]["p50"] for n, s in (("bf16", base), ("w4a16", w4), ("fp8", fp8))}
    check(tpot["w4a16"] < 0.5 * tpot["bf16"], f"TPOT P50 {tpot}")
    check(0.5 * tpot["bf16"] < tpot["fp8"] < 0.85 * tpot["bf16"], f"TPOT P50 {tpot}")
    described = fp8["config"]["cost_model"]
    check(described["quantization"]["kv_cache_dtype"] == "fp8_e4m3", f"cost_model: {described}")
    check(described["quantized_efficiency"]["decode_attention"]["memory"] == 0.7, f"cost_model: {described}")


@case
def quantization_errors(ctx):
    expect_input_error(ctx, ["simulate", "--quantization", "nf4"], ["--quantization 'nf4'", "w4a16"])
    expect_input_error(ctx, ["simulate", "--kv-cache-dtype", "int4"], ["--kv-cache-dtype 'int4'", "4-bit"])
    expect_input_error(ctx, ["simulate", "--hardware", "a100-80gb", "--quantization", "fp8"],
                       ["a100-80gb has no FP8 tensor cores"])
    # A hardware JSON without fp8_tflops has none; with it, fp8 runs.
    os.makedirs(ctx.work_dir, exist_ok=True)
    path = ctx.path("gpu.json")
    with open(path, "w") as f:
        f.write('{"name": "mine", "bf16_tflops": 400, "memory_bandwidth_gbps": 2000, "memory_gb": 80}')
    expect_input_error(ctx, ["simulate", "--hardware", path, "--quantization", "fp8"], ["mine has no FP8"])
    with open(path, "w") as f:
        f.write('{"name": "mine", "bf16_tflops": 400, "memory_bandwidth_gbps": 2000, "memory_gb": 80, '
                '"fp8_tflops": -1}')
    expect_input_error(ctx, ["simulate", "--hardware", path], [path, "fp8_tflops"])
    with open(path, "w") as f:
        f.write('{"name": "mine", "bf16_tflops": 400, "memory_bandwidth_gbps": 2000, "memory_gb": 80, '
                '"fp8_tflops": 800}')
    ctx.simulate("--hardware", path, "--quantization", "fp8", "--num-requests", "20", "--out", ctx.path("mine"))


RUN = ["--model", "tiny-15m", "--num-requests", "6", "--rate", "20", "--prompt-len", "fixed:32",
       "--output-len", "fixed:8", "--kv-cache-memory", "64MiB", "--warm-up-tokens", "0", "--quiet"]


@case
def quantization_cpu_decoder(ctx):
    # The CPU decoder serves bf16, w8a16 and an int8 KV cache; run records them and sizes the KV cache by them.
    fp32 = ctx.path("fp32")
    ctx.ok("run", *RUN, "--out", fp32)
    quant = ctx.path("quant")
    ctx.ok("run", *RUN, "--dtype", "bfloat16", "--quantization", "w8a16", "--kv-cache-dtype", "int8", "--out", quant)
    a, b = load_summary(fp32)["config"], load_summary(quant)["config"]
    check(a["precision"] == {"dtype": "fp32", "quantization": "none", "kv_cache_dtype": "auto"},
          f"fp32 precision: {a['precision']}")
    check(b["precision"] == {"dtype": "bf16", "quantization": "w8a16", "kv_cache_dtype": "int8"},
          f"quantized precision: {b['precision']}")
    check("linear int8, embedding bf16, kv int8" in b["device"]["description"], f"device: {b['device']}")
    # tiny-15m: int8 linear layers and a bf16 embedding are 1/4 and 1/2 of fp32's bytes (plus scales).
    ratio = b["weights"]["bytes"] / a["weights"]["bytes"]
    check(0.25 < ratio < 0.5, f"weight bytes {b['weights']['bytes']} / {a['weights']['bytes']} = {ratio}")
    # The same memory holds 4 dh / (dh + 4) times the blocks in int8 (dh = 48: 3.69x).
    blocks = b["scheduler"]["num_gpu_blocks"] / a["scheduler"]["num_gpu_blocks"]
    check(abs(blocks - 4 * 48 / 52) < 0.01, f"KV blocks {b['scheduler']['num_gpu_blocks']} vs "
                                            f"{a['scheduler']['num_gpu_blocks']}")
    check(b["scheduler"]["kv_cache_bytes"] <= 64 * 2**20 < 1.01 * b["scheduler"]["kv_cache_bytes"],
          f"kv_cache_bytes {b['scheduler']['kv_cache_bytes']}")


@case
def quantization_refused_by_the_decoders(ctx):
    # What a decoder does not build is refused by name, before anything is served.
    expect_input_error(ctx, ["run", *RUN, "--quantization", "fp8", "--out", ctx.path("run")],
                       ["--quantization fp8", "CPU decoder builds none and w8a16", "servesim simulate"])
    expect_input_error(ctx, ["run", *RUN, "--kv-cache-dtype", "fp8", "--out", ctx.path("run")],
                       ["--kv-cache-dtype fp8_e4m3", "auto (the --dtype) and int8"])
    expect_input_error(ctx, ["validate", *RUN, "--quantization", "w4a16", "--out", ctx.path("validate")],
                       ["--quantization w4a16"])
    expect_input_error(ctx, ["run", *RUN, "--device", "cuda", "--quantization", "w8a16", "--out", ctx.path("run")],
                       ["CUDA decoder builds bf16"])
    expect_input_error(ctx, ["run", *RUN, "--dtype", "float16", "--out", ctx.path("run")], ["--dtype 'float16'"])
    expect_input_error(ctx, ["run", *RUN, "--quantization", "nf4", "--out", ctx.path("run")],
                       ["--quantization 'nf4'"])
    expect_input_error(ctx, ["calibrate", "--model", "tiny-15m", "--quantization", "fp8", "--out",
                             ctx.path("p.json")], ["--quantization fp8"])


@case
def quantization_profiles(ctx):
    # A profile holds one precision's tables: it records it, simulate takes it, and another is refused.
    profile = ctx.path("p.json")
    ctx.ok("calibrate", "--quick", "--quiet", "--model", "tiny-15m", "--quantization", "w8a16", "--kv-cache-dtype",
           "int8", "--out", profile)
    with open(profile) as f:
        p = json.load(f)
    check(p["dtype"] == "fp32" and p["quantization"] == {"quantization": "w8a16", "kv_cache_dtype": "int8"},
          f"profile precision: {p['dtype']} {p.get('quantization')}")
    out = ctx.path("sim")
    ctx.simulate("--profile", profile, "--num-requests", "10", "--out", out)
    s = load_summary(out)
    check(s["config"]["model"]["quantization"]["quantization"] == "w8a16", f"model: {s['config']['model']}")
    check("int8 KV cache" in s["config"]["scheduler"]["kv_cache_rule"], f"scheduler: {s['config']['scheduler']}")
    expect_input_error(ctx, ["simulate", "--profile", profile, "--quantization", "none", "--kv-cache-dtype", "auto",
                             "--out", ctx.path("sim2")],
                       [profile, "fp32, w8a16 weights, int8 KV cache", "calibrate that precision"])
    # validate at another precision than the profile's: refused before serving.
    expect_input_error(ctx, ["validate", *RUN, "--profile", profile, "--out", ctx.path("v1")],
                       [profile, "--quantization none"])
    expect_input_error(ctx, ["validate", *RUN, "--profile", profile, "--dtype", "bfloat16", "--quantization", "w8a16",
                             "--kv-cache-dtype", "int8", "--out", ctx.path("v2")],
                       [profile, "serves bf16, w8a16 weights, int8 KV cache", "--dtype bfloat16"])


@case
def quantization_listings(ctx):
    p = ctx.ok("models")
    header = p.stdout.splitlines()[0].split()
    check("8-bit" in header and "w4a16" in header, f"models header: {header}")
    row = next(line.split() for line in p.stdout.splitlines() if line.startswith("llama-3.1-8b "))
    # weights GB, 8-bit GB, w4a16 GB, KV KiB/token, KV 8-bit: the last five columns.
    bf16, w8, w4, kv, kv8 = (float(x) for x in row[-5:])
    check(abs(bf16 - 16.06) < 0.01 and abs(w8 - 9.09) < 0.02 and 5.5 < w4 < 5.8, f"llama-3.1-8b: {row}")
    check(kv == 128.0 and kv8 == 64.0, f"llama-3.1-8b KV: {row}")
    p = ctx.ok("hardware")
    rows = {line.split()[0]: line.split() for line in p.stdout.splitlines() if line.strip()}
    check(rows["h200"][2] == "1979.0" and rows["h200"][3] == "1979.0", f"h200: {rows['h200']}")
    check(rows["a100-80gb"][2] == "-", f"a100-80gb: {rows['a100-80gb']}")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
