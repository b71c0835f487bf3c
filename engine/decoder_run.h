// A real run: the one scheduler and serving loop (engine/serving_loop.h)
// with the built-in decoder as executor and the wall clock. A run differs
// from a simulation of the same workload only in the executor and the clock.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/serving_loop.h"
#include "engine/warm_up.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/decoder_precision.h"
#include "kernels/decoder/served_executor.h"
#include "kernels/decoder/device_choice.h"
#include "kernels/decoder/speculative_setup.h"
#include "sim/clock.h"
#include "sim/metrics.h"
#include "sim/scheduler_settings.h"
#include "sim/speculative_stats.h"
#include "sim/workload.h"

namespace servesim {

struct EngineSetup {
  std::string device = "cpu";          // "cpu", "cuda" or "cuda:N" (parse_device)
  ModelSpec model;
  std::optional<std::string> weights_dir;  // safetensors; random weights when unset
  uint64_t weights_seed = 0;
  int threads = 0;                     // CPU threads, 0 = every core
  // How the decoder (and its draft) store weights and KV cache (--dtype,
  // --quantization, --kv-cache-dtype); checked against the device by run_engine.
  DecoderPrecision precision;
  DecoderExecutorOptions decoding;
  SchedulerSettings scheduler;         // num_gpu_blocks unset: from kv_cache_bytes
  // With scheduler.num_speculative_tokens > 0: the draft and the acceptance
  // rule. The KV cache memory then holds the target's and the draft's caches.
  SpeculativeSetup speculative;
  double kv_cache_bytes = 1.0 * (1 << 30);
  // Passes on each decoder before the clock starts (engine/warm_up.h);
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
};

// K and V of one token in every layer, as the CPU decoder stores them at
// `precision` (fp32 by default).
double cpu_kv_bytes_per_token(const ModelSpec& model, const DecoderPrecision& precision = {});

// KV blocks that fit in `bytes` when the CPU decoder stores K and V at
// `precision`; with a draft, blocks of both caches (a block id holds the
// same positions in each; the draft's cache at the same precision).
int64_t cpu_kv_blocks(const ModelSpec& model, double bytes, int32_t block_size, const ModelSpec* draft = nullptr,
                      const DecoderPrecision& precision = {});
// The same for the decoder on `device` (bf16 K and V on CUDA).
int64_t decoder_kv_blocks(const ModelSpec& model, const DeviceChoice& device, double bytes, int32_t block_size,
                          const ModelSpec* draft = nullptr, const DecoderPrecision& precision = {});

// The scheduler configuration run_engine() runs with: num_gpu_blocks from
// kv_cache_bytes unless the settings give it. Throws InputError, also for
// inconsistent speculative settings (check_speculative_setup).
SchedulerConfig engine_scheduler_config(const EngineSetup& setup);

struct EngineRunOptions {
  std::function<void(const RunProgress&)> progress;
  // Once the weights are loaded and the decoders warmed up, before the
  // clock starts: a line saying what was built.
  std::function<void(const std::string&)> on_ready;
  // Watch the run (a validation's recording, validate/host_drift/).
  std::vector<LoopObserver*> observers;
  // Called with the served executor (a DecoderExecutor, or a
  // SpeculativeExecutor when the run speculates) just before the clock
  // starts and just after the run, when no request holds KV blocks.
  std::function<void(Executor& served)> before_run, after_run;
  // KV blocks the decoder holds beyond the scheduler's, block ids
  // num_gpu_blocks .. num_gpu_blocks + extra_kv_blocks - 1, for an
  // observer's own plans; the scheduler never hands them out.
  int64_t extra_kv_blocks = 0;
  // The run's clock, made just before the loop starts (after before_run); a
  // WallClock when unset.
  std::function<std::unique_ptr<Clock>()> make_clock;
};

// Builds the decoder (and the draft when scheduler.num_speculative_tokens >
// 0), warms them up, serves the workload in real time and summarises it.
EngineOutput run_engine(const EngineSetup& setup, const Workload& workload, const EngineRunOptions& options = {});

// The decoder of `setup` (and its draft when it speculates) built and
// warmed up, to serve requests as they come (`servesim serve`), with the
// scheduler configuration it runs under and a line saying what was built.
struct ServedDecoder {
  SchedulerConfig scheduler;
  std::unique_ptr<ServedExecutor> executor;  // a DecoderExecutor or a SpeculativeExecutor
  EngineOutput description;  // device, weights, KV bytes, warm-ups (no records)
  std::string ready_line;
};
// Throws InputError for whatever run_engine refuses.
ServedDecoder build_served_decoder(const EngineSetup& setup);

nlohmann::json engine_setup_to_json(const EngineSetup& setup, const EngineOutput& out);

}  // namespace servesim
