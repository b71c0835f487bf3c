// How many KV blocks fit on a device once the weights are loaded.
#pragma once

#include <cstdint>

#include "sim/draft_model.h"
#include "sim/hardware_spec.h"
#include "sim/model_spec.h"
#include "sim/parallel_config.h"

namespace servesim {

// --block-size's range (SchedulerConfig::validate checks it too; the KV
// capacity is sized first, so it checks it as well).
inline constexpr int32_t kMaxBlockSize = 4096;

// floor((memory x utilization - weight bytes) / (block_size x KV bytes per
// token)), as vLLM sizes its cache (without its activation-peak profiling).
// With a draft, its weights join the target's and each block holds the
// draft's KV beside the target's (same block ids). With `parallel`, on one
// GPU of the group: its share of the weights (weight_bytes_per_gpu) and of
// each token's KV (kv_bytes_per_token_per_gpu); a block then holds its
// stage's layers and its ranks' KV heads of block_size tokens. Throws
// InputError when the weights leave no room for a single block, naming the
// smallest TP degree that would.
int64_t kv_capacity_blocks(const ModelSpec& model, const HardwareSpec& hardware,
                           double gpu_memory_utilization, int32_t block_size,
                           const DraftModel* draft = nullptr, const ParallelConfig& parallel = {});

}  // namespace servesim
