"""llama.cpp as a third-party engine for servesim's checks: install
node-llama-cpp (prebuilt CPU binaries, from the npm registry) into a local
folder, write a random-weight GGUF of a servesim model's shape, and start
tools/llamacpp/server.mjs (OpenAI-compatible) on a free port.

Used by tests/cli/llamacpp_test.py and experiments/llamacpp_bench/run.py."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# Pinned: the version whose prebuilt linux-x64 CPU binaries were tried here.
PACKAGES = ["node-llama-cpp@3.22.1", "@node-llama-cpp/linux-x64@3.22.1"]


class Unavailable(Exception):
    """The engine cannot be had here (no node/npm, or the registry refused)."""


def install(folder, timeout_s=300):
    """node-llama-cpp in `folder`/node_modules (once), server.mjs beside it.
    --ignore-scripts: no postinstall build or download; the prebuilt binaries
    come as the @node-llama-cpp/linux-x64 package, named explicitly so the
    optional GPU variants (CUDA, Vulkan) are not fetched."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise Unavailable("node or npm is not installed (Debian's nodejs and npm packages are needed)")
    if not os.path.isdir(os.path.join(folder, "node_modules", "@node-llama-cpp", "linux-x64")):
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "package.json"), "w") as f:
            json.dump({"name": "servesim-llamacpp-engine", "private": True, "type": "module"}, f)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--silent", "--omit=optional",
                            "--ignore-scripts", *PACKAGES], cwd=folder, capture_output=True, text=True,
                           timeout=timeout_s)
        if p.returncode != 0:
            raise Unavailable(f"npm install {' '.join(PACKAGES)} failed (is the npm registry reachable?): "
                              f"{p.stderr.strip()[-500:]}")
    shutil.copy(os.path.join(HERE, "server.mjs"), os.path.join(folder, "server.mjs"))
    return folder


def write_model(servesim, model, out_dir, seed=1):
    """`model`'s config.json (from `servesim models --config-json`) and a GGUF
    of random weights with its shape; returns the GGUF's path."""
    os.makedirs(out_dir, exist_ok=True)
    config = os.path.join(out_dir, f"{model}.config.json")
    gguf = os.path.join(out_dir, f"{model}.gguf")
    p = subprocess.run([servesim, "models", "--model", model, "--config-json"], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"servesim models --config-json failed: {p.stderr}")
    with open(config, "w") as f:
        f.write(p.stdout)
    subprocess.run([sys.executable, os.path.join(HERE, "write_gguf.py"), "--config", config, "--out", gguf,
                    "--seed", str(seed), "--name", model], check=True, capture_output=True)
    return gguf


class LlamaCppServer:
    """server.mjs on a free port; `with` stops it with SIGTERM."""

    def __init__(self, folder, gguf, name, parallel=16, ctx_per_seq=1024, batch_size=512, threads=1,
                 log_path=None, start_timeout_s=120):
        cmd = ["node", os.path.join(folder, "server.mjs"), "--model", gguf, "--port", "0",
               "--served-model-name", name, "--parallel", str(parallel), "--ctx-per-seq", str(ctx_per_seq),
               "--batch-size", str(batch_size), "--threads", str(threads)]
        self.command = cmd
        self.log = open(log_path, "w") if log_path else None
        self.proc = subprocess.Popen(cmd, cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.lines, self.port = [], None
        deadline = time.time() + start_timeout_s
        while self.port is None:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError(f"server.mjs exited ({self.proc.wait()}) before listening: "
                                   f"{''.join(self.lines)[-2000:]}")
            self._keep(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m:
                self.port = int(m.group(1))
            elif time.time() > deadline:
                self.stop()
                raise RuntimeError(f"server.mjs did not listen within {start_timeout_s} s")
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self._drain, daemon=True).start()

    def _keep(self, line):
        self.lines.append(line)
        if self.log:
            self.log.write(line)
            self.log.flush()

    def _drain(self):
        for line in self.proc.stderr:
            self._keep(line)

    def stderr(self):
        return "".join(self.lines)

    def stop(self, timeout_s=30):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.log:
            self.log.close()
            self.log = None
        return self.proc.returncode

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
