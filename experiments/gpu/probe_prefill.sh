#!/usr/bin/env bash
# Why do some prefills on the GPU take twice their kernels' time? Serves the
# light 8B workload four ways and keeps each run's iterations.csv:
#   base    prompts uniform 16..256 (the validation's workload)
#   fixed   every prompt 128 tokens (one GEMM shape for every prefill)
#   eager   as base, CUDA_MODULE_LOADING=EAGER (every kernel loaded at start)
#   repeat  as base, twice in one process is not possible: base again
# Usage: experiments/gpu/probe_prefill.sh OUT_DIR
set -uo pipefail
out=${1:?usage: probe_prefill.sh OUT_DIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$repo/gpu-bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
s=$repo/gpu-bundle/servesim
common=(--device cuda --model llama-3.1-8b --scheduler continuous --arrival poisson --rate 5 --num-requests 40
        --seed 1 --kv-cache-memory 24GiB --max-num-seqs 256 --max-num-batched-tokens 8192 --quiet)
mkdir -p "$out"
for v in base fixed eager repeat; do
  extra=(); envs=()
  [ $v = fixed ] && extra=(--prompt-len fixed:128)
  [ $v = eager ] && envs=(CUDA_MODULE_LOADING=EAGER)
  start=$(date +%s%N)
  env "${envs[@]}" timeout 60 "$s" run "${common[@]}" "${extra[@]}" --out "$out/$v" >"$out/$v.log" 2>&1
  echo "$v: exit $? in $(( ($(date +%s%N) - start) / 1000000 )) ms"
  python3 - "$out/$v/iterations.csv" <<'PY'
import csv, sys, statistics as st
rows = list(csv.DictReader(open(sys.argv[1])))
pf = [r for r in rows if int(r["prefill_tokens"]) > 0]
dc = [float(r["duration_s"]) for r in rows if int(r["prefill_tokens"]) == 0]
print("  prefills (ms, tokens):", " ".join(f"{1e3*float(r['duration_s']):.1f}/{r['prefill_tokens']}" for r in pf))
print(f"  decode median {1e3*st.median(dc):.3f} ms over {len(dc)}")
PY
done
tar -C "$out" -czf "$out/probe.tar.gz" base fixed eager repeat 2>/dev/null; rm -rf "$out"/base "$out"/fixed "$out"/eager "$out"/repeat
