#!/usr/bin/python3
"""End-to-end tests of `--device cuda[:N]` on run, calibrate and validate.

Run one case:   cuda_cli_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: cuda_cli_test.py --list

Where no usable GPU is present (no nvidia-smi listing a compute capability
>= 9.0, CUDA_VISIBLE_DEVICES empty, or a build without the CUDA backend),
each command must exit 2 with one message naming the device and why, and
create nothing. Where one is, the same commands must succeed, and their
outputs are checked: the cases then test the GPU path end to end.
"""

import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, load_summary, run_case_from_argv  # noqa: E402

# What require_device says when the device cannot be used
# (kernels/cuda/cuda_decoder.cpp, kernels/cuda_plugin/cuda_loader.cpp).
NO_GPU_REASONS = ["no CUDA device is visible", "no GPU with a CUDA driver", "no usable CUDA device",
                  "this build has no CUDA backend"]

# A small real run: tiny-15m, a handful of short requests.
SMALL_RUN = ["--model", "tiny-15m", "--num-requests", "4", "--rate", "50",
             "--prompt-len", "uniform:8:48", "--output-len", "uniform:4:12", "--seed", "5"]


def gpu_expected():
    """True where nvidia-smi lists a GPU this build targets (sm_90) and CUDA may see it."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    exe = shutil.which("nvidia-smi")
    if not exe:
        return False
    try:
        p = subprocess.run([exe, "--query-gpu=compute_cap", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    if p.returncode != 0:
        return False
    caps = []
    for line in p.stdout.split():
        try:
            caps.append(float(line))
        except ValueError:
            pass
    return any(c >= 9.0 for c in caps)


def expect_no_gpu(ctx, args, device="cuda:0"):
    """Exit 2 naming the device and the reason; returns the message."""
    p = ctx.run(*args)
    check(p.returncode == 2, f"expected exit 2 without a usable GPU, got {p.returncode}")
    check(p.stdout == "", f"expected nothing on stdout, got {p.stdout[:300]!r}")
    check("internal error" not in p.stderr, "reported as an internal error")
    check(f"--device {device}" in p.stderr, f"message does not name --device {device}: {p.stderr!r}")
    check(any(r in p.stderr for r in NO_GPU_REASONS), f"message does not say why: {p.stderr!r}")
    return p.stderr


def no_cuda_backend(ctx):
    """True when this binary was built without the CUDA backend (then nothing can use a GPU).
    Asks for an ordinal no machine here has, so nothing runs either way."""
    p = ctx.run("run", "--device", "cuda:99", *SMALL_RUN)
    check(p.returncode == 2, f"run --device cuda:99: expected exit 2, got {p.returncode}")
    return "this build has no CUDA backend" in p.stderr


def gpu_usable(ctx):
    return gpu_expected() and not no_cuda_backend(ctx)


def check_positive_curve(curve, name):
    check(len(curve["x"]) == len(curve["seconds"]) and curve["x"], f"{name}: empty or ragged")
    check(all(s > 0 for s in curve["seconds"]), f"{name}: a time <= 0")


CASES, case = case_registry()


@case
def calibrate_cuda_quick(ctx):
    out = ctx.path("sub", "cuda.json")
    args = ["calibrate", "--device", "cuda", "--model", "tiny-15m", "--quick", "--out", out]
    if not gpu_usable(ctx):
        expect_no_gpu(ctx, args)
        check(not os.path.exists(ctx.path("sub")), "the output folder was created before the device was checked")
        return
    p = ctx.ok(*args)
    check("cuda:0" in p.stdout, "the summary does not name the device")
    with open(out) as f:
        profile = json.load(f)
    check(profile["device"]["kind"] == "cuda", f"device.kind {profile['device']['kind']!r}")
    check(profile["device"]["description"].startswith("cuda:0 "), "device.description")
    check(profile["dtype"] == "bf16", f"dtype {profile['dtype']!r}")
    tables = profile["tables"]
    for name in ["gemm_qkv", "gemm_o", "gemm_gate_up", "gemm_down", "elementwise", "lm_head", "sampling"]:
        check_positive_curve(tables[name], name)
    raw = out.replace(".json", ".benchmarks.json")
    with open(raw) as f:
        benchmarks = json.load(f)["benchmarks"]
    check(all(len(b["repetitions_s"]) == 3 for b in benchmarks), "quick mode keeps 3 repetitions per benchmark")
    # The profile costs a simulation.
    ctx.ok("simulate", "--quiet", "--profile", out, "--num-requests", "20")


@case
def validate_cuda_quick(ctx):
    out = ctx.path("validate")
    args = ["validate", "--device", "cuda", "--quiet", *SMALL_RUN, "--out", out]
    if not gpu_usable(ctx):
        expect_no_gpu(ctx, args)
        check(not os.path.exists(out), "the output folder was created before the device was checked")
        return
    ctx.ok(*args)
    with open(os.path.join(out, "report.json")) as f:
        r = json.load(f)
    check(r["config"]["device"]["kind"] == "cuda", "the real run was not on cuda")
    check(r["host_drift"] == {"mode": "off"}, f"host drift on cuda: {r['host_drift']}")
    check(isinstance(r["iteration_mape"]["all"], (int, float)), "no iteration MAPE")
    with open(os.path.join(out, "profile.json")) as f:
        check(json.load(f)["device"]["kind"] == "cuda", "the quick calibration was not on cuda")


@case
def run_cuda_device(ctx):
    out = ctx.path("run")
    if not gpu_usable(ctx):
        expect_no_gpu(ctx, ["run", "--device", "cuda", *SMALL_RUN, "--out", out])
        check(not os.path.exists(out), "run wrote outputs without a device")
    else:
        ctx.ok("run", "--device", "cuda", "--quiet", *SMALL_RUN, "--out", out)
        s = load_summary(out)
        check(s["config"]["device"]["kind"] == "cuda", f"config.device {s['config']['device']}")
        check(s["requests"]["completed"] == 4, "not every request completed")
    # An ordinal no machine here has: refused everywhere, naming it.
    p = ctx.run("run", "--device", "cuda:99", *SMALL_RUN)
    check(p.returncode == 2 and "--device cuda:99" in p.stderr, f"cuda:99: exit {p.returncode}, {p.stderr!r}")


CUDA_LIBRARIES = ("libcudart", "libcublas", "libservesim_cuda")


def loaded_libraries(ctx, *args):
    """The shared objects the dynamic loader maps while servesim runs ARGS (LD_DEBUG=files)."""
    env = dict(os.environ, LD_DEBUG="files")
    p = subprocess.run([ctx.servesim, *args], capture_output=True, text=True, timeout=120, env=env)
    print(f"$ LD_DEBUG=files {ctx.servesim} {' '.join(args)}\n  -> exit {p.returncode}")
    return p, [line for line in p.stderr.splitlines() if "file=" in line]


@case
def cuda_libraries_loaded_only_for_cuda(ctx):
    # simulate, sweep and capacity never map the CUDA runtime, cuBLAS or the
    # backend's module (kernels/cuda_plugin/), in a CUDA build too.
    os.makedirs(ctx.work_dir, exist_ok=True)
    commands = [["simulate", "--quiet", "--num-requests", "50", "--out", ctx.path("sim")],
                ["sweep", "--quiet", "--grid", "max-num-seqs=8,16", "--out", ctx.path("sweep"), "--", "--num-requests", "20"],
                ["capacity", "--num-requests", "40", "--seeds", "1", "--slo-ttft", "1", "--out", ctx.path("capacity")],
                ["run", "--device", "cpu", "--quiet", *SMALL_RUN, "--out", ctx.path("run_cpu")]]
    for args in commands:
        p, files = loaded_libraries(ctx, *args)
        check(p.returncode == 0, f"{args[0]} failed: {p.stderr[-1500:]}")
        loaded = [line for line in files if any(lib in line for lib in CUDA_LIBRARIES)]
        check(not loaded, f"{args[0]} loaded CUDA libraries: {loaded[:3]}")
        check(files, f"{args[0]}: LD_DEBUG listed nothing (is the test seeing the loader?)")
    # A CUDA device opens the module (and, through it, the CUDA runtime):
    # the check above can see a load.
    if no_cuda_backend(ctx):
        return
    p, files = loaded_libraries(ctx, "calibrate", "--device", "cuda:99", "--model", "tiny-15m", "--quick",
                                "--out", ctx.path("never.json"))
    check(p.returncode == 2 and "--device cuda:99" in p.stderr, f"cuda:99: exit {p.returncode}")
    check(any("libservesim_cuda" in line for line in files), "a CUDA device did not open the backend's module")
    check(any("libcudart" in line for line in files), "the backend's module did not bring the CUDA runtime")


@case
def cuda_device_flag_errors(ctx):
    # Malformed device names: exit 2 naming --device and the value, GPU or not.
    for command in (["run"], ["calibrate", "--out", ctx.path("x.json")], ["validate", "--out", ctx.path("v")]):
        for device in ["gpu", "cuda:x", "cuda:-1", "cuda:", "CUDA"]:
            expect_input_error(ctx, [*command, "--device", device], ["--device", f"'{device}'"])
    # Options are checked before the device: the flag is named, GPU or not.
    expect_input_error(ctx, ["calibrate", "--device", "cuda", "--max-num-batched-tokens", "20000",
                             "--out", ctx.path("x.json")], ["--max-num-batched-tokens", "16384"])
    check(not os.path.exists(ctx.path("x.json")), "calibrate wrote a profile for bad input")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
