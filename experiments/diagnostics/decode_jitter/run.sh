#!/bin/bash
# Does a change to the CPU kernels make the decode step steadier? Builds
# servesim_decode_steps twice, from this tree as it is and from this tree
# with kernels/cpu/cpu_backend.cpp as it was at BASE, then alternates the
# two in short bursts at several batch sizes (compare.py): each burst's
# median step and its jitter (mean deviation of each step from the median
# of its 9 neighbours, which follows this VM's drifting speed).
# Usage: experiments/diagnostics/decode_jitter/run.sh [BASE (802bfb6~1)] [OUT_DIR] [SECONDS (6)] [ROUNDS (4)]
# Run it on an idle machine; it takes about ROUNDS x 10 x SECONDS, after a
# build of the base (a few minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
base=${1:-802bfb6~1}
out=${2:-$root/experiments/results/cpu_xeon/decode_jitter}
seconds=${3:-6}
rounds=${4:-4}
# The program is in tools/ (bench/ in trees before the move); SERVESIM_DECODE_STEPS overrides.
first_program() {  # NAME DIR...: the first DIR/NAME that runs
  local name=$1 dir; shift
  for dir in "$@"; do [ -x "$dir/$name" ] && { echo "$dir/$name"; return 0; }; done
  return 0
}
head_bin=${SERVESIM_DECODE_STEPS:-$(first_program servesim_decode_steps "$root/build/release/tools" "$root/build/release/bench")}
[ -n "$head_bin" ] && [ -x "$head_bin" ] || { echo "build it first: cmake --build build/release --target servesim_decode_steps" >&2; exit 2; }
git -C "$root" rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "BASE '$base' is not a commit of this repository" >&2; exit 2; }

work=$(mktemp -d /tmp/servesim_decode_jitter.XXXXXX)
trap 'rm -rf "$work"' EXIT
echo "building the base (cpu_backend.cpp at $base) in $work ..." >&2
git -C "$root" ls-files -z | (cd "$root" && xargs -0 cp --parents -t "$work")
git -C "$root" show "$base:kernels/cpu/cpu_backend.cpp" > "$work/kernels/cpu/cpu_backend.cpp"
cmake -S "$work" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSERVESIM_CUDA=OFF \
  -DSERVESIM_BUILD_TESTS=OFF >/dev/null
cmake --build "$work/build" --target servesim_decode_steps -j "$(nproc)" >/dev/null

mkdir -p "$out"
{
  echo "command: experiments/diagnostics/decode_jitter/run.sh $*"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)$(git -C "$root" diff --quiet HEAD || echo ' (with local changes)')"
  echo "base: cpu_backend.cpp at $(git -C "$root" rev-parse --short "$base")"
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) cores)"
} > "$out/metadata.txt"
base_bin=$(first_program servesim_decode_steps "$work/build/tools" "$work/build/bench")
[ -n "$base_bin" ] || { echo "the base build made no servesim_decode_steps in $work/build/tools or bench" >&2; exit 2; }
/usr/bin/python3 "$root/experiments/diagnostics/decode_jitter/compare.py" --base "$base_bin" \
  --head "$head_bin" --seconds "$seconds" --rounds "$rounds" --out "$out" | tee "$out/summary.txt"
