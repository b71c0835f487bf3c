#!/usr/bin/env bash
# Runs a fixed set of simulate and sweep commands (roofline and profile cost
# models, every scheduler, preemption, traces, closed loops, speculation,
# draws, prefix caching under lpm, sessions, TP, PP, replicas behind a
# router) with the servesim binary SERVESIM into OUT, and writes OUT/hashes.txt.
# Two builds' folders compared with compare.py show whether a change moved any
# simulated number (docs/redesign.md).
#
# Usage: tools/simulate_identity/run.sh SERVESIM OUT
set -euo pipefail
[ $# -eq 2 ] || { echo "usage: $0 SERVESIM OUT" >&2; exit 2; }
S=$(realpath "$1"); FINAL=$2
R=$(cd "$(dirname "$0")/../.." && pwd)
# Every run writes into the same path (sweep.json records it), then moves.
OUT=/tmp/servesim_identity_run
rm -rf "$OUT"; mkdir -p "$OUT"
P=$R/experiments/results/cpu/profile.json
SP=$R/experiments/results/speculative
run() { local name=$1; shift; "$S" simulate "$@" --out "$OUT/$name" --quiet > "$OUT/$name.stdout" 2>&1 || echo "exit $?" >> "$OUT/$name.stdout"; }
run default
run rate20 --slo-ttft 500ms --slo-tpot 30ms --rate 20
run static --scheduler static --num-requests 300 --rate 30
run continuous_preempt --scheduler continuous --num-gpu-blocks 2000 --num-requests 400 --rate 40
run chunked_preempt --scheduler chunked --num-gpu-blocks 2000 --num-requests 400 --rate 40
run closed --arrival closed --concurrency 32 --num-requests 200 --model llama-3.2-1b --hardware a100-80gb
run closed_static --arrival closed --concurrency 16 --num-requests 100 --scheduler static --model llama-3.2-1b --hardware h100-sxm
run gamma --arrival gamma --cv 3 --rate 12 --num-requests 500
run trace --trace "$R/data/traces/azure_conv_2023.csv" --rate-scale 4 --max-requests 2000
run lengths --lengths-from-trace "$R/data/traces/azure_code_2023.csv" --num-requests 500 --rate 5
run spec_rate --num-speculative-tokens 4 --draft-model llama-3.2-1b --acceptance-rate 0.7 --num-requests 300
run spec_self --num-speculative-tokens 3 --self-draft-layers 4 --acceptance-curve 0.9,0.8,0.7 --num-requests 300 --rate 4
run spec_beta --num-speculative-tokens 5 --draft-model llama-3.2-1b --acceptance-beta 4:2 --speculative-disable-by-batch-size 16 --num-requests 300
run draws --draws 8 --cost-jitter 0.05 --num-requests 300 --rate 15
run profile --profile "$P" --rate 1 --num-requests 100 --prompt-len uniform:16:256 --output-len uniform:16:128 --seed 1
run profile_chunked --profile "$P" --rate 2.5 --num-requests 100 --prompt-len uniform:16:256 --output-len uniform:16:128 --seed 3 --scheduler chunked
run profile_cont --profile "$P" --rate 5 --num-requests 100 --prompt-len uniform:16:256 --output-len uniform:16:128 --seed 3 --scheduler continuous
run profile_draws --profile "$P" --rate 2.5 --num-requests 100 --prompt-len uniform:16:256 --output-len uniform:16:128 --draws 5 --cost-jitter "$R/experiments/results/cpu/chunked_near-saturation/report.json"
run profile_spec --profile "$SP/profile_small-110m.json" --num-speculative-tokens 4 --draft-model tiny-15m --draft-profile "$SP/profile_tiny-15m.json" --acceptance-rate 0.8 --rate 1 --num-requests 60 --prompt-len uniform:16:256 --output-len uniform:16:128
run profile_selfspec --profile "$SP/profile_small-110m.json" --num-speculative-tokens 3 --self-draft-layers 2 --acceptance-rate 0.6 --rate 1 --num-requests 60 --prompt-len uniform:16:256 --output-len uniform:16:128
run profile_hw --profile "$P" --hardware h200 --rate 2 --num-requests 50 --prompt-len uniform:16:256 --output-len uniform:16:128
run mooncake_lpm --trace "$R/data/traces/mooncake_conversation.jsonl" --trace-format mooncake --max-requests 400 --scheduling-policy lpm --max-num-seqs 16
run sessions --session-turns 4 --think-time 2 --shared-prefix-groups 3 --shared-prefix-len 400 --num-requests 300 --rate 8 --scheduler continuous --num-gpu-blocks 3000
run tp2 --tensor-parallel-size 2 --model llama-3.1-70b --hardware h100-sxm --num-requests 300 --rate 6
run pp2 --pipeline-parallel-size 2 --num-requests 300 --rate 12
run replicas --num-replicas 4 --router prefix-affinity --shared-prefix-groups 8 --shared-prefix-len 300 --num-requests 400 --rate 40
"$S" sweep --grid num-speculative-tokens=0,2,4 --grid max-num-seqs=8,64 --out "$OUT/sweep" --quiet -- --draft-model llama-3.2-1b --acceptance-rate 0.7 --num-requests 200 > "$OUT/sweep.stdout" 2>&1 || echo "sweep exit $?" >> "$OUT/sweep.stdout"
(cd "$OUT" && find . -type f ! -name hashes.txt | sort | xargs sha256sum > hashes.txt)
rm -rf "$FINAL"; mv "$OUT" "$FINAL"
echo "$FINAL: $(wc -l < "$FINAL/hashes.txt") files"
