#!/usr/bin/python3
"""End-to-end tests of `servesim bench` against a mock OpenAI server
(tests/cli/mock_openai_server.py, started by each case on a free port):
requests accounted for, latencies against the mock's known delays, the
three output files agreeing, errors counted, a server that is down, and
flags refused by name.

Run one case:   bench_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: bench_test.py --list
Expectations come from the flags and the mock's schedule (first chunk 50 ms
after a request arrives, then one every 10 ms), never from earlier output.
Timing bounds are loose: the machine is shared.
"""

import json
import os
import re
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import (case_registry, Failure, Skipped, check, check_summary_schema, close,  # noqa: E402
                      expect_input_error, load_summary, percentile, read_csv, run_case_from_argv)

FIRST_DELAY_S = 0.05
GAP_S = 0.01
BAD_MAX_TOKENS = 13   # the mock answers 400
DROP_MAX_TOKENS = 17  # the mock drops the connection mid-stream

CASES, case = case_registry()


class MockServer:
    def __init__(self, ctx, *extra):
        os.makedirs(ctx.work_dir, exist_ok=True)
        self.port_file = ctx.path("mock.port")
        self.log = ctx.path("mock.log")
        for f in (self.port_file, self.log):
            if os.path.exists(f):
                os.remove(f)
        script = os.path.join(ctx.source_dir, "tests", "cli", "mock_openai_server.py")
        self.proc = subprocess.Popen(
            [sys.executable, script, "--port-file", self.port_file, "--log", self.log,
             "--first-delay", str(FIRST_DELAY_S), "--gap", str(GAP_S),
             "--bad-max-tokens", str(BAD_MAX_TOKENS), "--drop-max-tokens", str(DROP_MAX_TOKENS), *extra])
        deadline = time.monotonic() + 10
        while not os.path.exists(self.port_file):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise Failure("the mock server did not start")
            time.sleep(0.02)
        with open(self.port_file) as f:
            self.url = f"http://127.0.0.1:{int(f.read())}"

    def entries(self, expected=None):
        """The logged requests; with `expected`, waits (up to 5 s) for that many: the mock logs a request
        after its last write, which can be after the client has finished."""
        deadline = time.monotonic() + 5
        while True:
            with open(self.log) as f:
                lines = [json.loads(line) for line in f]
            if expected is None or len(lines) >= expected or time.monotonic() > deadline:
                return lines
            time.sleep(0.02)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.proc.kill()
        self.proc.wait()


def bench(ctx, url, *args):
    return ctx.run("bench", "--base-url", url, *args)


def load_vllm(out):
    with open(os.path.join(out, "vllm_result.json")) as f:
        return json.load(f)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def check_outputs_agree(out, n):
    """requests.csv, summary.json and vllm_result.json describe the same requests."""
    rows = sorted(read_csv(os.path.join(out, "requests.csv")), key=lambda r: int(r["id"]))
    s = load_summary(out)
    v = load_vllm(out)
    check(len(rows) == n, f"requests.csv has {len(rows)} rows for {n} requests")
    done = [r for r in rows if r["status"] == "completed"]
    failed = [r for r in rows if r["status"] == "rejected"]
    check(len(done) + len(failed) == n, "a request is neither completed nor failed")
    check(s["requests"]["submitted"] == n and s["requests"]["completed"] == len(done), f"summary {s['requests']}")
    check(s["requests"]["failed"] == len(failed) == s["requests"]["rejected"], f"summary {s['requests']}")
    check(v["num_prompts"] == n and v["completed"] == len(done) and v["failed"] == len(failed), "vllm counts")
    for key in ["input_lens", "output_lens", "ttfts", "itls", "generated_texts", "errors", "start_times"]:
        check(len(v[key]) == n, f"vllm_result {key} has {len(v[key])} entries")
    for r in rows:
        i = int(r["id"])
        check(close(float(r["arrival_s"]), v["start_times"][i], 1e-6, 1e-9), f"start time of {i}")
        check(int(r["prompt_tokens"]) == v["input_lens"][i], f"input_len of {i}")
        if r["status"] == "completed":
            check(v["errors"][i] == "", f"request {i} completed with error {v['errors'][i]!r}")
            check(close(float(r["ttft_s"]), v["ttfts"][i], 1e-6, 1e-9), f"ttft of {i}")
            check(int(r["tokens_emitted"]) == v["output_lens"][i], f"output_len of {i}")
            check(int(r["emissions"]) == len(v["itls"][i]) + 1, f"itls of {i}")
            e2e = float(r["e2e_s"])
            check(close(e2e, v["ttfts"][i] + sum(v["itls"][i]), 1e-6, 1e-6), f"e2e of {i} != ttft + itls")
        else:
            check(v["errors"][i] == r["rejection_reason"] and v["errors"][i], f"error of {i}")
            check(v["output_lens"][i] == 0, f"failed request {i} has output tokens")
    ttfts = sorted(float(r["ttft_s"]) for r in done)
    if ttfts:
        check(close(s["ttft_s"]["p50"], percentile(ttfts, 50), 1e-9), "summary TTFT p50 != requests.csv's")
        check(close(v["median_ttft_ms"], percentile(ttfts, 50) * 1e3, 1e-9), "vllm median TTFT != requests.csv's")
        check(close(v["mean_ttft_ms"], sum(ttfts) / len(ttfts) * 1e3, 1e-9), "vllm mean TTFT")
        check(v["total_output_tokens"] == sum(int(r["tokens_emitted"]) for r in done), "total_output_tokens")
        check(v["total_input_tokens"] == sum(int(r["prompt_tokens"]) for r in done), "total_input_tokens")
    return rows, s, v


def check_bench_summary_schema(s):
    """run's summary.json schema, but what only the server sees (queueing, iterations, batches, KV cache,
    prefix cache, preemptions) is null."""
    for key in ["queueing_s", "iterations", "mean_batch", "kv_cache", "prefix_cache", "preemptions"]:
        check(s[key] is None, f"summary.json {key} is {s[key]!r}, expected null (not observable by a client)")
    s = dict(s, preemptions=0)
    check_summary_schema(s, with_goodput="goodput_requests_per_s" in s)


# ---------------------------------------------------------------- cases

@case
def bench_help(ctx):
    p = ctx.ok("bench", "--help")
    for flag in ["--base-url", "--model", "--endpoint", "--ignore-eos", "--max-concurrency", "--timeout", "--no-keep-alive",
                 "--vocab-size", "--chat-text", "--arrival", "--rate", "--concurrency", "--trace", "--prompt-len",
                 "--output-len", "--num-requests", "--seed", "--shared-prefix-groups", "--out"]:
        check(flag in p.stdout, f"bench --help does not mention {flag}")


@case
def bench_bad_flags(ctx):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens: flags are checked before the server
    out = ctx.path("never")
    expect_input_error(ctx, ["bench", "--num-requests", "2"], ["--base-url"])
    for bad in ["127.0.0.1:8000", "ftp://x", "http://", "http://h:0", "http://h:99999", "http://h:x", "http://h/?a"]:
        expect_input_error(ctx, ["bench", "--base-url", bad], ["--base-url"])
    expect_input_error(ctx, ["bench", "--base-url", "https://h"], ["--base-url", "https is not supported"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--endpoint", "foo"], ["--endpoint", "foo"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--session-turns", "3"], ["--session-turns"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--max-concurrency", "0"], ["--max-concurrency"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--arrival", "closed", "--concurrency", "2",
                             "--max-concurrency", "2"], ["--max-concurrency"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--timeout", "-1s"], ["--timeout"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--vocab-size", "3"], ["--vocab-size"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--endpoint", "chat", "--vocab-size", "100"],
                       ["--vocab-size"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--chat-text", "letters"], ["--chat-text"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--endpoint", "chat", "--chat-text", "x"], ["--chat-text"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--rate", "0"], ["--rate"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--prompt-len", "zero"], ["--prompt-len"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--concurrency", "4"], ["--concurrency"])
    expect_input_error(ctx, ["bench", "--base-url", url, "--bogus"], ["bogus"])
    check(not os.path.exists(out), "a refused bench created --out")


@case
def bench_server_down(ctx):
    url = f"http://127.0.0.1:{free_port()}"
    p = bench(ctx, url, "--num-requests", "3", "--out", ctx.path("out"))
    check(p.returncode == 1, f"expected exit 1, got {p.returncode}")
    check("cannot reach the server" in p.stderr and url in p.stderr, f"unclear message: {p.stderr!r}")
    p = bench(ctx, "http://no-such-host.invalid:8000", "--num-requests", "3")
    check(p.returncode == 1 and "cannot reach the server" in p.stderr, f"unresolvable host: {p.stderr!r}")


@case
def bench_completions_open_loop(ctx):
    n = 60
    out = ctx.path("out")
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, "--num-requests", str(n), "--rate", "40", "--prompt-len", "uniform:8:64",
                  "--output-len", "uniform:5:20", "--seed", "3", "--ignore-eos", "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
        entries = mock.entries(n)
    for word in ["TTFT", "TPOT", "ITL", "E2E", "failed"]:
        check(word in p.stdout, f"the table lacks {word}")
    check("bench:" in p.stderr and f"{n}/{n} requests done" in p.stderr, "no progress on stderr")
    rows, s, v = check_outputs_agree(out, n)
    check_bench_summary_schema(s)
    check(s["config"]["seed"] == 3, "summary config")
    # The mock has no /metrics: said on stderr, server_metrics null.
    check(s["server_metrics"] is None and "no server metrics" in p.stderr and "HTTP 404" in p.stderr,
          f"server_metrics {s['server_metrics']!r}")
    # Every request reached the server once; each marked one failed with its own error.
    check(len(entries) == n, f"the mock saw {len(entries)} requests for {n}")
    for r in rows:
        asked = int(r["output_tokens"])
        if asked == BAD_MAX_TOKENS:
            check(r["status"] == "rejected" and "HTTP 400" in r["rejection_reason"]
                  and "marked bad" in r["rejection_reason"], f"bad request {r['id']}: {r}")
        elif asked == DROP_MAX_TOKENS:
            check(r["status"] == "rejected" and "closed mid-answer" in r["rejection_reason"], f"dropped {r}")
        else:
            check(r["status"] == "completed", f"request {r['id']} failed: {r['rejection_reason']}")
            check(int(r["tokens_emitted"]) == asked == int(r["emissions"]), f"tokens of {r['id']}")
    marked = sum(int(r["output_tokens"]) in (BAD_MAX_TOKENS, DROP_MAX_TOKENS) for r in rows)
    check(marked > 0, "the workload holds no marked request; pick another seed")
    check(s["requests"]["failed"] == marked, f"{s['requests']['failed']} failed, {marked} marked")
    # The bodies: token ids in [3, 32000) as many as the prompt, the vLLM fields.
    for e in entries:
        b = e["body"]
        check(e["path"] == "/v1/completions" and b["model"] == "mock-model", "route or model")
        check(b["stream"] is True and b["stream_options"] == {"include_usage": True}, "stream fields")
        check(b["temperature"] == 0 and b["ignore_eos"] is True, "temperature / ignore_eos")
        check(all(isinstance(t, int) and 3 <= t < 32000 for t in b["prompt"]), "prompt ids out of range")
    check(sorted(len(e["body"]["prompt"]) for e in entries) == sorted(int(r["prompt_tokens"]) for r in rows),
          "prompt lengths sent differ from requests.csv's")
    check(sorted(e["body"]["max_tokens"] for e in entries) == sorted(int(r["output_tokens"]) for r in rows),
          "max_tokens sent differ from --output-len's")
    # Latencies against the mock's schedule (loose: a shared machine).
    check(FIRST_DELAY_S * 0.95 <= s["ttft_s"]["p50"] <= FIRST_DELAY_S + 0.1, f"TTFT p50 {s['ttft_s']['p50']}")
    check(GAP_S * 0.5 <= s["itl_s"]["p50"] <= GAP_S + 0.02, f"ITL p50 {s['itl_s']['p50']}")
    check(GAP_S * 0.5 <= s["tpot_s"]["p50"] <= GAP_S + 0.02, f"TPOT p50 {s['tpot_s']['p50']}")
    check(v["backend"] == "openai" and v["request_rate"] == 40 and v["max_concurrency"] is None, "vllm meta")


@case
def bench_same_requests_as_simulate(ctx):
    flags = ["--num-requests", "25", "--rate", "30", "--arrival", "gamma", "--cv", "2",
             "--prompt-len", "uniform:4:40", "--output-len", "uniform:2:6", "--seed", "11"]
    sim_out, out = ctx.path("sim"), ctx.path("bench")
    ctx.simulate(*flags, "--out", sim_out)
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, *flags, "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
    sim = {int(r["id"]): r for r in read_csv(os.path.join(sim_out, "requests.csv"))}
    rows, s, _ = check_outputs_agree(out, 25)
    for r in rows:
        q = sim[int(r["id"])]
        check(r["prompt_tokens"] == q["prompt_tokens"] and r["output_tokens"] == q["output_tokens"],
              f"request {r['id']}: bench {r['prompt_tokens']}/{r['output_tokens']}, "
              f"simulate {q['prompt_tokens']}/{q['output_tokens']}")
        # Sent at its arrival time, give or take the timer's and the machine's delay.
        lag = float(r["arrival_s"]) - float(q["arrival_s"])
        check(-0.001 <= lag <= 0.05, f"request {r['id']} sent {lag * 1e3:.1f} ms after its arrival")


@case
def bench_closed_loop(ctx):
    out = ctx.path("out")
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, "--arrival", "closed", "--concurrency", "4", "--num-requests", "20",
                  "--prompt-len", "16", "--output-len", "6", "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
        entries = mock.entries(20)
    rows, s, v = check_outputs_agree(out, 20)
    # At most 4 in flight at the mock, and 4 at some point.
    peak = peak_in_flight(entries)
    check(peak == 4, f"{peak} requests were in flight at the mock, expected 4")
    check(v["max_concurrency"] == 4 and v["request_rate"] == "inf", f"vllm meta {v['max_concurrency']}")
    # Each client's next request goes out when its previous one ends: 20 / 4
    # rounds of about 50 + 5 * 10 ms.
    check(0.4 <= v["duration"] <= 2.5, f"duration {v['duration']}")


def peak_in_flight(entries):
    """Requests in flight at the mock at once: from arrival to the write that lets the client finish."""
    events = sorted([(e["start"], 1) for e in entries] + [(e.get("released", e["end"]), -1) for e in entries],
                    key=lambda x: (x[0], x[1]))
    level, peak = 0, 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    return peak


@case
def bench_256_streams_at_once(ctx):
    # One client thread keeps 256 streams open; the mock (a thread per
    # connection) is the slow side, so only the accounting is checked.
    out = ctx.path("out")
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, "--arrival", "closed", "--concurrency", "256", "--num-requests", "512",
                  "--prompt-len", "16", "--output-len", "10", "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
        entries = mock.entries(512)
    rows, s, v = check_outputs_agree(out, 512)
    check(s["requests"]["failed"] == 0, f"failures: {s['requests']['rejection_reasons']}")
    check(v["max_concurrent_requests"] == 256, f"bench had {v['max_concurrent_requests']} in flight")
    check(len(entries) == 512 and peak_in_flight(entries) >= 64,
          f"the mock saw at most {peak_in_flight(entries)} streams at once")


@case
def bench_max_concurrency(ctx):
    out = ctx.path("out")
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, "--arrival", "constant", "--rate", "500", "--num-requests", "15",
                  "--prompt-len", "8", "--output-len", "4", "--max-concurrency", "3", "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
        entries = mock.entries(15)
    rows, s, v = check_outputs_agree(out, 15)
    peak = peak_in_flight(entries)
    check(peak <= 3, f"{peak} in flight with --max-concurrency 3")
    check(v["max_concurrency"] == 3 and v["max_concurrent_requests"] == 3, "vllm max_concurrency")
    # Waiting for a slot is not TTFT: each is timed from its send.
    check(s["ttft_s"]["p99"] <= FIRST_DELAY_S + 0.1, f"TTFT p99 {s['ttft_s']['p99']} includes the wait")


@case
def bench_chat_reports_server_prompt_tokens(ctx):
    out = ctx.path("out")
    with MockServer(ctx, "--chunk-tokens", "2") as mock:
        p = bench(ctx, mock.url, "--endpoint", "chat", "--num-requests", "10", "--rate", "50",
                  "--prompt-len", "uniform:5:30", "--output-len", "9", "--model", "my-model", "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
        entries = mock.entries(10)
    rows, s, v = check_outputs_agree(out, 10)
    check(v["backend"] == "openai-chat" and v["model_id"] == "my-model", "vllm backend / model")
    sim = ctx.path("sim")
    ctx.simulate("--num-requests", "10", "--rate", "50", "--prompt-len", "uniform:5:30", "--output-len", "9",
                 "--out", sim)
    asked = {int(r["id"]): int(r["prompt_tokens"]) for r in read_csv(os.path.join(sim, "requests.csv"))}
    for r in rows:
        # The mock counts the words and adds 7 for its "chat template"; bench reports what the server said.
        check(int(r["prompt_tokens"]) == asked[int(r["id"])] + 7, f"prompt tokens of {r['id']}: {r['prompt_tokens']}")
        # 9 tokens in chunks of 2: 5 chunks, 9 tokens from usage.
        check(int(r["tokens_emitted"]) == 9 and int(r["emissions"]) == 5, f"tokens/chunks of {r['id']}")
    # TPOT = 4 gaps of 10 ms over 8 tokens; the median over requests, as a client read late shortens one.
    tpot = percentile(sorted(float(r["tpot_s"]) for r in rows), 50)
    check(4 * GAP_S / 8 * 0.9 <= tpot <= 4 * GAP_S / 8 + 0.02, f"median TPOT {tpot}")
    for e in entries:
        b = e["body"]
        check(e["path"] == "/v1/chat/completions" and b["model"] == "my-model", "route or model")
        check(len(b["messages"]) == 1 and b["messages"][0]["role"] == "user", "messages")
        check("ignore_eos" not in b and b["max_tokens"] == 9, "ignore_eos sent without --ignore-eos")
    check(all(t == "tok " * 9 for t in v["generated_texts"]), "generated texts")


@case
def bench_shared_prefixes_send_identical_leading_ids(ctx):
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, "--num-requests", "12", "--rate", "100", "--prompt-len", "10",
                  "--output-len", "2", "--shared-prefix-groups", "3", "--shared-prefix-len", "32",
                  "--vocab-size", "1000", "--out", ctx.path("out"))
        check(p.returncode == 0, f"exit {p.returncode}")
        prompts = [e["body"]["prompt"] for e in mock.entries(12)]
    check(len(prompts) == 12 and all(len(x) == 42 for x in prompts), "prompt lengths")
    check(all(3 <= t < 1000 for x in prompts for t in x), "ids outside --vocab-size")
    prefixes = {tuple(x[:32]) for x in prompts}
    check(1 < len(prefixes) <= 3, f"{len(prefixes)} distinct 32-token prefixes for 3 groups")
    tails = {tuple(x[32:]) for x in prompts}
    check(len(tails) == 12, "the requests' own tails are not distinct")


@case
def bench_usage_missing_counts_chunks(ctx):
    out = ctx.path("out")
    with MockServer(ctx, "--no-usage", "--chunk-tokens", "3") as mock:
        p = bench(ctx, mock.url, "--num-requests", "5", "--rate", "100", "--prompt-len", "8", "--output-len", "9",
                  "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
    rows, _, _ = check_outputs_agree(out, 5)
    for r in rows:
        check(int(r["tokens_emitted"]) == 3 == int(r["emissions"]), f"without usage: {r}")
        check(int(r["prompt_tokens"]) == 8, "prompt tokens without usage")


@case
def bench_timeout_fails_requests_not_the_run(ctx):
    out = ctx.path("out")
    with MockServer(ctx) as mock:
        p = bench(ctx, mock.url, "--num-requests", "4", "--rate", "100", "--prompt-len", "8", "--output-len", "50",
                  "--timeout", "200ms", "--out", out)
    check(p.returncode == 1, f"expected exit 1 when every request failed, got {p.returncode}")
    check("every request failed" in p.stderr and "timed out" in p.stderr, f"stderr {p.stderr!r}")
    rows, s, v = check_outputs_agree(out, 4)
    check(all("timed out" in r["rejection_reason"] for r in rows), "timeouts not reported per request")


@case
def bench_keeps_connections_alive(ctx):
    n = 30
    args = ["--num-requests", str(n), "--arrival", "constant", "--rate", "40", "--prompt-len", "8",
            "--output-len", "4"]
    with MockServer(ctx, "--keep-alive") as mock:
        p = bench(ctx, mock.url, *args, "--out", ctx.path("kept"))
        check(p.returncode == 0, f"exit {p.returncode}")
        entries = mock.entries(n)
    rows, s, _ = check_outputs_agree(ctx.path("kept"), n)
    c = s["connections"]
    check(s["requests"]["completed"] == n, "failures")
    check(c["keep_alive"] and c["opened"] < n and c["opened"] + c["reused"] == n and c["resent_after_stale"] == 0,
          f"connections {c}")
    check(len({e["client_port"] for e in entries}) == c["opened"], "the mock saw another number of connections")
    with MockServer(ctx, "--keep-alive") as mock:
        p = bench(ctx, mock.url, *args, "--no-keep-alive", "--out", ctx.path("closed"))
        check(p.returncode == 0, f"exit {p.returncode}")
    c = load_summary(ctx.path("closed"))["connections"]
    check(not c["keep_alive"] and c["opened"] == n and c["reused"] == 0, f"--no-keep-alive: {c}")


@case
def bench_stale_connections_are_not_failures(ctx):
    # The server closes idle connections after 100 ms: bench sees it and connects anew.
    args = ["--num-requests", "6", "--arrival", "constant", "--rate", "4", "--prompt-len", "8", "--output-len", "3"]
    with MockServer(ctx, "--keep-alive", "--idle-close", "0.1") as mock:
        p = bench(ctx, mock.url, *args, "--out", ctx.path("idle"))
        check(p.returncode == 0, f"exit {p.returncode}")
    s = load_summary(ctx.path("idle"))
    check(s["requests"]["completed"] == 6 and s["connections"]["opened"] == 6, f"idle-closed: {s['connections']}")
    # The server closes a reused connection without answering: the request is sent again, once, on a new one.
    n = 12
    with MockServer(ctx, "--keep-alive", "--drop-reused") as mock:
        p = bench(ctx, mock.url, "--num-requests", str(n), "--arrival", "constant", "--rate", "40",
                  "--prompt-len", "8", "--output-len", "3", "--out", ctx.path("dropped"))
        check(p.returncode == 0, f"exit {p.returncode}")
        time.sleep(0.2)
        entries = mock.entries()
    s = load_summary(ctx.path("dropped"))
    c = s["connections"]
    check(s["requests"]["completed"] == n, f"failures: {s['requests']['rejection_reasons']}")
    dropped = sum(e["outcome"] == "dropped reused" for e in entries)
    check(dropped > 0 and c["resent_after_stale"] == dropped and len(entries) == n + dropped,
          f"{dropped} dropped at the mock, connections {c}, {len(entries)} requests seen")


def prometheus_values(text):
    """{metric name without labels: value} of a Prometheus text page (the last sample of a name wins)."""
    values = {}
    for line in text.splitlines():
        m = re.match(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if m:
            values[m.group(1)] = float(m.group(3))
    return values


@case
def bench_against_servesim_serve(ctx):
    # The real server: bench's counts must equal the server's own counters,
    # and its mean TTFT exceed the server's by the transport only (loosely:
    # the machine is shared).
    import urllib.request
    os.makedirs(ctx.work_dir, exist_ok=True)
    err_path = ctx.path("serve.err")
    with open(err_path, "w") as err:
        serve = subprocess.Popen([ctx.servesim, "serve", "--model", "tiny-15m", "--threads", "1", "--port", "0"],
                                 stdout=subprocess.DEVNULL, stderr=err)
    try:
        url, deadline = None, time.monotonic() + 30
        while url is None:
            with open(err_path) as f:
                m = re.search(r"listening on (http://\S+)", f.read())
            if m:
                url = m.group(1)
            elif serve.poll() is not None or time.monotonic() > deadline:
                with open(err_path) as f:
                    raise Skipped(f"servesim serve did not start: {f.read()[-500:]!r}")
            else:
                time.sleep(0.1)
        out = ctx.path("out")
        n = 24
        p = bench(ctx, url, "--num-requests", str(n), "--rate", "8", "--prompt-len", "uniform:8:48",
                  "--output-len", "12", "--ignore-eos", "--out", out)
        check(p.returncode == 0, f"exit {p.returncode}")
        with urllib.request.urlopen(url + "/metrics", timeout=10) as r:
            metrics = prometheus_values(r.read().decode())
    finally:
        serve.terminate()
        try:
            serve.wait(timeout=15)
        except subprocess.TimeoutExpired:
            serve.kill()
            serve.wait()
    rows, s, v = check_outputs_agree(out, n)
    check(s["requests"]["completed"] == n, f"failures: {s['requests']['rejection_reasons']}")
    check(all(int(r["tokens_emitted"]) == 12 for r in rows), "--ignore-eos outputs are not 12 tokens")
    sim = ctx.path("sim")
    ctx.simulate("--num-requests", str(n), "--rate", "8", "--prompt-len", "uniform:8:48", "--output-len", "12",
                 "--out", sim)
    asked = {int(r["id"]): r["prompt_tokens"] for r in read_csv(os.path.join(sim, "requests.csv"))}
    check(all(r["prompt_tokens"] == asked[int(r["id"])] for r in rows), "token-id prompts: usage != asked")
    check(metrics.get("vllm:prompt_tokens_total") == v["total_input_tokens"], "server prompt tokens")
    check(metrics.get("vllm:generation_tokens_total") == v["total_output_tokens"], "server generation tokens")
    count = metrics.get("vllm:time_to_first_token_seconds_count")
    check(count == n, f"the server's TTFT histogram counts {count}")
    server_mean = metrics["vllm:time_to_first_token_seconds_sum"] / count
    client_mean = v["mean_ttft_ms"] / 1e3
    print(f"mean TTFT: client {client_mean * 1e3:.2f} ms, server {server_mean * 1e3:.2f} ms")
    check(server_mean - 0.001 <= client_mean <= server_mean + 0.025,
          f"client mean TTFT {client_mean * 1e3:.2f} ms vs the server's {server_mean * 1e3:.2f} ms")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
