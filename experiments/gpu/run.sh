#!/usr/bin/env bash
# All of servesim's GPU work in one call of at most 8 minutes:
#   experiments/gpu/run.sh OUT_DIR
# 1. binaries: the prebuilt gpu-bundle/ (scripts/bundle_gpu_binaries.sh, made
#    on a Debian machine with nvcc) if it runs here, else a build here
#    (needs the Debian libraries: Eigen, fmt, Boost, nlohmann-json,
#    Google Benchmark, Catch2);
# 2. the [cuda] tests;
# 3. the decoder's efficiency benchmark (llama-3.1-8b: decode at batch 1
#    against the copy bandwidth, a 4096-token prefill against the bf16 GEMM),
#    and each kernel over its axes against the same ceilings
#    (servesim_cuda_kernels_bench, Google Benchmark JSON);
# 4. full calibrations of llama-3.2-1b and llama-3.1-8b (random weights; seconds on an H200);
# 5. validation of both at three loads with continuous and chunked, then,
#    on the 8B profile, realistic workloads: Azure conversation lengths,
#    long prompts (2k-8k) at token budgets 512, 2048 and 8192, speculative
#    decoding with llama-3.2-1b as the draft (controlled acceptance);
#    prefix caching; one tensor-parallel rank; `serve --device cuda` driven
#    by `bench` and checked by `validate --measured --iteration-log`;
# 6. compute-sanitizer over a reduced [cuda] test set: memcheck on the
#    GEMMs, attention and elementwise kernels, racecheck on attention (last,
#    so that a slow sanitizer cannot starve the measurements);
# 7. a short table (summary.md).
# OUT_DIR receives summary.md, log.txt and results.tar.gz (everything else:
# profiles, reports, test XML, benchmark JSON), few files because the device
# tool brings back at most eight. Each step has its own time limit so that
# one slow step cannot eat the others; a failed step is reported and the
# rest still run. The whole run keeps within SERVESIM_GPU_DEADLINE_S seconds
# (default 480: a device session's 15 minutes leave room for one rerun):
# a step gets at most what is left before it, less 30 s for the summary,
# and a step with under 15 s left is skipped and listed. Exit status: 0
# when every step ran and passed.
set -uo pipefail

out=${1:?usage: experiments/gpu/run.sh OUT_DIR}
mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/servesim-gpu.XXXXXX)
started=$(date +%s)
deadline=${SERVESIM_GPU_DEADLINE_S:-480}
failed=()
skipped=()

log() { echo "[$(($(date +%s) - started))s] $*" | tee -a "$out/log.txt" >&2; }
# step NAME SECONDS COMMAND...: runs with a time limit, logs its output.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((deadline - 30 - ($(date +%s) - started)))
  if [ "$left" -lt 15 ]; then
    log "== $name SKIPPED: ${left}s left before the deadline (${deadline}s)"
    skipped+=("$name")
    return
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  log "== $name (limit ${limit}s): $*"
  if timeout --kill-after=10 "$limit" "$@" >>"$out/log.txt" 2>&1; then
    log "== $name passed"
  else
    log "== $name FAILED (exit $?)"
    failed+=("$name")
  fi
}

# CUDA 13 puts its libraries under lib64 or lib, depending on the package.
export LD_LIBRARY_PATH="$repo/gpu-bundle/lib:/usr/local/cuda/lib64:/usr/local/cuda/lib:/usr/local/cuda/targets/x86_64-linux/lib:${LD_LIBRARY_PATH:-}"
export PATH="/usr/local/cuda/bin:$PATH"
# Where the toolkit's own libraries are missing, the CUDA 13 wheels beside
# PyTorch hold the same cudart and cuBLAS.
for d in /opt/torch/.venv/lib/python3*/site-packages/nvidia/cu13/lib /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib; do
  [ -d "$d" ] && LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$d"
done

# --- 1. binaries ---------------------------------------------------------------
if [ -x "$repo/gpu-bundle/servesim" ] && "$repo/gpu-bundle/servesim" --help >/dev/null 2>&1; then
  bin=$repo/gpu-bundle
  servesim=$bin/servesim tests=$bin/servesim_cuda_tests bench=$bin/servesim_cuda_decoder_bench
  kbench=$bin/servesim_cuda_kernels_bench query=$bin/servesim_device_query
  log "using the prebuilt binaries in gpu-bundle/"
else
  log "no runnable gpu-bundle/: building here"
  [ -x "$repo/gpu-bundle/servesim" ] && { ldd "$repo/gpu-bundle/servesim" | grep 'not found'; "$repo/gpu-bundle/servesim" --help 2>&1 | head -3; } >>"$out/log.txt" 2>&1
  build=$work/build
  step build 300 bash -c "cmake -S '$repo' -B '$build' -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVESIM_CUDA=ON \
      -DSERVESIM_BUILD_BENCH=ON && cmake --build '$build' -j \$(nproc) --target servesim servesim_cuda_tests \
      servesim_cuda_decoder_bench servesim_cuda_kernels_bench servesim_device_query"
  servesim=$build/cli/servesim tests=$build/tests/servesim_cuda_tests
  bench=$build/bench/servesim_cuda_decoder_bench query=$build/kernels/servesim_device_query
  kbench=$build/bench/servesim_cuda_kernels_bench
fi
if [ ! -x "$servesim" ]; then
  log "no servesim binary: stopping"
  exit 1
fi

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  # The bundle's commit first: the device's copy of .git can be older than the tree.
  echo "commit: $(cat "$repo/gpu-bundle/commit.txt" 2>/dev/null || git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null)"
  echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //') ($(nproc) cores)"
} >"$work/machine.txt"
cat "$work/machine.txt" >>"$out/log.txt"
ldd "$servesim" | grep -E "cuda|cublas|not found" >>"$out/log.txt" 2>&1
step device-query 30 "$query"
# Clocks, power and temperature once a second through every later step, to
# tell a cost-model error from the GPU changing its clocks under load.
nvidia-smi dmon -s pc -o T >"$work/dmon.txt" 2>&1 &
dmon=$!
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw,utilization.gpu --format=csv >>"$out/log.txt" 2>&1

# --- 2. tests --------------------------------------------------------------------
# The console reporter: a test case that fails shows its expressions, and
# --durations prints each case as it ends, so a run cut short shows where.
step cuda-tests 100 "$tests" --durations yes --out "$work/cuda_tests.txt"
tail -n 40 "$work/cuda_tests.txt" >>"$out/log.txt" 2>/dev/null

# --- 3. efficiency benchmark ---------------------------------------------------------
step bench 60 "$bench" --model llama-3.1-8b --json "$work/bench_llama-3.1-8b.json"
# Decode through cuBLASLt alone (SERVESIM_SMALL_M_GEMM=off), beside the
# small-M kernel of the run above.
step bench-cublaslt-decode 60 env SERVESIM_SMALL_M_GEMM=off "$bench" --model llama-3.1-8b \
  --json "$work/bench_llama-3.1-8b_cublaslt-decode.json"
# The same with the mma prefill attention (SERVESIM_PREFILL_ATTENTION=mma:
# not the default until a run like this one has checked and timed it).
step bench-mma-prefill 60 env SERVESIM_PREFILL_ATTENTION=mma "$bench" --model llama-3.1-8b \
  --json "$work/bench_llama-3.1-8b_mma-prefill.json"
# Every kernel over its axes (GEMMs at M = 1 .. 64 by both paths, decode and
# prefill attention); experiments/gpu/summarize.py tabulates the shares.
step kernels 60 "$kbench" --model llama-3.1-8b --benchmark_min_time=0.01 \
  --benchmark_out="$work/kernels_llama-3.1-8b.json" --benchmark_out_format=json

# --- 4 and 5. calibration and validation -------------------------------------------------
# Prompts uniform 16..256, outputs 16..128 (run's defaults). The rates are
# first guesses for an H200 (light, about saturation, past it); the summary
# shows the throughput each reached. Iterations of up to 8192 tokens (both
# schedulers) and contexts of at most 384 tokens: the calibration's
# grids reach 8192 tokens and 4096 positions, so nothing is extrapolated.
validate() {  # MODEL LOADS LIMIT [MAX_CONTEXT]
  step "validate-$1" "$3" /usr/bin/env python3 "$repo/experiments/validation_cpu/run.py" --servesim "$servesim" \
    --device cuda --model "$1" --out "$work/validation/$1" --loads "$2" --host-drift off \
    --calibrate-args="--max-num-batched-tokens 8192 --max-context ${4:-4096}" \
    --validate-args="--kv-cache-memory 24GiB --max-num-seqs 256 --max-num-batched-tokens 8192"
}
validate llama-3.2-1b "light:10:60,near-saturation:150:300,overloaded:600:300" 100
# The 8B calibration reaches 8192 positions: the realistic workloads below
# have prompts up to 8k tokens.
validate llama-3.1-8b "light:5:40,near-saturation:60:200,overloaded:240:200" 150 8192
# The server on the GPU (issue 31), right after the profile it needs: serve
# --device cuda with its iteration log, bench at 0.1 and 0.5 of the
# profile's capacity (simulated at 1000 req/s offered), validate --measured
# with the 8B profile, the server's KV blocks and the log.
step serve-cuda 120 /usr/bin/env python3 "$repo/experiments/serve_bench/run.py" --servesim "$servesim" \
  --device cuda --model llama-3.1-8b --profile "$work/validation/llama-3.1-8b/profile.json" \
  --out "$work/serve_bench" --serve-args="--kv-cache-memory 24GiB" --capacity-rate 1000
# Realistic workloads on that profile (issue 33), loads as fractions of the
# profile's simulated capacity for each workload's own lengths.
realistic() {  # NAME LIMIT SCHEDULERS LOADS WORKLOAD_ARGS VALIDATE_ARGS
  step "realistic-$1" "$2" /usr/bin/env python3 "$repo/experiments/validation_cpu/run.py" --servesim "$servesim" \
    --device cuda --model llama-3.1-8b --profile "$work/validation/llama-3.1-8b/profile.json" \
    --out "$work/realistic/$1" --schedulers "$3" --loads "$4" --host-drift off --predict-draws 11 \
    --workload-args="$5" --validate-args="--kv-cache-memory 24GiB --max-num-seqs 256 $6"
}
realistic azure-conversation 120 continuous,chunked "light:x0.2:24,near-saturation:x0.7:64,overloaded:x1.2:64" \
  "--lengths-from-trace $repo/data/traces/azure_conv_2023.csv --trace-format azure --max-model-len 16384" \
  "--max-num-batched-tokens 8192"
for budget in 512 2048 8192; do
  realistic "long-prompts-budget-$budget" 60 chunked "light:x0.2:16,near-saturation:x0.7:32" \
    "--prompt-len uniform:2048:8192 --output-len uniform:16:128" "--max-num-batched-tokens $budget"
done
realistic speculative-1b-draft 90 continuous,chunked "light:x0.2:24,near-saturation:x0.7:48" "" \
  "--max-num-batched-tokens 8192 --draft-model llama-3.2-1b --num-speculative-tokens 4 --acceptance-rate 0.7"
# Prefix caching (docs/prefix-caching.md): a shared-prefix workload and a
# Mooncake replay at 32 tokens per hash id, both schedulers, on the profile
# the step above calibrated.
step prefix-caching 200 /usr/bin/env python3 "$repo/experiments/prefix_caching/validate.py" --servesim "$servesim" \
  --device cuda --model llama-3.1-8b --profile "$work/validation/llama-3.1-8b/profile.json" \
  --out "$work/prefix_caching" --attempts 1 --predict-draws 11
# Tensor parallelism's calibrated path (docs/parallelism.md): one rank of
# llama-3.1-70b at TP 8 (8 heads, 1 KV head, MLP 3584, 16032 vocabulary rows:
# 17.6 GB of bf16 weights) timed on this one GPU, then a TP 8 prediction from
# that profile (communication analytic, nvlink4) beside the roofline's.
step tensor-parallel 120 bash -c "'$servesim' calibrate --device cuda --quick --model llama-3.1-70b \
    --tensor-parallel-size 8 --max-num-batched-tokens 2048 --max-context 2048 --out '$work/tp8/profile.json' && \
  '$servesim' simulate --profile '$work/tp8/profile.json' --hardware h200 --num-requests 300 --rate 4 \
    --out '$work/tp8/profile_prediction' -q && \
  '$servesim' simulate --model llama-3.1-70b --hardware h200 --tensor-parallel-size 8 --num-requests 300 \
    --rate 4 --out '$work/tp8/roofline_prediction' -q"
nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw --format=csv >>"$out/log.txt" 2>&1

kill "$dmon" 2>/dev/null

# --- 6. compute-sanitizer ----------------------------------------------------------------
# Catch2 test specs: the product kernels, attention and the elementwise
# kernels under memcheck; attention (shared-memory tiles) under racecheck.
if command -v compute-sanitizer >/dev/null; then
  step memcheck 75 compute-sanitizer --tool memcheck --error-exitcode 1 --leak-check full "$tests" \
    "cuda Gemm*,cuda small-M*,*attention*,*rmsnorm*,*rotary*,*swiglu*,*embedding*,*select_tokens*"
  step racecheck 60 compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" \
    "prefill attention*,decode attention replays*"
else
  log "== compute-sanitizer: not on this host, skipped"
fi

# --- 7. summary ------------------------------------------------------------------------------
{
  echo "# servesim GPU check"
  echo
  sed 's/^/    /' "$work/machine.txt"
  echo
  echo "failed steps: ${failed[*]:-none}; skipped at the deadline: ${skipped[*]:-none}; wall time $(($(date +%s) - started)) s"
  echo
  /usr/bin/env python3 "$repo/experiments/gpu/summarize.py" "$work" 2>&1
} >"$out/summary.md"
cat "$out/summary.md" >&2
tar -C "$work" -czf "$out/results.tar.gz" . 2>>"$out/log.txt"
rm -rf "$work"
[ ${#failed[@]} -eq 0 ] && [ ${#skipped[@]} -eq 0 ]
