#!/usr/bin/python3
"""The built-in CPU decoder's logits against an independent numpy forward pass.

For each variant, `decoder_logits --write-model` writes a tiny random model
(model.safetensors + config.json) into the scratch folder; then the C++
decoder computes logits for a fixed token sequence twice (one prefill with
every row sampled, and a prefill of the first half followed by token-by-token
decode through the paged KV cache), and llama_numpy.py computes them in
float64 from the same files. Per variant and mode the check is

    max |logits_cpp - logits_numpy| <= RTOL * max |logits_numpy|

with RTOL = 1e-5 (fp32 arithmetic against float64 on identical weights; the
observed error is about 3e-7, and a tolerance of 1e-4 would let e.g. a
tenfold rms_norm_eps pass), and
the argmax of every row equal (unless the oracle's top two logits are within
that tolerance of each other, a tie that fp32 rounding may break either way).

    check_oracle.py --tool PATH/decoder_logits --scratch DIR
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ORACLE = os.path.join(HERE, "llama_numpy.py")
RTOL = 1e-5
NUM_TOKENS = 23  # not a multiple of the block size (4): the last block is partly filled

# name, --model-type, --dtype, tied, seed
VARIANTS = [
    ("llama-F32-untied", "llama", "F32", False, 11),
    ("llama-BF16-tied", "llama", "BF16", True, 12),
    ("qwen2-F16-bias-theta1e6", "qwen2", "F16", False, 13),
]


def run_json(cmd):
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}:\n{proc.stderr}")
    return json.loads(proc.stdout)


def compare(name, mode, got, want, rows):
    """got: [R, V] from C++; want: the oracle's [T, V]; rows: positions of got's rows."""
    want = want[rows]
    if got.shape != want.shape:
        return False, f"{mode}: shape {got.shape} != oracle {want.shape}"
    if not np.all(np.isfinite(got)):
        return False, f"{mode}: non-finite logits"
    scale = float(np.max(np.abs(want)))
    tol = RTOL * scale
    diff = float(np.max(np.abs(got - want)))
    bad_argmax = []
    for r in range(want.shape[0]):
        a_got, a_want = int(np.argmax(got[r])), int(np.argmax(want[r]))
        if a_got != a_want:
            top2 = np.sort(want[r])[-2:]
            if top2[1] - top2[0] > tol:
                bad_argmax.append((int(rows[r]), a_got, a_want))
    ok = diff <= tol and not bad_argmax
    msg = (f"{mode} {len(rows)} rows max|diff| {diff:.2e} = {diff / scale:.1e} x max|logit| "
           f"{scale:.3g} (limit {RTOL:.0e})")
    if bad_argmax:
        msg += f", argmax differs at (position, cpp, oracle) {bad_argmax}"
    else:
        msg += ", argmax equal"
    return ok, msg


def check_variant(tool, scratch, name, model_type, dtype, tied, seed):
    model_dir = os.path.join(scratch, name)
    shutil.rmtree(model_dir, ignore_errors=True)
    cmd = [tool, "--write-model", model_dir, "--model-type", model_type, "--dtype", dtype,
           "--seed", str(seed)]
    if tied:
        cmd.append("--tied")
    subprocess.run(cmd, check=True)

    rng = random.Random(seed)
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    tokens = ",".join(str(rng.randrange(vocab)) for _ in range(NUM_TOKENS))

    want = np.array(run_json([sys.executable, ORACLE, model_dir, "--tokens", tokens])["logits"])
    # Sanity of the oracle itself: finite, and not the same row everywhere.
    if not np.all(np.isfinite(want)) or np.allclose(want, want[0]):
        return False, "the numpy oracle produced degenerate logits"

    results = []
    for mode, extra in (("prefill", []), ("cached", ["--cached"])):
        out = run_json([tool, "--model", model_dir, "--tokens", tokens, "--seed", str(seed)] + extra)
        results.append(compare(name, mode, np.array(out["logits"]), want, np.array(out["positions"])))
    return all(ok for ok, _ in results), "; ".join(msg for _, msg in results)


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tool", required=True, help="the decoder_logits executable")
    ap.add_argument("--scratch", required=True, help="folder for the written models")
    args = ap.parse_args(argv)
    os.makedirs(args.scratch, exist_ok=True)

    failed = 0
    for name, model_type, dtype, tied, seed in VARIANTS:
        try:
            ok, msg = check_variant(args.tool, args.scratch, name, model_type, dtype, tied, seed)
        except Exception as e:  # a crash is a failure of that variant, reported like one
            ok, msg = False, f"error: {e}"
        print(f"{'ok  ' if ok else 'FAIL'} {name}: {msg}")
        failed += not ok
    if failed:
        print(f"{failed} of {len(VARIANTS)} variants disagree with the numpy oracle")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
