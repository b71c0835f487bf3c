// How fast the simulator runs: simulated output tokens per second of wall
// time on one core, for Llama-3.1-8B on the h200 datasheet with the chunked
// scheduler, at 10k, 100k and 1M requests (cost should grow linearly); and
// the Mooncake conversation trace (12,031 requests with token identity)
// with prefix caching off and on, side by side (docs/prefix-caching.md).
//
//   build/release/bench/servesim_sim_bench --benchmark_counters_tabular=true
#include <sys/resource.h>

#include <benchmark/benchmark.h>

#include "engine/simulation.h"

namespace {

using namespace servesim;

SimulationSetup bench_setup(int64_t num_requests) {
  SimulationSetup s;
  s.model = resolve_model("llama-3.1-8b");
  s.hardware = resolve_hardware("h200");
  s.scheduler.policy = SchedulerPolicy::Chunked;
  s.workload.arrival = ArrivalProcess::Poisson;
  s.workload.rate = 25.0;  // close to this setup's saturation: batches stay large
  s.workload.num_requests = num_requests;
  s.workload.prompt_len = "lognormal:1024:1.0:16:8192";
  s.workload.output_len = "lognormal:256:1.0:1:2048";
  s.workload.seed = 1;
  return s;
}

double peak_rss_mib() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return double(u.ru_maxrss) / 1024.0;  // ru_maxrss is in KiB on Linux
}

void BM_SimulateChunked(benchmark::State& state) {
  const SimulationSetup setup = bench_setup(state.range(0));
  const Workload workload = make_workload(setup.workload);
  int64_t tokens = 0, iterations = 0;
  for (auto _ : state) {
    SimulationOutput out = simulate_workload(setup, workload);
    tokens += out.summary.output_tokens;
    iterations += out.summary.iterations;
    benchmark::DoNotOptimize(out.summary.ttft_s.mean);
  }
  state.SetItemsProcessed(tokens);  // items/s = simulated output tokens per second
  state.counters["requests"] = double(state.range(0));
  state.counters["sim_iterations"] =
      benchmark::Counter(double(iterations), benchmark::Counter::kAvgIterations);
  state.counters["ns_per_request"] = benchmark::Counter(
      double(state.range(0)) * double(state.iterations()),
      benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

// The whole Mooncake conversation trace at its own rate; --num-gpu-blocks
// 200,000 (3.2M tokens, about an H200's KV space for Llama-3.1-8B at 0.9
// memory use) so caching both hits and evicts.
void BM_SimulateMooncake(benchmark::State& state) {
  SimulationSetup setup = bench_setup(0);
  setup.workload.arrival = ArrivalProcess::Trace;
  setup.workload.trace.path = std::string(SERVESIM_SOURCE_DIR) + "/data/traces/mooncake_conversation.jsonl";
  setup.workload.trace.format = TraceFormat::Mooncake;
  setup.scheduler.num_gpu_blocks = 200'000;
  setup.scheduler.enable_prefix_caching = state.range(0) != 0;
  const Workload workload = make_workload(setup.workload);
  int64_t tokens = 0, hits = 0, queries = 0;
  for (auto _ : state) {
    SimulationOutput out = simulate_workload(setup, workload);
    tokens += out.summary.output_tokens;
    hits = out.summary.prefix_cache.hits_tokens;
    queries = out.summary.prefix_cache.queries_tokens;
    benchmark::DoNotOptimize(out.summary.ttft_s.mean);
  }
  state.SetItemsProcessed(tokens);
  state.SetLabel(state.range(0) ? "prefix caching on" : "prefix caching off");
  state.counters["hit_rate"] = queries > 0 ? double(hits) / double(queries) : 0.0;
  state.counters["peak_rss_MiB"] = peak_rss_mib();
}

BENCHMARK(BM_SimulateMooncake)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->UseRealTime();

BENCHMARK(BM_SimulateChunked)->Arg(10'000)->Arg(100'000)->Arg(1'000'000)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
