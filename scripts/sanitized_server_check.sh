#!/usr/bin/env bash
# The server's tests under AddressSanitizer and UndefinedBehaviorSanitizer,
# without a whole sanitized build (hours on a 2-core VM): the server's,
# tokenizers' and bench client's sources (engine/server, engine/text,
# engine/client) and the server's unit tests are compiled instrumented and
# linked ahead of a release build's libraries, whose copies of those objects
# the linker then leaves out; the rest (scheduler, decoder) runs
# uninstrumented but under ASan's allocator. Then the server's unit tests and
# the serve CLI cases run with every report fatal.
#   scripts/sanitized_server_check.sh [RELEASE_BUILD_DIR] [OUT_DIR]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:-$root/build/release}" && pwd)"
out="${2:-$build/sanitized}"
mkdir -p "$out/obj"
flags=(-std=c++20 -O1 -g -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
       -fopenmp -DBOOST_ALL_NO_LIB -DFMT_SHARED -I"$root" -I"$root/tests" -isystem /usr/include/eigen3
       -DSERVESIM_SOURCE_DIR="\"$root\"" -DSERVESIM_TEST_DATA_DIR="\"$root/tests/data\"")
objects=()
compile() {  # source -> object, in parallel two at a time
  local src="$1" obj="$out/obj/$(echo "${1#$root/}" | tr / _).o"
  objects+=("$obj")
  # Always compiled (a changed header must reach every object); ccache,
  # where present, makes a rerun cheap.
  ${CCACHE:-$(command -v ccache || true)} g++ "${flags[@]}" -c "$src" -o "$obj" &
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
}
for f in "$root"/engine/server/*.cpp "$root"/engine/text/*.cpp "$root"/engine/client/*.cpp; do compile "$f"; done
lib_objects=("${objects[@]}")
objects=()
for f in "$root"/tests/server/*.cpp "$root"/tests/catch_main.cpp; do compile "$f"; done
test_objects=("${objects[@]}")
wait
# The release build's libraries, in a group (their order of dependence is
# the linker's business); whatever they need from the system after them.
libs=(-Wl,--start-group "$build"/engine/libservesim_*.a "$build/kernels/libservesim_kernels.a"
      "$build/sim/libservesim_sim.a" -Wl,--end-group -lboost_program_options -lfmt -lgomp -lpthread -ldl)
g++ -fsanitize=address,undefined "${test_objects[@]}" "${lib_objects[@]}" "${libs[@]}" -o "$out/servesim_server_tests"
# The servesim binary: its own main and command objects from the release
# build, the instrumented server, text and client objects ahead of the
# libraries.
cli_objects=("$build"/cli/CMakeFiles/servesim.dir/main.cpp.o)
g++ -fsanitize=address,undefined -rdynamic "${cli_objects[@]}" "${lib_objects[@]}" "$build/cli/libservesim_cli.a" \
    "$build/validate/libservesim_validate.a" "$build/calib/libservesim_calib.a" -lbenchmark "${libs[@]}" \
    -o "$out/servesim"

export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export OMP_WAIT_POLICY=PASSIVE
echo "== server unit tests (sanitized)"
"$out/servesim_server_tests"
echo "== serve CLI cases (sanitized servesim)"
failed=0
for script in serve_test.py serve_bench_test.py; do
  for c in $(/usr/bin/python3 "$root/tests/cli/$script" --list); do
    if [ "$c" = serve_memory_flat_over_many_requests ]; then
      # ASan holds freed memory in its quarantine (up to 256 MB) and maps
      # shadow memory as it goes, so RSS grows by design; LeakSanitizer,
      # at every server's exit, is the leak check here.
      echo "skipped $c (RSS under ASan says nothing of leaks)"; continue
    fi
    if /usr/bin/python3 "$root/tests/cli/$script" --servesim "$out/servesim" --source-dir "$root" \
         --work-dir "$out/work" "$c" > "$out/$c.log" 2>&1; then
      echo "passed $c"
    else
      echo "FAILED $c (see $out/$c.log)"; failed=1
    fi
  done
done
# A sanitizer report anywhere in the servers' logs fails the check too.
if grep -l "ERROR: AddressSanitizer\|runtime error:\|ERROR: LeakSanitizer" -r "$out/work" "$out"/*.log 2>/dev/null; then
  echo "sanitizer reports above"; failed=1
fi
exit $failed
