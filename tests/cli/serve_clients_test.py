#!/usr/bin/python3
"""`servesim serve` with real parts nobody here wrote: the official `openai`
package for Node.js streams from it, and a real Prometheus server scrapes its
/metrics and answers a query on the TTFT histogram. Each case skips, with the
reason, where its package cannot be had.

Run one case:   serve_clients_test.py --servesim BIN --source-dir ROOT --work-dir DIR CASE
List the cases: serve_clients_test.py --list
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cli_test import case_registry, Skipped, check, run_case_from_argv  # noqa: E402
from serve_support import Server, metric  # noqa: E402

CASES, case = case_registry()
MODEL = "tiny-15m"
OPENAI_PACKAGE = "openai@4"  # the Node.js client's major version under test


def openai_client_dir(ctx):
    """A local folder with the openai package installed (once per build folder)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise Skipped("node or npm is not installed (the Debian nodejs package with npm is needed)")
    folder = os.path.join(os.path.dirname(ctx.work_dir), "npm-openai")
    if not os.path.isdir(os.path.join(folder, "node_modules", "openai")):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "package.json"), "w") as f:
            json.dump({"name": "servesim-openai-client-test", "private": True}, f)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent", OPENAI_PACKAGE],
                           cwd=folder, capture_output=True, text=True, timeout=240)
        if p.returncode != 0:
            raise Skipped(f"npm install {OPENAI_PACKAGE} failed (is the npm registry reachable?): "
                          f"{p.stderr.strip()[-500:]}")
    return folder


@case
def serve_openai_node_client(ctx):
    folder = openai_client_dir(ctx)
    script = os.path.join(folder, "openai_stream.mjs")
    shutil.copy(os.path.join(ctx.source_dir, "tests", "cli", "clients", "openai_stream.mjs"), script)
    with Server(ctx) as s:
        p = subprocess.run(["node", script, f"http://127.0.0.1:{s.port}/v1", MODEL], capture_output=True,
                           text=True, timeout=120)
        print(p.stdout, p.stderr[-2000:])
        check(p.returncode == 0, f"the openai client failed: {p.stderr[-1000:]}")
        out = json.loads(p.stdout.strip().splitlines()[-1])
        chat, completion = out["chat"], out["completion"]
        check(chat["finish"] == "length" and chat["usage"]["completion_tokens"] == 12, f"chat {chat}")
        check(chat["chunks"] >= 3, f"chat streamed {chat['chunks']} chunks")
        check(completion["finish"] == "length" and completion["chunks"] >= 2, f"completion {completion}")
        check(out["whole"]["prompt_tokens"] == 3 and out["whole"]["completion_tokens"] == 4, f"whole {out['whole']}")
        check(out["models"] == [MODEL], f"models {out['models']}")
        check(out["refused"] and out["refused"]["status"] == 400, f"a bad request: {out['refused']}")
        m = s.wait_idle()
        check(metric(m, "vllm:e2e_request_latency_seconds_count") == 3, "three requests served")


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@case
def serve_prometheus_scrapes_metrics(ctx):
    prometheus = shutil.which("prometheus")
    if not prometheus:
        raise Skipped("Debian's prometheus package is not installed")
    # Speculating, so that every series the dashboard reads is exported.
    with Server(ctx, "--num-speculative-tokens", "2", "--self-draft-layers", "1") as s:
        for i in range(5):
            status, _, _ = s.post_json("/v1/completions", {"model": MODEL, "prompt": [3 + i, 4], "max_tokens": 3})
            check(status == 200, f"request {i}: {status}")
        served = metric(s.metrics(), "vllm:time_to_first_token_seconds_count")
        data = tempfile.mkdtemp(prefix="prom-", dir=ctx.work_dir)
        config = os.path.join(data, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n"
                    "scrape_configs:\n  - job_name: servesim\n    static_configs:\n"
                    f"      - targets: ['127.0.0.1:{s.port}']\n")
        web = free_port()
        log = open(os.path.join(data, "prometheus.log"), "w")
        prom = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={data}/tsdb",
                                 f"--web.listen-address=127.0.0.1:{web}"], stdout=log, stderr=log)
        try:
            query = urllib.parse.urlencode({"query": 'vllm:time_to_first_token_seconds_count{job="servesim"}'})
            deadline, value = time.time() + 60, None
            while time.time() < deadline:
                if prom.poll() is not None:
                    raise Skipped(f"prometheus exited ({prom.returncode}); see {log.name}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?{query}", timeout=5) as r:
                        answer = json.load(r)
                    result = answer["data"]["result"]
                    if result:
                        value = float(result[0]["value"][1])
                        labels = result[0]["metric"]
                        if value == served:
                            break
                except OSError:
                    pass
                time.sleep(0.5)
            check(value == served, f"Prometheus read a TTFT count of {value}, the server counted {served}")
            check(labels.get("model_name") == MODEL, f"labels {labels}")
            # A histogram quantile over the scraped buckets, as a dashboard computes it.
            q = urllib.parse.urlencode({"query": "histogram_quantile(0.5, vllm:time_to_first_token_seconds_bucket)"})
            with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?{q}", timeout=5) as r:
                p50 = float(json.load(r)["data"]["result"][0]["value"][1])
            check(0 < p50 < 10, f"P50 TTFT from Prometheus {p50}")
            # Every query of the committed Grafana dashboard is valid PromQL over series the server exports.
            exported = {k.split("{")[0] for k in s.metrics()}
            exported |= {n.rsplit("_", 1)[0] for n in exported if n.endswith(("_bucket", "_count", "_sum"))}
            dashboard = json.load(open(os.path.join(ctx.source_dir, "docs", "grafana",
                                                    "servesim-vllm-dashboard.json")))
            for panel in dashboard["panels"]:
                for target in panel["targets"]:
                    expr = target["expr"].replace("$model_name", MODEL).replace("$__rate_interval", "10s")
                    for name in re.findall(r"vllm:[a-z0-9_]+", expr):
                        check(name in exported, f"panel {panel['title']!r} reads {name}, which /metrics lacks")
                    q = urllib.parse.urlencode({"query": expr})
                    with urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?{q}", timeout=5) as r:
                        check(json.load(r)["status"] == "success", f"panel {panel['title']!r}: {expr}")
        finally:
            prom.terminate()
            prom.wait(10)
            log.close()


if __name__ == "__main__":
    sys.exit(run_case_from_argv(CASES, __doc__))
