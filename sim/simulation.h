// One simulation end to end: a workload served by the scheduler with the
// roofline cost model (or a given executor) on a virtual clock. Shared by the
// CLI, the benchmarks and the tests.
#pragma once

#include <functional>
#include <optional>

#include <nlohmann/json.hpp>

#include "sim/acceptance.h"
#include "sim/draft_model.h"
#include "sim/cost_jitter.h"
#include "sim/executor.h"
#include "sim/hardware_spec.h"
#include "sim/metrics.h"
#include "sim/model_spec.h"
#include "sim/roofline_model.h"
#include "sim/runner.h"
#include "sim/scheduler.h"
#include "sim/speculative_stats.h"
#include "sim/workload.h"

namespace servesim {

// Scheduler settings as the user gives them; unset ones take defaults that
// depend on the model, the hardware and the policy.
struct SchedulerSettings {
  SchedulerPolicy policy = SchedulerPolicy::Chunked;
  int32_t max_num_seqs = 256;  // vLLM's default
  // Default: 2048 for chunked (vLLM's chunked-prefill default), otherwise
  // max(max_model_len, 2048) as vLLM V0 without chunking.
  std::optional<int32_t> max_num_batched_tokens;
  int32_t block_size = 16;
  double gpu_memory_utilization = 0.9;
  // Default: kv_capacity_blocks(model, hardware, utilization, block size).
  std::optional<int64_t> num_gpu_blocks;
  // Default: the model's max_position_embeddings; may not exceed it.
  std::optional<int64_t> max_model_len;
  // Speculative decoding (SchedulerConfig).
  int32_t num_speculative_tokens = 0;
  int32_t speculative_disable_by_batch_size = 0;
};

// With `draft`, the KV capacity rule counts its weights and KV (kv_capacity.h).
SchedulerConfig resolve_scheduler_config(const SchedulerSettings& settings, const ModelSpec& model,
                                         const HardwareSpec& hardware, const DraftModel* draft = nullptr);

struct SimulationSetup {
  ModelSpec model;
  HardwareSpec hardware;
  SchedulerSettings scheduler;
  RooflineOptions roofline;
  WorkloadSpec workload;
  SloTargets slo;
  bool keep_iterations = true;
  // Speculative decoding (scheduler.num_speculative_tokens > 0): the draft
  // and the acceptance model (sim/speculative_cost.h).
  std::optional<DraftModel> draft;
  std::optional<AcceptanceModel> acceptance;
  // Each iteration's cost times a multiplier drawn from `jitter`, seeded by
  // `jitter_seed` (sim/cost_jitter.h); none by default.
  CostJitter jitter;
  uint64_t jitter_seed = 0;
};

struct SimulationOutput {
  SchedulerConfig scheduler;  // as resolved
  RunRecords records;
  RunSummary summary;
  std::optional<SpeculativeStats> speculative;  // a speculative run's statistics
};

SimulationOutput simulate(const SimulationSetup& setup,
                          std::function<void(const RunProgress&)> progress = {});
SimulationOutput simulate_workload(const SimulationSetup& setup, const Workload& workload,
                                   std::function<void(const RunProgress&)> progress = {});
// The same with a caller-supplied cost model (the profile model, a test
// executor) on the virtual clock; setup.roofline is not used, and
// setup.hardware only sizes the KV cache when scheduler.num_gpu_blocks is
// unset.
SimulationOutput simulate_with_executor(const SimulationSetup& setup, const Workload& workload,
                                        Executor& executor,
                                        std::function<void(const RunProgress&)> progress = {});

// Parts of summary.json's "config", shared by simulate and run.
nlohmann::json model_to_json(const ModelSpec& model);
nlohmann::json scheduler_to_json(const SchedulerConfig& config, double gpu_memory_utilization);
nlohmann::json workload_to_json(const WorkloadSpec& workload);

// summary.json's config.speculative: k, the batch size that disables it, the
// draft and the acceptance model (null when absent, as in a real run).
nlohmann::json speculative_to_json(const SchedulerConfig& config, const DraftModel* draft,
                                   const AcceptanceModel* acceptance);

// Every setting of the run, for summary.json's "config".
nlohmann::json setup_to_json(const SimulationSetup& setup, const SchedulerConfig& resolved);

}  // namespace servesim
