#!/usr/bin/python3
"""End-to-end tests of the `servesim` binary: exit codes, messages, outputs.

Run one case:   cli_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: cli_test.py --list
tests/cli/CMakeLists.txt registers every listed case as its own ctest test.
Expectations are derived from the inputs (the trace file, the flags) and from
the definitions in DESIGN.md, never from earlier output of the program.
"""

import argparse
import csv
import datetime
import json
import math
import os
import shutil
import subprocess
import sys

TIMEOUT_S = 30  # a hang is a failure; every case normally takes well under 5 s
SLOW_TIMEOUT_S = 500  # calibrate and validate: microbenchmarks and real serving

MODEL_PRESETS = ["llama-3.1-8b", "llama-3.1-70b", "llama-3.2-1b", "llama-3.2-3b",
                 "qwen2.5-7b", "mistral-7b", "tinyllama-1.1b"]
HARDWARE_PRESETS = ["h100-sxm", "h200", "a100-80gb"]
PERCENTILE_KEYS = ["mean", "p50", "p90", "p95", "p99"]


class Failure(Exception):
    pass


class Skipped(Exception):
    """The case cannot test what it tests on this machine now (the reason says why): exit 3, which ctest
    reports as skipped."""


def check(condition, message):
    if not condition:
        raise Failure(message)


class Ctx:
    def __init__(self, servesim, source_dir, work_dir):
        self.servesim = servesim
        self.source_dir = source_dir
        self.work_dir = work_dir
        self.models_dir = os.path.join(source_dir, "tests", "data", "models")
        self.code_trace = os.path.join(source_dir, "data", "traces", "azure_code_2023.csv")

    def path(self, *parts):
        return os.path.join(self.work_dir, *parts)

    def run(self, *args):
        cmd = [self.servesim, *args]
        timeout = SLOW_TIMEOUT_S if args and args[0] in ("calibrate", "validate") else TIMEOUT_S
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Failure(f"timed out after {timeout} s: {' '.join(cmd)}")
        print(f"$ {' '.join(cmd)}\n  -> exit {p.returncode}")
        if p.stderr:
            print("  stderr: " + p.stderr.strip()[:2000])
        # A crash is a negative return code (signal); a C++ abort prints this.
        check(p.returncode >= 0, f"killed by signal {-p.returncode}")
        check("terminate called" not in p.stderr, "std::terminate")
        return p

    def ok(self, *args):
        p = self.run(*args)
        check(p.returncode == 0, f"expected exit 0, got {p.returncode}")
        return p

    def simulate(self, *args):
        return self.ok("simulate", "--quiet", *args)


# ---------------------------------------------------------------- helpers

def percentile(sorted_xs, p):
    """Linear interpolation between closest ranks (numpy default, type 7)."""
    h = (len(sorted_xs) - 1) * p / 100.0
    lo = math.floor(h)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (h - lo) * (sorted_xs[hi] - sorted_xs[lo])


def close(a, b, rel=1e-9, abs_=1e-12):
    return abs(a - b) <= max(rel * max(abs(a), abs(b)), abs_)


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def load_summary(out_dir):
    with open(os.path.join(out_dir, "summary.json")) as f:
        return json.load(f)


def check_summary_schema(s, with_goodput):
    for key in ["ttft_s", "tpot_s", "itl_s", "e2e_s"]:
        check(key in s, f"summary lacks {key}")
        d = s[key]
        for k in PERCENTILE_KEYS:
            check(k in d and isinstance(d[k], (int, float)), f"{key} lacks numeric {k}")
        check(d["p50"] <= d["p90"] <= d["p95"] <= d["p99"],
              f"{key} percentiles not ordered: {d}")
        check(d["p50"] >= 0, f"{key}.p50 negative")
    for k in ["submitted", "completed", "rejected"]:
        check(isinstance(s["requests"][k], int), f"requests.{k} missing")
    for k in ["requests_per_s", "output_tokens_per_s"]:
        check(isinstance(s["throughput"][k], (int, float)), f"throughput.{k} missing")
    check(isinstance(s["preemptions"], int) and s["preemptions"] >= 0, "preemptions")
    check(isinstance(s["duration_s"], (int, float)) and s["duration_s"] > 0, "duration_s")
    check("seed" in s["config"], "config lacks seed")
    check(("goodput_requests_per_s" in s) == with_goodput,
          f"goodput_requests_per_s present={'goodput_requests_per_s' in s}, "
          f"expected {with_goodput}")


def expect_input_error(ctx, args, must_mention):
    """Exit status 2, one message naming the problem, nothing on stdout."""
    p = ctx.run(*args)
    check(p.returncode == 2, f"expected exit 2, got {p.returncode}")
    check(p.stdout == "", f"expected nothing on stdout, got {p.stdout[:300]!r}")
    check("internal error" not in p.stderr, "reported as an internal error")
    for text in must_mention:
        check(text in p.stderr, f"message does not mention {text!r}: {p.stderr!r}")


def parse_azure_timestamp(text):
    """'2023-11-16 18:17:03.9799600' -> seconds (float, 100 ns resolution)."""
    whole, _, frac = text.partition(".")
    t = datetime.datetime.strptime(whole, "%Y-%m-%d %H:%M:%S").replace(
        tzinfo=datetime.timezone.utc)
    return t.timestamp() + (float("0." + frac) if frac else 0.0)


# ---------------------------------------------------------------- cases

def case_registry():
    """(CASES, case): the cases of one *_test.py script by name, and the
    decorator that adds a function to them."""
    cases = {}

    def case(fn):
        cases[fn.__name__] = fn
        return fn

    return cases, case


CASES, case = case_registry()


@case
def top_level_help(ctx):
    p = ctx.ok("--help")
    for word in ["simulate", "models", "hardware"]:
        check(word in p.stdout, f"--help does not list {word}")


@case
def simulate_help(ctx):
    p = ctx.ok("simulate", "--help")
    for flag in ["--model", "--hardware", "--rate", "--arrival", "--scheduler", "--out",
                 "--json", "--slo-ttft", "--seed", "--trace"]:
        check(flag in p.stdout, f"simulate --help does not mention {flag}")


@case
def models(ctx):
    p = ctx.ok("models")
    rows = {line.split()[0]: line for line in p.stdout.splitlines() if line.strip()}
    for name in MODEL_PRESETS:
        check(name in rows, f"models does not list {name}")
    # Llama-3.1-8B has 8,030,261,248 parameters (published); the table prints
    # billions with 3 decimals.
    check("8.030" in rows["llama-3.1-8b"].split(), rows["llama-3.1-8b"])


@case
def models_from_config(ctx):
    p = ctx.ok("models", "--model", os.path.join(ctx.models_dir, "llama-3.1-8b"))
    check("8.030" in p.stdout.split(), p.stdout)


@case
def models_config_json_round_trips(ctx):
    # Every preset printed as a config.json reads back as the same model:
    # the same row of the table but for the name (the file's path).
    os.makedirs(ctx.work_dir, exist_ok=True)
    for name in MODEL_PRESETS:
        p = ctx.ok("models", "--model", name, "--config-json")
        config = json.loads(p.stdout)
        check(config["model_type"] in ("llama", "mistral", "qwen2") and config["vocab_size"] > 0, p.stdout)
        path = ctx.path(f"{name}.json")
        with open(path, "w") as f:
            f.write(p.stdout)
        row = lambda out: out.splitlines()[1].split()[1:]  # noqa: E731 (the header, then the model)
        check(row(ctx.ok("models", "--model", path).stdout) == row(ctx.ok("models", "--model", name).stdout),
              f"{name}: the config.json reads back as another model")
    expect_input_error(ctx, ["models", "--config-json"], ["--config-json", "--model"])


@case
def hardware(ctx):
    p = ctx.ok("hardware", "--sources")
    for name in HARDWARE_PRESETS:
        check(any(line.startswith(name + " ") for line in p.stdout.splitlines()),
              f"hardware does not list {name}")
    check("source:" in p.stdout, "--sources prints no sources")


@case
def simulate_outputs(ctx):
    # Every flag at its default (1000 requests, seed 0) but --out.
    out = ctx.path("run")
    p = ctx.ok("simulate", "--out", out)
    check("TTFT" in p.stdout and "TPOT" in p.stdout, "no summary table on stdout")
    for f in ["summary.json", "requests.csv", "iterations.csv"]:
        check(os.path.isfile(os.path.join(out, f)), f"{f} not written")
    s = load_summary(out)
    check_summary_schema(s, with_goodput=False)
    n = 1000
    check(s["config"]["seed"] == 0, f"config.seed {s['config']['seed']} != 0")
    check(s["requests"]["submitted"] == n, f"submitted != {n}")
    check(s["requests"]["completed"] + s["requests"]["rejected"] == n,
          "completed + rejected != submitted")
    check(s["requests"]["completed"] == n, "defaults should complete every request")

    # Recompute the summary from the per-request records.
    reqs = read_csv(os.path.join(out, "requests.csv"))
    check(len(reqs) == n, f"requests.csv has {len(reqs)} rows")
    check(sorted(int(r["id"]) for r in reqs) == list(range(n)), f"ids are not 0..{n - 1}")
    done = [r for r in reqs if r["status"] == "completed"]
    ttft = sorted(float(r["first_token_s"]) - float(r["arrival_s"]) for r in done)
    e2e = sorted(float(r["finish_s"]) - float(r["arrival_s"]) for r in done)
    tpot = sorted((float(r["last_token_s"]) - float(r["first_token_s"])) /
                  (int(r["tokens_emitted"]) - 1) for r in done if int(r["tokens_emitted"]) >= 2)
    for name, xs in [("ttft_s", ttft), ("e2e_s", e2e), ("tpot_s", tpot)]:
        check(close(s[name]["mean"], sum(xs) / len(xs)), f"{name}.mean differs from requests.csv")
        for q in [50, 90, 95, 99]:
            check(close(s[name][f"p{q}"], percentile(xs, q)),
                  f"{name}.p{q} {s[name][f'p{q}']} != {percentile(xs, q)} (type-7 percentile)")
    for r in done:
        check(int(r["tokens_emitted"]) == int(r["output_tokens"]), f"request {r['id']} short")
        check(float(r["arrival_s"]) <= float(r["first_token_s"]) <= float(r["finish_s"]),
              f"request {r['id']} times out of order")
    duration = max(float(r["finish_s"]) for r in done) - min(float(r["arrival_s"]) for r in reqs)
    check(close(s["duration_s"], duration), f"duration_s {s['duration_s']} != {duration}")
    check(close(s["throughput"]["requests_per_s"], n / duration), "requests_per_s")
    out_tokens = sum(int(r["tokens_emitted"]) for r in done)
    check(close(s["throughput"]["output_tokens_per_s"], out_tokens / duration),
          "output_tokens_per_s")

    its = read_csv(os.path.join(out, "iterations.csv"))
    check(len(its) == s["iterations"], f"iterations.csv {len(its)} rows != {s['iterations']}")
    # Every prompt token is prefilled at least once and every output token but
    # the first (emitted by the prefill) is one decode query token.
    prefill = sum(int(i["prefill_tokens"]) for i in its)
    decode = sum(int(i["decode_tokens"]) for i in its)
    check(prefill >= sum(int(r["prompt_tokens"]) for r in done), "prefill tokens missing")
    check(decode >= out_tokens - len(done), "decode tokens missing")
    starts = [float(i["start_s"]) for i in its]
    check(all(a <= b for a, b in zip(starts, starts[1:])), "iterations not in time order")


@case
def simulate_goodput(ctx):
    out = ctx.path("run")
    ctx.simulate("--num-requests", "200", "--rate", "20", "--slo-ttft", "50ms", "--out", out)
    s = load_summary(out)
    check_summary_schema(s, with_goodput=True)
    reqs = [r for r in read_csv(os.path.join(out, "requests.csv")) if r["status"] == "completed"]
    met = sum(1 for r in reqs if float(r["first_token_s"]) - float(r["arrival_s"]) <= 0.050)
    check(0 < met, "no request met a 50 ms TTFT: the check below would be vacuous")
    goodput = met / s["duration_s"]
    check(close(s["goodput_requests_per_s"], goodput),
          f"goodput {s['goodput_requests_per_s']} != {met} / duration = {goodput}")
    check(s["goodput_requests_per_s"] <= s["throughput"]["requests_per_s"], "goodput > throughput")


@case
def simulate_goodput_counts_rejected(ctx):
    # Requests longer than --max-model-len are rejected, and a rejected request
    # missed its SLOs: the table's "M of N met the SLOs" is slo_attainment's M / N.
    out = ctx.path("run")
    p = ctx.simulate("--num-requests", "100", "--max-model-len", "1500", "--slo-ttft", "10s", "--out", out)
    s = load_summary(out)
    check(s["requests"]["rejected"] > 0, "no request rejected: the check below would be vacuous")
    met = round(s["slo_attainment"] * s["requests"]["submitted"])
    said = f"({met} of {s['requests']['submitted']} met the SLOs)"
    check(said in p.stdout, f"the table does not say {said}: {p.stdout[:600]}")
    # Every request rejected: no latency to show, and the table says so instead of 0.00 ms.
    p = ctx.simulate("--num-requests", "5", "--max-model-len", "100", "--slo-ttft", "10s", "--out", ctx.path("none"))
    check("(0 of 5 met the SLOs)" in p.stdout, f"all rejected: {p.stdout[:600]}")
    for name in ["TTFT", "TPOT", "E2E"]:
        row = next((l.split() for l in p.stdout.splitlines() if l.split()[:1] == [name]), None)
        check(row == [name] + ["-"] * 5, f"all rejected: the {name} row is {row}")


@case
def simulate_draws(ctx):
    # --draws N: the medians over N jittered simulations, their band, and the
    # one simulation without jitter (whose requests the CSV holds).
    base = ["--num-requests", "300", "--rate", "30", "--seed", "4"]
    single = ctx.path("single")
    ctx.simulate(*base, "--out", single)
    out = ctx.path("draws")
    p = ctx.simulate(*base, "--draws", "21", "--cost-jitter", "0.05", "--out", out)
    check("medians over 21 jittered simulations" in p.stdout and "P10-P90" in p.stdout, "no draws in the table")
    s, one = load_summary(out), load_summary(single)
    d = s["draws"]
    check(d["draws"] == 21 and d["jitter"]["kind"] == "lognormal" and d["jitter"]["sigma"] == 0.05,
          f"draws {d['draws']}, jitter {d['jitter']}")
    for m in ["ttft_s", "tpot_s", "e2e_s"]:
        for q in ["mean", "p50", "p90"]:
            check(d[m]["p10"][q] <= s[m][q] <= d[m]["p90"][q], f"{m}.{q} {s[m][q]} outside its band {d[m]}")
            check(close(d["single_simulation"][m][q], one[m][q]), f"single_simulation {m}.{q} is not the plain run's")
    check(d["ttft_s"]["p10"]["p90"] < d["ttft_s"]["p90"]["p90"], "the draws do not differ")
    # The CSVs are the simulation without jitter: the plain run's, byte for byte.
    with open(os.path.join(out, "requests.csv")) as a, open(os.path.join(single, "requests.csv")) as b:
        check(a.read() == b.read(), "requests.csv differs from the simulation without jitter")
    # The same flags draw the same medians.
    again = ctx.path("again")
    ctx.simulate(*base, "--draws", "21", "--cost-jitter", "0.05", "--out", again)
    check(load_summary(again)["ttft_s"] == s["ttft_s"], "the same seed drew different medians")
    # A jitter read from a file (validate's report.json carries it as predict_draws.jitter).
    os.makedirs(ctx.work_dir, exist_ok=True)
    jitter = ctx.path("jitter.json")
    with open(jitter, "w") as f:
        json.dump({"mode": "predict", "predict_draws": {"draws": 9, "jitter": {
            "kind": "resampled", "quantiles": [0.95 + 0.001 * i for i in range(101)]}}}, f)
    p = ctx.simulate(*base, "--draws", "5", "--cost-jitter", jitter, "--json")
    check(json.loads(p.stdout)["draws"]["jitter"]["kind"] == "resampled", "the file's jitter was not used")


@case
def simulate_draws_flag_errors(ctx):
    expect_input_error(ctx, ["simulate", "--draws", "0"], ["--draws 0"])
    expect_input_error(ctx, ["simulate", "--draws", "5"], ["--draws 5", "--cost-jitter"])
    expect_input_error(ctx, ["simulate", "--cost-jitter", "0.05"], ["--cost-jitter", "--draws"])
    expect_input_error(ctx, ["simulate", "--draws", "5", "--cost-jitter", "-0.2"], ["--cost-jitter -0.2"])
    expect_input_error(ctx, ["simulate", "--draws", "5", "--cost-jitter", ctx.path("missing.json")],
                       ["--cost-jitter", "missing.json"])
    os.makedirs(ctx.work_dir, exist_ok=True)
    report = ctx.path("report.json")
    with open(report, "w") as f:
        json.dump({"mode": "predict", "ttft_s": {}}, f)
    expect_input_error(ctx, ["simulate", "--draws", "5", "--cost-jitter", report], ["without predict_draws"])


@case
def simulate_json(ctx):
    p = ctx.simulate("--num-requests", "100", "--json", "--seed", "18446744073709551615",
                     "--slo-ttft", "1s")
    try:
        s = json.loads(p.stdout)
    except json.JSONDecodeError as e:
        raise Failure(f"--json output is not valid JSON: {e}")
    check_summary_schema(s, with_goodput=True)
    check(s["config"]["seed"] == 2**64 - 1, "config.seed: the largest seed round-trips")
    check(s["requests"]["submitted"] == 100, "submitted != 100")


@case
def same_seed_same_bytes(ctx):
    runs = {}
    for name, seed in [("a", "11"), ("b", "11"), ("c", "12")]:
        out = ctx.path(name)
        ctx.simulate("--num-requests", "300", "--seed", seed, "--out", out)
        runs[name] = {}
        for f in ["summary.json", "requests.csv", "iterations.csv"]:
            with open(os.path.join(out, f), "rb") as fh:
                runs[name][f] = fh.read()
    for f in runs["a"]:
        check(runs["a"][f] == runs["b"][f], f"{f} differs between two runs with seed 11")
    check(runs["a"]["requests.csv"] != runs["c"]["requests.csv"],
          "seed 12 gives the same requests as seed 11")


@case
def trace_replay(ctx):
    out = ctx.path("run")
    ctx.simulate("--trace", ctx.code_trace, "--max-requests", "200", "--out", out)
    s = load_summary(out)
    check_summary_schema(s, with_goodput=False)
    check(s["requests"]["submitted"] == 200, f"submitted {s['requests']['submitted']} != 200")
    check(s["config"]["workload"]["arrival"] == "trace", "arrival is not 'trace'")
    # The first 200 requests of the trace by arrival time (stable sort), their
    # arrivals shifted to start at 0.
    with open(ctx.code_trace, newline="") as f:
        rows = list(csv.DictReader(f))
    rows = [(parse_azure_timestamp(r["TIMESTAMP"]), int(r["ContextTokens"]),
             int(r["GeneratedTokens"])) for r in rows]
    rows.sort(key=lambda r: r[0])
    rows = rows[:200]
    t0 = rows[0][0]
    reqs = sorted(read_csv(os.path.join(out, "requests.csv")), key=lambda r: int(r["id"]))
    check(len(reqs) == 200, "requests.csv rows")
    for (t, prompt, output), r in zip(rows, reqs):
        check(int(r["prompt_tokens"]) == prompt and int(r["output_tokens"]) == output,
              f"request {r['id']}: ({r['prompt_tokens']}, {r['output_tokens']}) != trace "
              f"({prompt}, {output})")
        check(abs(float(r["arrival_s"]) - (t - t0)) < 1e-5,
              f"request {r['id']}: arrival {r['arrival_s']} != {t - t0}")


@case
def closed_loop(ctx):
    out = ctx.path("run")
    ctx.simulate("--arrival", "closed", "--concurrency", "8", "--num-requests", "100",
                 "--out", out)
    s = load_summary(out)
    check_summary_schema(s, with_goodput=False)
    check(s["requests"]["completed"] == 100, "closed loop did not complete 100 requests")
    # Requests in flight over time: never more than 8, and 8 at some point.
    reqs = read_csv(os.path.join(out, "requests.csv"))
    events = []
    for r in reqs:
        events.append((float(r["arrival_s"]), 1))
        events.append((float(r["finish_s"]), -1))
    events.sort(key=lambda e: (e[0], e[1]))  # a finish before an arrival at the same time
    in_flight = peak = 0
    for _, delta in events:
        in_flight += delta
        peak = max(peak, in_flight)
    check(peak == 8, f"peak requests in flight {peak} != concurrency 8")


# Bad input: exit 2 and a message naming the problem.

@case
def error_unknown_model(ctx):
    expect_input_error(ctx, ["simulate", "--model", "gpt-5"], ["gpt-5", "--model", *MODEL_PRESETS])


@case
def error_unknown_hardware(ctx):
    expect_input_error(ctx, ["simulate", "--hardware", "tpu-v9"],
                       ["tpu-v9", "--hardware", *HARDWARE_PRESETS])


@case
def error_config_missing_field(ctx):
    folder = os.path.join(ctx.models_dir, "missing_vocab_size")
    expect_input_error(ctx, ["simulate", "--model", folder],
                       [os.path.join(folder, "config.json"), "vocab_size"])


@case
def error_config_invalid_json(ctx):
    path = os.path.join(ctx.models_dir, "invalid_json", "config.json")
    expect_input_error(ctx, ["simulate", "--model", path], [path, "JSON"])


@case
def error_block_size_range(ctx):
    # Named by its range, before the KV cache is sized with it (a block of a
    # million tokens was blamed on the weights leaving no room).
    for size in ("0", "4097", "1000000"):
        expect_input_error(ctx, ["simulate", "--num-requests", "5", "--block-size", size],
                           ["--block-size must be in 1 .. 4096", f"(got {size})"])


@case
def error_folder_for_a_file(ctx):
    # A folder where a file is expected is named as such (an ifstream opens a
    # folder, and the JSON reader's "Is a directory" came out as an internal error).
    folder = ctx.path("a_folder")
    os.makedirs(folder, exist_ok=True)
    expect_input_error(ctx, ["simulate", "--profile", folder], [folder, "is a folder"])
    expect_input_error(ctx, ["simulate", "--num-requests", "10", "--draws", "3", "--cost-jitter", folder],
                       ["--cost-jitter", "is a folder"])
    expect_input_error(ctx, ["simulate", "--cost-file", folder], ["--cost-file", "is a folder"])
    expect_input_error(ctx, ["simulate", "--model", "small-110m", "--draft-model", "tiny-15m", "--acceptance-hist",
                             folder], ["--acceptance-hist", "is a folder"])
    run = ctx.path("run")
    ctx.simulate("--num-requests", "5", "--out", run)
    expect_input_error(ctx, ["validate", "--measured", run, "--iteration-log", folder, "--out", ctx.path("v")],
                       ["--iteration-log", "is a folder"])


@case
def error_hardware_file(ctx):
    os.makedirs(ctx.work_dir, exist_ok=True)
    path = ctx.path("gpu.json")
    with open(path, "w") as f:
        json.dump({"name": 5, "bf16_tflops": 100, "memory_bandwidth_gbps": 1000,
                   "memory_gb": 80}, f)
    expect_input_error(ctx, ["simulate", "--hardware", path], [path, "name"])
    with open(path, "w") as f:
        json.dump({"bf16_tflops": 100, "memory_gb": 80}, f)
    expect_input_error(ctx, ["simulate", "--hardware", path], [path, "memory_bandwidth_gbps"])


@case
def error_negative_rate(ctx):
    expect_input_error(ctx, ["simulate", "--rate", "-1"], ["--rate", "-1"])


@case
def error_rate_not_a_number(ctx):
    expect_input_error(ctx, ["simulate", "--rate", "abc"], ["rate", "abc"])


@case
def error_unknown_flag(ctx):
    expect_input_error(ctx, ["simulate", "--no-such-flag", "3"], ["--no-such-flag"])
    # A flag is spelled whole: boost would take an unambiguous prefix, so
    # `--mode replay` (validate's flag) used to be read as `--model replay`.
    expect_input_error(ctx, ["simulate", "--mode", "replay"], ["unrecognised option '--mode'"])
    expect_input_error(ctx, ["simulate", "--num-request", "3"], ["'--num-request'"])
    expect_input_error(ctx, ["sweep", "--gri", "rate=1,2", "--", "--num-requests", "3"], ["'--gri'"])
    expect_input_error(ctx, ["sweep", "merge", "--jso", ctx.path("none")], ["'--jso'"])
    # A stray argument is named.
    expect_input_error(ctx, ["simulate", "--num-requests", "3", "extra_argument"], ["'extra_argument'"])


@case
def error_malformed_trace(ctx):
    os.makedirs(ctx.work_dir, exist_ok=True)
    path = ctx.path("bad_trace.csv")
    with open(path, "w") as f:
        f.write("TIMESTAMP,ContextTokens,GeneratedTokens\n"
                "2023-11-16 18:17:03.9799600,4808,10\n"
                "2023-11-16 18:17:04.0319600,many,8\n"
                "2023-11-16 18:17:04.0781490,110,27\n")
    # Line 3 of the file holds the bad field.
    expect_input_error(ctx, ["simulate", "--trace", path], [f"{path}:3", "ContextTokens"])


@case
def error_missing_trace(ctx):
    path = ctx.path("no_such_trace.csv")
    expect_input_error(ctx, ["simulate", "--trace", path], [path])


@case
def error_scheduler(ctx):
    expect_input_error(ctx, ["simulate", "--scheduler", "bogus"], ["--scheduler", "bogus"])


@case
def error_prompt_len(ctx):
    expect_input_error(ctx, ["simulate", "--prompt-len", "uniform:5"],
                       ["--prompt-len", "uniform:5"])


@case
def error_gpu_memory_utilization(ctx):
    expect_input_error(ctx, ["simulate", "--gpu-memory-utilization", "1.5"],
                       ["--gpu-memory-utilization", "1.5"])


@case
def error_weights_do_not_fit(ctx):
    # 70.55e9 parameters x 2 bytes = 141 GB > 80 GB.
    expect_input_error(ctx, ["simulate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm"],
                       ["llama-3.1-70b", "h100-sxm"])


@case
def error_negative_seed(ctx):
    expect_input_error(ctx, ["simulate", "--seed", "-1"], ["--seed", "-1"])


@case
def error_slo(ctx):
    expect_input_error(ctx, ["simulate", "--slo-ttft", "5h"], ["--slo-ttft", "5h"])


@case
def error_closed_loop_without_concurrency(ctx):
    expect_input_error(ctx, ["simulate", "--arrival", "closed"], ["--concurrency"])


@case
def error_unknown_command(ctx):
    expect_input_error(ctx, ["frobnicate"], ["frobnicate"])
    expect_input_error(ctx, [], ["usage"])


def run_case_from_argv(cases, description):
    """The command line every tests/cli/*_test.py script shares: --list, or run one case."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--servesim")
    ap.add_argument("--source-dir")
    ap.add_argument("--work-dir")
    ap.add_argument("--list", action="store_true", help="print the case names, one a line")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:
        print("\n".join(cases))
        return 0
    if a.case not in cases:
        ap.error(f"unknown case {a.case!r}; --list shows them")
    if not (a.servesim and a.source_dir and a.work_dir):
        ap.error("--servesim, --source-dir and --work-dir are required")
    work = os.path.join(a.work_dir, a.case)
    shutil.rmtree(work, ignore_errors=True)
    ctx = Ctx(os.path.abspath(a.servesim), os.path.abspath(a.source_dir), work)
    try:
        cases[a.case](ctx)
    except Failure as e:
        print(f"FAILED {a.case}: {e}")
        return 1
    except Skipped as e:
        print(f"skipped {a.case}: {e}")
        return 3
    print(f"passed {a.case}")
    return 0


@case
def simulate_failure_leaves_no_output_folder(ctx):
    # iterations.csv streams into --out during the run: a simulation refused
    # (here, weights that leave no room for KV) must leave neither the file
    # nor the folder it would have created.
    out = ctx.path("never")
    expect_input_error(ctx, ["simulate", "--model", "llama-3.1-70b", "--hardware", "h100-sxm",
                             "--num-requests", "10", "--out", out], ["--tensor-parallel-size 2"])
    check(not os.path.exists(out), "a refused simulation created its --out folder")
    # A run that succeeds writes all three files, iterations.csv with a row per iteration.
    ctx.ok("simulate", "--quiet", "--num-requests", "30", "--out", out)
    with open(os.path.join(out, "summary.json")) as f:
        iterations = json.load(f)["iterations"]
    with open(os.path.join(out, "iterations.csv")) as f:
        rows = f.read().splitlines()
    check(len(rows) == iterations + 1, f"{len(rows) - 1} rows for {iterations} iterations")
    check(os.path.exists(os.path.join(out, "requests.csv")), "no requests.csv")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
