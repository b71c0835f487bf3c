// The real engine: the simulator's scheduler and runner with the built-in
// decoder as executor and the wall clock. A run differs from a simulation of
// the same workload only in the executor and the clock.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/speculative_setup.h"
#include "kernels/decoder/warm_up.h"
#include "sim/metrics.h"
#include "sim/runner.h"
#include "sim/simulation.h"
#include "sim/speculative_stats.h"
#include "sim/workload.h"

namespace servesim {

struct EngineSetup {
  std::string device = "cpu";          // "cpu", "cuda" or "cuda:N" (parse_device)
  ModelSpec model;
  std::optional<std::string> weights_dir;  // safetensors; random weights when unset
  uint64_t weights_seed = 0;
  int threads = 0;                     // CPU threads, 0 = every core
  DecoderExecutorOptions decoding;
  SchedulerSettings scheduler;         // num_gpu_blocks unset: from kv_cache_bytes
  // With scheduler.num_speculative_tokens > 0: the draft and the acceptance
  // rule. The KV cache memory then holds the target's and the draft's caches.
  SpeculativeSetup speculative;
  double kv_cache_bytes = 1.0 * (1 << 30);
  // Passes on each decoder before the clock starts (kernels/decoder/warm_up.h);
  // the prefill is capped by the scheduler's token budget.
  WarmUpSettings warm_up;
  WorkloadSpec workload;
  SloTargets slo;
};

struct EngineOutput {
  SchedulerConfig scheduler;  // as resolved
  std::string device;         // as the decoder describes itself
  std::string weights_source;
  double weight_bytes = 0, kv_cache_bytes = 0;  // KV: the target's and the draft's caches together
  WarmUpReport warm_up, draft_warm_up;          // before the clock started
  RunRecords records;
  RunSummary summary;
  // A speculative run: the draft as built and what speculation did.
  std::string draft_weights_source;
  double draft_weight_bytes = 0, draft_kv_cache_bytes = 0;
  std::optional<SpeculativeStats> speculative;
  // ServeHooks::between_iterations calls that did something, and the wall
  // seconds the clock was stopped for them.
  int64_t clock_stops = 0;
  double clock_stopped_s = 0;
};

// K and V of one token in every layer, as the CPU decoder stores them (fp32).
double cpu_kv_bytes_per_token(const ModelSpec& model);

// KV blocks that fit in `bytes` when the decoder stores K and V in fp32;
// with a draft, blocks of both caches (a block id holds the same positions
// in each).
int64_t cpu_kv_blocks(const ModelSpec& model, double bytes, int32_t block_size, const ModelSpec* draft = nullptr);
// The same for the decoder on `device` (bf16 K and V on CUDA).
int64_t decoder_kv_blocks(const ModelSpec& model, const DeviceChoice& device, double bytes, int32_t block_size,
                          const ModelSpec* draft = nullptr);

// The scheduler configuration serve() runs with: num_gpu_blocks from
// kv_cache_bytes unless the settings give it. Throws InputError, also for
// inconsistent speculative settings (check_speculative_setup).
SchedulerConfig engine_scheduler_config(const EngineSetup& setup);

// Lets a caller wrap the decoder executor, e.g. to record every plan and its
// measured time (validation). The wrapper forwards execute(),
// on_request_finished() and speculative_stats() to `decoder` (a
// DecoderExecutor, or a SpeculativeExecutor when the run speculates) and is
// used for the whole run.
using ExecutorWrapper = std::function<std::unique_ptr<Executor>(Executor& decoder)>;

// Called with the decoder executor serve() built (not a wrapper): just
// before the clock starts (after the warm-up) and just after the run, when
// no request holds KV blocks. Validation times whole-model iterations on
// the served decoder there (calib/in_situ_refresh.h): on the 2-core VM two
// copies of the same weights ran the same decode step up to 9% apart, so a
// copy of its own would not time the served one.
struct ServeHooks {
  std::function<void(Executor& decoder)> before_run, after_run;
  // When the engine is idle until the next arrival at `until_s` on the
  // run's clock (now: `now_s`), see Runner::on_idle.
  std::function<void(Executor& decoder, double now_s, double until_s)> on_idle;
  // After every iteration (Runner::after_iteration, `last`), with the run's clock
  // stopped while it runs (WallClock::stopped_while): its time counts in no
  // request's latency and in no iteration. Returns whether it did anything
  // (EngineOutput::clock_stops counts those calls). Requests hold KV
  // blocks then: it must use blocks of its own (probe_kv_blocks) and
  // request ids outside the workload's.
  std::function<bool(Executor& decoder, double now_s, const IterationRecord& last)> between_iterations;
  // KV blocks the decoder holds beyond the scheduler's, block ids
  // num_gpu_blocks .. num_gpu_blocks + probe_kv_blocks - 1, for the hooks'
  // own plans; the scheduler never hands them out.
  int64_t probe_kv_blocks = 0;
};

// Builds the decoder (and the draft when scheduler.num_speculative_tokens >
// 0), serves the workload in real time and summarises it.
// `on_ready` is called once the weights are loaded and the decoders warmed
// up (progress), before the clock starts. With `wrap`, the runner drives the wrapper instead.
EngineOutput serve(const EngineSetup& setup, const Workload& workload,
                   std::function<void(const RunProgress&)> progress = {},
                   std::function<void(const std::string&)> on_ready = {},
                   const ExecutorWrapper& wrap = {}, const ServeHooks& hooks = {});

nlohmann::json engine_setup_to_json(const EngineSetup& setup, const EngineOutput& out);

}  // namespace servesim
