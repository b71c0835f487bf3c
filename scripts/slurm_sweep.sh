#!/usr/bin/env bash
# Runs a `servesim sweep` or `servesim capacity --search` on a Slurm cluster:
# a job array of N tasks, task I computing shard I/N of the grid into
# OUT/shard-I, and a merge job, dependent on the whole array (afterok), that
# joins the shards into OUT (sweep.csv and sweep.json, or search.csv and
# capacity.json): byte for byte what one machine running the whole grid
# writes. docs/cluster.md has a real run.
#
# Usage: scripts/slurm_sweep.sh [options] -- sweep|capacity ARGS...
#   --shards N          tasks in the array (default 4)
#   --out DIR           where the shards and the merged result go (default runs/slurm-sweep); on a
#                       file system every node sees
#   --servesim PATH     the servesim binary every node runs (default: build/release/cli/servesim)
#   --sbatch "FLAGS"    extra sbatch flags for every job (e.g. "--partition=cpu --time=1:00:00")
#   --wait              return only when the merge job ended, with its exit status
# ARGS are the command's own flags except --shard, --out and --json (the recipe sets them).
# It prints the array's and the merge job's ids (and, with --wait, the merged table).
set -euo pipefail

shards=4 out=runs/slurm-sweep servesim=build/release/cli/servesim extra="" wait=0
while [ $# -gt 0 ]; do
  case "$1" in
    --shards) shards=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --servesim) servesim=$2; shift 2 ;;
    --sbatch) extra=$2; shift 2 ;;
    --wait) wait=1; shift ;;
    --) shift; break ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    *) echo "slurm_sweep.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[ $# -ge 1 ] || { echo "slurm_sweep.sh: give the command after --: sweep ARGS or capacity --search ARGS" >&2; exit 2; }
command=$1; shift
case "$command" in
  sweep|capacity) ;;
  *) echo "slurm_sweep.sh: '$command' is not sweep or capacity" >&2; exit 2 ;;
esac
[[ "$shards" =~ ^[1-9][0-9]*$ ]] || { echo "slurm_sweep.sh: --shards must be a positive integer (got '$shards')" >&2; exit 2; }
for a in "$@"; do
  case "$a" in
    --shard|--shard=*|--out|--out=*|--json)
      echo "slurm_sweep.sh: $a is set by the recipe; drop it" >&2; exit 2 ;;
  esac
done
command -v sbatch > /dev/null || { echo "slurm_sweep.sh: sbatch not found (is this a Slurm login node?)" >&2; exit 2; }
servesim=$(realpath "$servesim")
[ -x "$servesim" ] || { echo "slurm_sweep.sh: $servesim is not an executable servesim" >&2; exit 2; }
mkdir -p "$out"
out=$(realpath "$out")

# A sweep's own flags go before its `--`; --shard and --out are sweep flags.
args=("$@")
quoted=$(printf ' %q' "${args[@]}")
if [ "$command" = sweep ]; then
  task="\"$servesim\" sweep --shard \$SLURM_ARRAY_TASK_ID/$shards --out \"$out/shard-\$SLURM_ARRAY_TASK_ID\" -q$quoted"
else
  task="\"$servesim\" capacity --shard \$SLURM_ARRAY_TASK_ID/$shards --out \"$out/shard-\$SLURM_ARRAY_TASK_ID\" -q$quoted"
fi
shard_dirs=""
for ((i = 0; i < shards; i++)); do shard_dirs+=" \"$out/shard-$i\""; done
merge="\"$servesim\" $command merge --out \"$out\"$shard_dirs"

# shellcheck disable=SC2086
array=$(sbatch --parsable $extra --job-name=servesim-shards --array=0-$((shards - 1)) \
          --output="$out/shard-%a.log" --wrap="$task")
array=${array%%;*}
# shellcheck disable=SC2086
merged=$(sbatch --parsable $extra --job-name=servesim-merge --dependency=afterok:"$array" \
           --output="$out/merge.log" --wrap="$merge")
merged=${merged%%;*}
echo "slurm_sweep.sh: array job $array ($shards tasks), merge job $merged; results in $out"
if [ "$wait" = 1 ]; then
  while squeue -h -j "$array,$merged" 2> /dev/null | grep -q .; do
    # A failed shard leaves the merge waiting for ever on afterok.
    if squeue -h -j "$merged" -o %r 2> /dev/null | grep -q DependencyNeverSatisfied; then
      scancel "$merged"
      echo "slurm_sweep.sh: a shard failed, so the merge cannot run; see $out/shard-*.log" >&2
      exit 1
    fi
    sleep 1
  done
  if [ -f "$out/merge.log" ]; then cat "$out/merge.log"; fi
  if [ "$command" = sweep ]; then [ -f "$out/sweep.json" ]; else [ -f "$out/capacity.json" ]; fi || {
    echo "slurm_sweep.sh: the merge wrote nothing; see $out/shard-*.log and $out/merge.log" >&2; exit 1; }
fi
