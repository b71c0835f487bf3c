# Thin wrapper over CMake presets. `make run` and `make test` work on a fresh
# Debian 12 machine: they install the Debian packages first.
PRESET ?= release
BUILD_DIR := build/$(PRESET)
JOBS ?= $(shell nproc)

.PHONY: all deps configure build build-servesim run test bench debug-test clean

all: build

deps:
	@scripts/install-deps.sh

configure:
	@cmake --preset $(PRESET) >/dev/null

build: configure
	@cmake --build --preset $(PRESET) -j $(JOBS)

# The servesim binary and what it links, nothing else (no tests, benchmarks
# or tools).
build-servesim: configure
	@cmake --build --preset $(PRESET) -j $(JOBS) --target servesim

# The main job on built-in defaults: Llama-3.1-8B on an H200 datasheet,
# chunked prefill, 1000 Poisson requests at 10 req/s.
run: deps build-servesim
	$(BUILD_DIR)/cli/servesim simulate --out runs/default

test: deps build
	ctest --preset $(PRESET) -j $(JOBS)

# The simulator's speed (in process, then through the CLI as users run it:
# experiments/speed/run.py, its speed.json into the build folder), then the
# CPU decoder's against this machine's STREAM bandwidth and GEMM throughput
# (medians of 5 repetitions; run it on an idle machine: the summary says how
# much CPU other processes took meanwhile).
bench: deps build
	$(BUILD_DIR)/bench/servesim_sim_bench --benchmark_counters_tabular=true
	/usr/bin/python3 experiments/speed/run.py --servesim $(BUILD_DIR)/cli/servesim --out $(BUILD_DIR)/speed
	$(BUILD_DIR)/bench/servesim_decoder_bench --benchmark_counters_tabular=true \
	  --benchmark_repetitions=5 --benchmark_display_aggregates_only=true

# The debug preset: ASan + UBSan, CUDA off.
debug-test: deps
	@$(MAKE) --no-print-directory test PRESET=debug

clean:
	rm -rf build
