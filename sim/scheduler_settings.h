// Scheduler settings as the user gives them, and the configuration they
// resolve to for a model and a device.
#pragma once

#include <cstdint>
#include <optional>

#include "sim/draft_model.h"
#include "sim/hardware_spec.h"
#include "sim/model_spec.h"
#include "sim/parallel_config.h"
#include "sim/scheduler.h"

namespace servesim {

// Unset settings take defaults that depend on the model, the hardware and
// the policy.
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
  // Prefix caching (SchedulerConfig).
  bool enable_prefix_caching = true;
  WaitingOrder waiting_order = WaitingOrder::Fcfs;
};

// With `draft`, the KV capacity rule counts its weights and KV; with
// `parallel`, num_gpu_blocks is what one GPU of the group holds (kv_capacity.h).
// Throws InputError naming the flag of a bad or inconsistent setting.
SchedulerConfig resolve_scheduler_config(const SchedulerSettings& settings, const ModelSpec& model,
                                         const HardwareSpec& hardware, const DraftModel* draft = nullptr,
                                         const ParallelConfig& parallel = {});

}  // namespace servesim
