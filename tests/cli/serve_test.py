#!/usr/bin/python3
"""`servesim serve` end to end over loopback: the OpenAI routes streamed and
not, the metrics, bad requests (each followed by a good one), disconnects,
overload, SIGTERM, 256 concurrent streams, memory over many requests and
speculative decoding.

Run one case:   serve_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: serve_test.py --list
"""

import http.client
import json
import os
import socket
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, check, expect_input_error, run_case_from_argv  # noqa: E402
from serve_support import Server, metric  # noqa: E402

CASES, case = case_registry()
MODEL = "tiny-15m"  # 32000 ids, context 256: quick on one core


def completion(prompt, max_tokens=8, **extra):
    return {"model": MODEL, "prompt": prompt, "max_tokens": max_tokens, **extra}


@case
def serve_completions_not_streamed(ctx):
    with Server(ctx) as s:
        status, _, body = s.post_json("/v1/completions", completion("Hello, servesim", 12, ignore_eos=True))
        check(status == 200, f"status {status}: {body}")
        check(body["object"] == "text_completion" and body["model"] == MODEL, f"body {body}")
        choice = body["choices"][0]
        check(choice["finish_reason"] == "length", f"finish_reason {choice['finish_reason']}")
        usage = body["usage"]
        # The byte-level tokenizer: one token per byte of the prompt.
        check(usage["prompt_tokens"] == len("Hello, servesim".encode()), f"usage {usage}")
        check(usage["completion_tokens"] == 12 and usage["total_tokens"] == usage["prompt_tokens"] + 12,
              f"usage {usage}")
        check(isinstance(choice["text"], str), "text is not a string")
        # Token ids as a prompt, greedy: the same request gives the same text.
        ids = [5, 900, 31999, 77]
        a = s.post_json("/v1/completions", completion(ids, 6, temperature=0, ignore_eos=True))[2]
        b = s.post_json("/v1/completions", completion([ids], 6, temperature=0, ignore_eos=True))[2]
        check(a["usage"]["prompt_tokens"] == 4, f"usage {a['usage']}")
        check(a["choices"][0]["text"] == b["choices"][0]["text"], "greedy decoding of one prompt differs")
        # A seeded sample repeats; models, health.
        c1 = s.post_json("/v1/completions", completion(ids, 6, temperature=1.0, seed=7, ignore_eos=True))[2]
        c2 = s.post_json("/v1/completions", completion(ids, 6, temperature=1.0, seed=7, ignore_eos=True))[2]
        check(c1["choices"][0]["text"] == c2["choices"][0]["text"], "the same seed sampled differently")
        status, _, models = s.request("GET", "/v1/models")
        models = json.loads(models)
        check(status == 200 and models["data"][0]["id"] == MODEL, f"/v1/models {models}")
        check(models["data"][0]["max_model_len"] == 256, f"max_model_len {models['data'][0]}")
        check(s.request("GET", "/health")[0] == 200, "/health")
        check(s.terminate() == 0, "exit status after SIGTERM")


@case
def serve_streams_chat_and_completions(ctx):
    with Server(ctx) as s:
        events = s.stream("/v1/chat/completions",
                          {"model": MODEL, "messages": [{"role": "system", "content": "Be brief."},
                                                        {"role": "user", "content": "Say hi"}],
                           "max_tokens": 10, "stream": True, "ignore_eos": True,
                           "stream_options": {"include_usage": True}})
        check(events[-1] == "[DONE]", f"last event {events[-1]}")
        chunks = events[:-1]
        check(all(c["object"] == "chat.completion.chunk" for c in chunks), "chunk object")
        check(chunks[0]["choices"][0]["delta"].get("role") == "assistant", f"first chunk {chunks[0]}")
        usage = chunks[-1]
        check(usage["choices"] == [] and usage["usage"]["completion_tokens"] == 10, f"usage chunk {usage}")
        finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
        check(len(finals) == 1 and finals[0]["choices"][0]["finish_reason"] == "length", f"finals {finals}")
        # A completion streams one chunk per token (no stop strings, byte tokens may hold back
        # an unfinished UTF-8 character, so at most 10 chunks with text).
        events = s.stream("/v1/completions", completion([10, 20, 30], 10, stream=True, ignore_eos=True))
        check(events[-1] == "[DONE]", "no [DONE]")
        texts = [c["choices"][0]["text"] for c in events[:-1]]
        check(2 <= len(texts) <= 11, f"{len(texts)} chunks for 10 tokens")
        check(all(c["object"] == "text_completion" for c in events[:-1]), "completion chunk object")
        # The streamed text equals the text of the same request not streamed (greedy).
        whole = s.post_json("/v1/completions", completion([10, 20, 30], 10, temperature=0, ignore_eos=True))[2]
        streamed = s.stream("/v1/completions", completion([10, 20, 30], 10, temperature=0, stream=True,
                                                          ignore_eos=True))
        check("".join(c["choices"][0]["text"] for c in streamed[:-1]) == whole["choices"][0]["text"],
              "streamed and whole texts differ")
        m = s.metrics()
        check(metric(m, "vllm:time_to_first_token_seconds_count") == 4, "TTFT histogram count")
        check(metric(m, "vllm:request_success_total", finished_reason="length") == 4, "successes by reason")
        check(metric(m, "vllm:generation_tokens_total") == 40, "generation tokens")


@case
def serve_stop_strings_and_min_tokens(ctx):
    with Server(ctx) as s:
        base = s.post_json("/v1/completions", completion([40, 41, 42], 30, temperature=0, ignore_eos=True))[2]
        text = base["choices"][0]["text"]
        check(len(text) >= 8, f"too short a text to cut: {text!r}")
        stop = text[4:6]
        cut = s.post_json("/v1/completions", completion([40, 41, 42], 30, temperature=0, stop=[stop]))[2]
        check(cut["choices"][0]["text"] == text[:text.find(stop)], f"stop {stop!r}: {cut['choices'][0]['text']!r}")
        check(cut["choices"][0]["finish_reason"] == "stop", f"finish_reason {cut['choices'][0]['finish_reason']}")
        events = s.stream("/v1/completions", completion([40, 41, 42], 30, temperature=0, stop=stop, stream=True))
        streamed = "".join(c["choices"][0]["text"] for c in events[:-1])
        check(streamed == text[:text.find(stop)], f"streamed with stop: {streamed!r}")
        s.wait_idle()


@case
def serve_bad_requests_then_good(ctx):
    with Server(ctx, "--max-body-bytes", "4096") as s:
        good = completion("ok", 2)
        bad = [
            ("malformed JSON", "POST", "/v1/completions", b"{not json", 400, None),
            ("not an object", "POST", "/v1/completions", b"[1, 2]", 400, None),
            ("max_tokens of a wrong type", "POST", "/v1/completions", completion("x", "ten"), 400, "max_tokens"),
            ("max_tokens 0", "POST", "/v1/completions", completion("x", 0), 400, "max_tokens"),
            ("max_tokens < 0", "POST", "/v1/completions", completion("x", -3), 400, "max_tokens"),
            ("token id outside the vocabulary", "POST", "/v1/completions", completion([1, 32000], 2), 400, "prompt"),
            ("negative token id", "POST", "/v1/completions", completion([-1], 2), 400, "prompt"),
            ("longer than the context", "POST", "/v1/completions", completion([5] * 250, 10), 400, "max_tokens"),
            ("unknown model", "POST", "/v1/completions", {**good, "model": "gpt-7"}, 404, "model"),
            ("no prompt", "POST", "/v1/completions", {"model": MODEL}, 400, "prompt"),
            ("empty messages", "POST", "/v1/chat/completions", {"model": MODEL, "messages": []}, 400, "messages"),
            ("a bad role", "POST", "/v1/chat/completions",
             {"model": MODEL, "messages": [{"role": "wizard", "content": "x"}]}, 400, "messages"),
            ("temperature out of range", "POST", "/v1/completions", completion("x", 2, temperature=9), 400,
             "temperature"),
            ("stream not a boolean", "POST", "/v1/completions", completion("x", 2, stream="yes"), 400, "stream"),
            ("n > 1", "POST", "/v1/completions", completion("x", 2, n=3), 400, "n"),
            ("oversized body", "POST", "/v1/completions", completion("y" * 5000, 2), 413, None),
            ("unknown route", "GET", "/v2/everything", None, 404, None),
            ("wrong method", "GET", "/v1/completions", None, 405, None),
        ]
        for name, method, path, body, status, param in bad:
            got, headers, payload = s.request(method, path, body)
            check(got == status, f"{name}: status {got}, expected {status}: {payload[:300]!r}")
            err = json.loads(payload)["error"]
            check(err["message"] and err["type"], f"{name}: error body {err}")
            if param:
                check(err["param"] == param, f"{name}: param {err['param']}, expected {param}")
            ok, _, answer = s.post_json("/v1/completions", good)
            check(ok == 200 and answer["usage"]["completion_tokens"] >= 1, f"a good request after {name}: {ok}")
        # A request that is not HTTP at all.
        with socket.create_connection(("127.0.0.1", s.port), timeout=10) as raw:
            raw.sendall(b"\x16\x03\x01 garbage\r\n\r\n")
            reply = raw.recv(4096)
            check(reply.startswith(b"HTTP/1.1 400"), f"garbage answered {reply[:60]!r}")
        check(s.post_json("/v1/completions", good)[0] == 200, "a good request after garbage")
        check(s.terminate() == 0, "exit status")


@case
def serve_disconnect_mid_stream_frees_kv(ctx):
    with Server(ctx) as s:
        for _ in range(3):
            c = http.client.HTTPConnection("127.0.0.1", s.port, timeout=30)
            c.request("POST", "/v1/completions",
                      body=json.dumps(completion([7] * 40, 200, stream=True, ignore_eos=True)),
                      headers={"Content-Type": "application/json"})
            r = c.getresponse()
            check(r.status == 200, f"status {r.status}")
            first = r.read1(256)
            check(first.startswith(b"data: "), f"first bytes {first[:40]!r}")
            c.sock.shutdown(socket.SHUT_RDWR)
            c.close()
        m = s.wait_idle()
        aborted = metric(m, "vllm:request_success_total", finished_reason="abort")
        check(aborted == 3, f"{aborted} requests ended as aborted, expected 3")
        check(metric(m, "vllm:generation_tokens_total") < 3 * 200, "the aborted requests ran to the end")
        check(s.post_json("/v1/completions", completion("after", 3))[0] == 200, "a request after the disconnects")


@case
def serve_overload_answers_503(ctx):
    with Server(ctx, "--max-waiting", "2", "--max-num-seqs", "1") as s:
        results = []

        def one():
            results.append(s.request("POST", "/v1/completions", completion([9] * 20, 40, ignore_eos=True))[:2])

        threads = [threading.Thread(target=one) for _ in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        codes = sorted(r[0] for r in results)
        check(len(codes) == 16, f"{len(codes)} of 16 answered")
        check(200 in codes and 503 in codes, f"statuses {codes}")
        check(set(codes) <= {200, 503}, f"statuses {codes}")
        check(all(h.get("retry-after") for c, h in results if c == 503), "a 503 without Retry-After")
        s.wait_idle()


@case
def serve_sigterm_mid_load_finishes_in_flight(ctx):
    with Server(ctx, "--shutdown-grace", "20") as s:
        results = []

        def one():
            try:
                results.append(s.post_json("/v1/completions", completion([11] * 16, 30, ignore_eos=True))[0])
            except (ConnectionError, http.client.HTTPException, OSError) as e:
                results.append(repr(e))

        threads = [threading.Thread(target=one) for _ in range(8)]
        for t in threads:
            t.start()
        time.sleep(0.3)
        start = time.time()
        code = s.terminate(timeout=40)
        for t in threads:
            t.join(30)
        check(code == 0, f"exit status {code}")
        check(time.time() - start < 25, "shutdown took longer than the grace period")
        # Requests accepted before the signal finish; a later one is refused or never connects.
        check(results.count(200) >= 1, f"results {results}")
        check(all(r == 200 or isinstance(r, str) or r == 503 for r in results), f"results {results}")
        check("SIGTERM" in s.stderr(), "no shutdown message")


@case
def serve_256_concurrent_streams(ctx):
    with Server(ctx, "--max-num-seqs", "64", "--kv-cache-memory", "128MiB") as s:
        errors, done = [], []

        def one(i):
            try:
                ev = s.stream("/v1/completions", completion([100 + i, 5, 6, 7], 8, stream=True, ignore_eos=True,
                                                            stream_options={"include_usage": True}), timeout=120)
                check(ev[-1] == "[DONE]", "no [DONE]")
                check(ev[-2]["usage"]["completion_tokens"] == 8, f"usage {ev[-2]}")
                done.append(i)
            except Exception as e:  # noqa: BLE001 - every failure is counted
                errors.append(repr(e))

        threads = [threading.Thread(target=one, args=(i,)) for i in range(256)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(180)
        check(not errors, f"{len(errors)} streams failed: {errors[:3]}")
        check(len(done) == 256, f"{len(done)} of 256 streams done")
        m = s.wait_idle()
        check(metric(m, "vllm:e2e_request_latency_seconds_count") == 256, "e2e count")


@case
def serve_api_key(ctx):
    with Server(ctx, "--api-key", "s3cret") as s:
        status, _, body = s.post_json("/v1/completions", completion("x", 2))
        check(status == 401 and body["error"]["message"], f"no key: {status}")
        status, _, _ = s.post_json("/v1/completions", completion("x", 2), {"Authorization": "Bearer wrong"})
        check(status == 401, f"a wrong key: {status}")
        status, _, _ = s.post_json("/v1/completions", completion("x", 2), {"Authorization": "Bearer s3cret"})
        check(status == 200, f"the right key: {status}")
        check(s.request("GET", "/health")[0] == 200, "/health needs no key")


@case
def serve_memory_flat_over_many_requests(ctx):
    with Server(ctx) as s:
        def batch(n, offset):
            def worker(k):
                c = s.conn()
                for i in range(k, n, 8):
                    c.request("POST", "/v1/completions", body=json.dumps(completion([3 + (offset + i) % 1000, 4], 1)),
                              headers={"Content-Type": "application/json"})
                    r = c.getresponse()
                    r.read()
                    check(r.status == 200, f"status {r.status}")
                c.close()
            ts = [threading.Thread(target=worker, args=(k,)) for k in range(8)]
            for t in ts:
                t.start()
            for t in ts:
                t.join(120)

        batch(1000, 0)
        before = s.rss_kib()
        batch(9000, 1000)
        after = s.rss_kib()
        m = s.wait_idle()
        check(metric(m, "vllm:e2e_request_latency_seconds_count") == 10000, "10000 requests counted")
        print(f"RSS after 1000 requests {before} KiB, after 10000 {after} KiB")
        check(after - before < 8 * 1024, f"RSS grew by {after - before} KiB over 9000 requests")


def mutations(seed, count):
    """Raw HTTP requests made from valid ones by byte flips, cuts, repeats and spliced header junk."""
    import random
    rng = random.Random(seed)
    body = json.dumps(completion([5, 6, 7], 2, stream=True)).encode()
    seeds = [
        b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode() + b"\r\n\r\n" + body,
        b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n",
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
        + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n",
    ]
    junk = [b"\r\n", b"\x00", b"Content-Length: 99999999999\r\n", b"Transfer-Encoding: chunked\r\n",
            b"{", b"\"prompt\":", b"\xff\xfe", b" HTTP/1.1", b"%", b"\"max_tokens\":-1"]
    for _ in range(count):
        m = bytearray(rng.choice(seeds))
        for _ in range(rng.randint(1, 4)):
            op = rng.randrange(4)
            at = rng.randrange(len(m))
            if op == 0:
                m[at] ^= 1 << rng.randrange(8)
            elif op == 1:
                del m[at:at + rng.randint(1, 16)]
            elif op == 2:
                m[at:at] = rng.choice(junk)
            else:
                m[at:at] = m[at:at + rng.randint(1, 32)] * rng.randint(2, 8)
        yield bytes(m)


@case
def serve_mutated_requests_keep_it_serving(ctx):
    # A mutation harness over the HTTP handling and the JSON parsing of a live server: every mutated
    # request gets an answer or a closed connection, never a crash or a hang, and it goes on serving.
    with Server(ctx, "--max-body-bytes", "65536") as s:
        statuses = {}
        for i, raw in enumerate(mutations(seed=31, count=400)):
            reply, reset = b"", False
            with socket.create_connection(("127.0.0.1", s.port), timeout=10) as sock:
                try:
                    # The server may answer (and shut its side) before the whole mutation is sent.
                    sock.sendall(raw)
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                try:
                    while True:
                        data = sock.recv(65536)
                        if not data:
                            break
                        reply += data
                except socket.timeout:
                    raise AssertionError(f"mutation {i} hung the connection: {raw[:200]!r}")
                except ConnectionResetError:
                    reset = True
            if reply.startswith(b"HTTP/1.1 "):
                status = reply[9:12].decode(errors="replace")
            else:
                status = "reset" if reset else "closed"
            statuses[status] = statuses.get(status, 0) + 1
            check(s.proc.poll() is None, f"the server died on mutation {i}: {raw[:300]!r}")
            check(not status.startswith("5") or status == "503", f"mutation {i} answered {status}: {raw[:200]!r}")
            if i % 50 == 49:
                check(s.post_json("/v1/completions", completion("ok", 2))[0] == 200, f"a good request after {i}")
        print(f"statuses of 400 mutated requests: {statuses}")
        # The server lingers after an error answer, so a reset never eats it.
        check(statuses.get("reset", 0) == 0, f"connections reset before their answer was read: {statuses}")
        check(len(statuses) > 2, f"the mutations reached too few paths: {statuses}")
        s.wait_idle()


@case
def serve_speculative_decoding(ctx):
    # Greedy texts of a server that drafts 3 tokens with a self-draft equal a plain server's (streamed
    # and not), and /metrics counts the drafts under vLLM's names.
    prompts = [[10, 20, 30], [5, 900, 31999, 77], "Hello, servesim"]
    with Server(ctx) as plain:
        want = [plain.post_json("/v1/completions", completion(p, 12, temperature=0, ignore_eos=True))[2]
                ["choices"][0]["text"] for p in prompts]
    with Server(ctx, "--num-speculative-tokens", "3", "--self-draft-layers", "1") as s:
        check("draft" in s.stderr(), f"the ready line does not name the draft: {s.stderr()}")
        for p, w in zip(prompts, want):
            status, _, body = s.post_json("/v1/completions", completion(p, 12, temperature=0, ignore_eos=True))
            check(status == 200, f"status {status}: {body}")
            check(body["choices"][0]["text"] == w, f"prompt {p!r}: {body['choices'][0]['text']!r} against {w!r}")
            check(body["usage"]["completion_tokens"] == 12, f"usage {body['usage']}")
        events = s.stream("/v1/completions", completion(prompts[0], 12, temperature=0, stream=True, ignore_eos=True))
        check(events[-1] == "[DONE]", "no [DONE]")
        check("".join(c["choices"][0]["text"] for c in events[:-1]) == want[0], "streamed text differs")
        m = s.metrics()
        drafts = metric(m, "vllm:spec_decode_num_drafts_total")
        draft_tokens = metric(m, "vllm:spec_decode_num_draft_tokens_total")
        accepted = metric(m, "vllm:spec_decode_num_accepted_tokens_total")
        print(f"drafts {drafts}, draft tokens {draft_tokens}, accepted {accepted}")
        check(drafts > 0 and drafts <= draft_tokens <= 3 * drafts, f"drafts {drafts}, draft tokens {draft_tokens}")
        check(0 <= accepted <= draft_tokens, f"accepted {accepted} of {draft_tokens}")
        per_position = sum(metric(m, "vllm:spec_decode_num_accepted_tokens_per_pos_total", position=str(j))
                           for j in range(3))
        check(per_position == accepted, f"accepted per position {per_position}, in all {accepted}")
        check(metric(m, "vllm:generation_tokens_total") == 48, "generation tokens")
        s.wait_idle()


@case
def serve_bad_flags(ctx):
    expect_input_error(ctx, ["serve", "--model", MODEL, "--port", "70000"], ["--port"])
    expect_input_error(ctx, ["serve", "--model", MODEL, "--max-waiting", "0"], ["--max-waiting"])
    expect_input_error(ctx, ["serve", "--model", MODEL, "--served-model-name", ""], ["--served-model-name"])
    expect_input_error(ctx, ["serve", "--model", MODEL, "--host", "not-an-ip"], ["--host"])
    expect_input_error(ctx, ["serve", "--model", MODEL, "--tokenizer", "/nonexistent/tokenizer.json"],
                       ["/nonexistent/tokenizer.json"])
    expect_input_error(ctx, ["serve", "--model", MODEL, "--num-speculative-tokens", "2", "--self-draft-layers", "99"],
                       ["--self-draft-layers"])
    p = ctx.ok("serve", "--help")
    for flag in ("--port", "--host", "--api-key", "--max-waiting", "--shutdown-grace", "--max-num-seqs",
                 "--num-speculative-tokens", "--draft-model", "--self-draft-layers"):
        check(flag in p.stdout, f"--help lacks {flag}")


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
