#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang++ in a sub-build
# (the main gcc build is not touched) and runs each for a while on a copy of
# its seed corpus (tests/fuzz/corpus/<target>). Fails if any target crashes
# (a sanitizer report, an uncaught exception other than the parser's
# InputError, a violated property, a timeout or running out of memory).
#
#   tests/fuzz/run_fuzzers.sh [--build-dir DIR] [--seconds N] [--jobs N] [TARGET...]
#
#   --build-dir  the sub-build (default build/fuzz); ctest passes <build>/fuzz
#   --seconds    how long each target runs (default 20)
#   --jobs       parallel compile jobs (default 2)
#   TARGET       trace_reader, mooncake_trace, config_json, safetensors,
#                tokenizer_json, tokenizer_encode, openai_request (default: all)
#
# Environment: SERVESIM_FUZZ_CXX picks the compiler (default clang++-14, then
# clang++). Exit status: 0 all ran clean, 1 a crash or a build failure,
# 77 skipped (no clang++ or no libFuzzer runtime; ctest's SKIP_RETURN_CODE).
# A crash leaves its input in <build-dir>/runs/<target>/ (crash-*, oom-*,
# timeout-*); reproduce it with <build-dir>/fuzz_<target> <that file>.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build_dir="$root/build/fuzz"
seconds=20
jobs=2
targets=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build-dir) build_dir="$2"; shift 2 ;;
    --seconds) seconds="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    -*) echo "run_fuzzers.sh: unknown option $1" >&2; exit 1 ;;
    *) targets+=("$1"); shift ;;
  esac
done
if [[ ${#targets[@]} -eq 0 ]]; then
  targets=(trace_reader mooncake_trace config_json safetensors tokenizer_json tokenizer_encode)
  [[ -f "$root/engine/server/openai_request.cpp" ]] && targets+=(openai_request)
fi

# ---- clang++ and libFuzzer's runtime, or skip saying which is missing.
cxx="${SERVESIM_FUZZ_CXX:-}"
if [[ -z "$cxx" ]]; then
  for c in clang++-14 clang++; do
    if command -v "$c" >/dev/null 2>&1; then cxx="$(command -v "$c")"; break; fi
  done
fi
if [[ -z "$cxx" ]]; then
  echo "SKIP: no clang++ (clang++-14 or clang++) on PATH: the fuzz targets need clang's libFuzzer"
  exit 77
fi
probe="$(mktemp -d)"
trap 'rm -rf "$probe"' EXIT
printf '#include <cstddef>\n#include <cstdint>\nextern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n' \
  > "$probe/probe.cpp"
if ! "$cxx" -fsanitize=fuzzer,address,undefined "$probe/probe.cpp" -o "$probe/probe" >"$probe/log" 2>&1; then
  echo "SKIP: $cxx cannot link -fsanitize=fuzzer,address,undefined (libFuzzer's runtime, libclang_rt.fuzzer, is missing?):"
  head -5 "$probe/log"
  exit 77
fi

# ---- configure and build, one build at a time (ctest runs the tests side by side).
mkdir -p "$build_dir"
exec 9>"$build_dir/.lock"
command -v flock >/dev/null 2>&1 && flock 9
if [[ ! -f "$build_dir/build.ninja" && ! -f "$build_dir/Makefile" ]]; then
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  launcher=()
  command -v ccache >/dev/null 2>&1 && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$here" -B "$build_dir" "${generator[@]}" "${launcher[@]}" \
        -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE= >"$build_dir/configure.log" 2>&1 || {
    echo "FAIL: configuring the fuzz sub-build ($build_dir/configure.log):"; tail -20 "$build_dir/configure.log"; exit 1; }
fi
build_targets=()
for t in "${targets[@]}"; do build_targets+=("fuzz_$t"); done
if ! nice -n 10 cmake --build "$build_dir" --parallel "$jobs" --target "${build_targets[@]}" >"$build_dir/build.log" 2>&1; then
  echo "FAIL: building ${build_targets[*]} ($build_dir/build.log):"
  grep -E "error|Error" "$build_dir/build.log" | head -20 || tail -20 "$build_dir/build.log"
  exit 1
fi
flock -u 9 2>/dev/null || true

# ---- run each target on a fresh copy of its corpus.
failed=0
for t in "${targets[@]}"; do
  run="$build_dir/runs/$t"
  rm -rf "$run"
  mkdir -p "$run/corpus"
  if [[ -d "$here/corpus/$t" ]]; then cp "$here/corpus/$t"/* "$run/corpus/" 2>/dev/null || true; fi
  # -error_exitcode: libFuzzer's default (77) is ctest's skip code.
  set +e
  tmp="$run"
  [[ -d /dev/shm && -w /dev/shm ]] && tmp=/dev/shm
  SERVESIM_FUZZ_TMPDIR="$tmp" "$build_dir/fuzz_$t" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -artifact_prefix="$run/" \
      "$run/corpus" >"$run/log" 2>&1
  rc=$?
  set -e
  execs="$(grep -E '^stat::number_of_executed_units' "$run/log" | awk '{print $2}')"
  crashes=$(find "$run" -maxdepth 1 \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) | wc -l)
  if [[ $rc -ne 0 || $crashes -ne 0 ]]; then
    echo "FAIL: fuzz_$t (exit $rc) after ${execs:-?} executions; its log ($run/log) ends:"
    grep -E 'ERROR|SUMMARY|runtime error|fuzz property|terminate|what\(\)|Test unit written' "$run/log" | head -20
    find "$run" -maxdepth 1 \( -name 'crash-*' -o -name 'oom-*' -o -name 'timeout-*' -o -name 'leak-*' \) \
      -exec echo "  input: {}" \;
    failed=1
  else
    echo "ok: fuzz_$t ran ${seconds}s, ${execs:-?} executions, no crash"
  fi
done
exit $failed
