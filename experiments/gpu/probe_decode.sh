#!/usr/bin/env bash
# Why do the calibration's and the benchmark's 1-sequence decode steps run
# ~3% slower than the same steps served by the engine (llama-3.1-8b on the
# H200: 4.95 ms against 4.77 ms)? Times 1-sequence steps five ways:
#   bench       servesim_cuda_decoder_bench at context 256 (a direct loop),
#               straight after its ceilings' GEMMs and after a 3 s pause
#   served-24g  servesim run, one request at a time, 24 GiB of KV cache
#   served-1g   the same with 1 GiB of KV cache
#   served-cold the same with --warm-up-tokens 0 (no warm-up, no prepared batches)
#   calibrate   servesim calibrate's progress lines (its decode steps in situ)
# Usage: experiments/gpu/probe_decode.sh OUT_DIR
set -uo pipefail
out=${1:?usage: probe_decode.sh OUT_DIR}
repo=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH="$repo/gpu-bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
b=$repo/gpu-bundle
mkdir -p "$out"
for pause in 0 3000; do  # straight after the ceilings' heavy GEMMs, and after 3 s idle
  flags=()
  [ "$pause" -gt 0 ] && flags=(--pause-ms "$pause")
  timeout 60 "$b/servesim_cuda_decoder_bench" --model llama-3.1-8b --context 256 --decode-steps 200 "${flags[@]}" \
    --json "$out/bench_$pause.json" >"$out/bench_$pause.log" 2>&1
  python3 -c "import json;d=json.load(open('$out/bench_$pause.json'))['decode'];print(f\"bench (pause $pause ms) median {1e3*d['step_s_median']:.3f} ms\")"
done
served() {  # NAME FLAGS...
  local name=$1
  shift
  timeout 60 "$b/servesim" run --device cuda --model llama-3.1-8b --scheduler continuous --arrival closed \
    --concurrency 1 --num-requests 5 --prompt-len fixed:200 --output-len fixed:150 --seed 1 --quiet \
    --out "$out/$name" "$@" >"$out/$name.log" 2>&1
  python3 - "$out/$name/iterations.csv" "$name" <<'PY'
import csv, sys, statistics as st
rows = [r for r in csv.DictReader(open(sys.argv[1])) if r["kind"] == "decode"]
d = [float(r["duration_s"]) for r in rows]
print(f"{sys.argv[2]:11s} median {1e3*st.median(d):.3f} ms over {len(d)} steps (first ten {' '.join(f'{1e3*x:.2f}' for x in d[:10])})")
PY
}
served served-24g --kv-cache-memory 24GiB
served served-1g --kv-cache-memory 1GiB
served served-cold --kv-cache-memory 24GiB --warm-up-tokens 0
timeout 60 "$b/servesim" calibrate --device cuda --model llama-3.1-8b --max-num-batched-tokens 8192 --max-context 4096 \
  --out "$out/profile.json" >"$out/calibrate.log" 2>&1
grep -E "in situ|iteration_overhead" "$out/calibrate.log" | sed 's/^/calibrate   /'
tar -C "$out" -czf "$out/probe.tar.gz" served-24g served-1g served-cold 2>/dev/null
rm -rf "$out"/served-24g "$out"/served-1g "$out"/served-cold
