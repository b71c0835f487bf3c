#!/bin/bash
# Watches this machine's decode and GEMM speed beside its threads' placement
# (placement.h, with the host-drift code) for SECONDS (default 300), then plots it.
# Usage: experiments/diagnostics/placement/run.sh [OUT_DIR] [SECONDS]
set -euo pipefail
root=$(cd "$(dirname "$0")/../../.." && pwd)
out=${1:-$root/experiments/results/cpu/placement}
seconds=${2:-300}
# The program is in tools/ (bench/ in trees before the move).
watch=$root/build/release/tools/servesim_placement_watch
[ -x "$watch" ] || watch=$root/build/release/bench/servesim_placement_watch
[ -x "$watch" ] || { echo "build it first: cmake --build build/release --target servesim_placement_watch" >&2; exit 2; }
mkdir -p "$out"
{
  echo "command: experiments/diagnostics/placement/run.sh $*"
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git -C "$root" rev-parse --short HEAD)"
  echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //') ($(nproc) cores)"
} > "$out/metadata.txt"
"$watch" --seconds "$seconds" > "$out/watch.csv"
/usr/bin/python3 "$root/experiments/diagnostics/placement/plot.py" "$out/watch.csv" "$out/watch.png" | tee "$out/medians.txt"
