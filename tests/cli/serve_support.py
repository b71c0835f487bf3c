"""A `servesim serve` process for tests: started on a free port, read for
its "listening on" line, stopped with SIGTERM; and small HTTP helpers over
the standard library (http.client), including a server-sent-events reader."""

import http.client
import json
import os
import re
import signal
import subprocess
import threading
import time

from cli_test import Failure, check

START_TIMEOUT_S = 60


class Server:
    def __init__(self, ctx, *flags, model="tiny-15m"):
        self.ctx = ctx
        os.makedirs(ctx.work_dir, exist_ok=True)
        self.log_path = ctx.path(f"serve-{int(time.time() * 1000)}.log")
        defaults = {"--threads": "1", "--kv-cache-memory": "64MiB", "--warm-up-tokens": "16"}
        given = set(flags)
        cmd = [ctx.servesim, "serve", "--model", model, "--port", "0", *flags]
        for flag, value in defaults.items():
            if flag not in given:
                cmd += [flag, value]
        print("$ " + " ".join(cmd))
        self.log = open(self.log_path, "w+")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.PIPE, text=True)
        self.lines = []
        self.port = None
        deadline = time.time() + START_TIMEOUT_S
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise Failure(f"serve exited ({self.proc.wait()}) before listening: {''.join(self.lines)[-2000:]}")
            self.lines.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            if time.time() > deadline:
                self.kill()
                raise Failure("serve did not start listening within 60 s")
        # Keep draining stderr so the server never blocks on a full pipe.
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self):
        for line in self.proc.stderr:
            self.lines.append(line)

    def stderr(self):
        return "".join(self.lines)

    def conn(self, timeout=30):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def request(self, method, path, body=None, headers=None, timeout=30):
        """(status, headers dict, body bytes) of one request on a new connection."""
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        data = body if isinstance(body, (bytes, str)) or body is None else json.dumps(body)
        c.request(method, path, body=data, headers=h)
        r = c.getresponse()
        payload = r.read()
        c.close()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, payload

    def post_json(self, path, body, headers=None):
        status, h, payload = self.request("POST", path, body, headers)
        try:
            return status, h, json.loads(payload) if payload else None
        except json.JSONDecodeError:
            raise Failure(f"{path} answered {status} with a body that is not JSON: {payload[:300]!r}")

    def stream(self, path, body, headers=None, timeout=60):
        """Every SSE data payload of a streamed request (parsed JSON, or the string '[DONE]')."""
        c = self.conn(timeout)
        h = {"Content-Type": "application/json"}
        h.update(headers or {})
        c.request("POST", path, body=json.dumps(body), headers=h)
        r = c.getresponse()
        if r.status != 200:  # (a message built only on failure: it reads the body)
            raise Failure(f"stream {path}: status {r.status}: {r.read()[:300]!r}")
        check(r.getheader("Content-Type", "").startswith("text/event-stream"),
              f"content type {r.getheader('Content-Type')}")
        events = read_events(r)
        c.close()
        return events

    def metrics(self):
        status, _, body = self.request("GET", "/metrics")
        check(status == 200, f"/metrics answered {status}")
        return parse_metrics(body.decode())

    def wait_idle(self, timeout=20):
        """Waits until no request runs or waits and the KV cache holds none; returns the metrics."""
        deadline = time.time() + timeout
        while True:
            m = self.metrics()
            if (metric(m, "vllm:num_requests_running") == 0 and metric(m, "vllm:num_requests_waiting") == 0
                    and metric(m, "vllm:kv_cache_usage_perc") == 0):
                return m
            if time.time() > deadline:
                raise Failure(f"the server did not go idle: running {metric(m, 'vllm:num_requests_running')}, "
                              f"waiting {metric(m, 'vllm:num_requests_waiting')}, "
                              f"kv {metric(m, 'vllm:kv_cache_usage_perc')}")
            time.sleep(0.1)

    def terminate(self, timeout=30):
        """SIGTERM, then the exit status (a hang past `timeout` is a failure)."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise Failure(f"serve did not exit within {timeout} s of SIGTERM")
        self.reader.join(5)
        return code

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        self.log.close()


def read_events(response):
    """The `data:` payloads of a server-sent-events body, as they arrive."""
    events = []
    buf = b""
    while True:
        chunk = response.read1(65536) if hasattr(response, "read1") else response.read(65536)
        if not chunk:
            break
        buf += chunk
        while b"\n\n" in buf:
            block, buf = buf.split(b"\n\n", 1)
            for line in block.split(b"\n"):
                if line.startswith(b"data: "):
                    data = line[6:].decode()
                    events.append(data if data == "[DONE]" else json.loads(data))
    return events


def parse_metrics(text):
    """{sample name with labels: value} of a Prometheus text exposition."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, value = line.rsplit(" ", 1)
        out[name] = float(value)
    return out


def metric(samples, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`."""
    total, found = 0.0, False
    for key, value in samples.items():
        base = key.split("{", 1)[0]
        if base != name:
            continue
        if all(f'{k}="{v}"' in key for k, v in labels.items()):
            total += value
            found = True
    if not found:
        raise Failure(f"no sample {name} {labels} in /metrics")
    return total
