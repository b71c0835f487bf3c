#include "sim/kv_capacity.h"

#include <cmath>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

int64_t kv_capacity_blocks(const ModelSpec& model, const HardwareSpec& hardware,
                           double gpu_memory_utilization, int32_t block_size, const DraftModel* draft) {
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    throw InputError(fmt::format("--gpu-memory-utilization must be in (0, 1] (got {})",
                                 gpu_memory_utilization));
  if (block_size < 1)
    throw InputError(fmt::format("--block-size must be >= 1 (got {})", block_size));
  const double weights = model.weight_bytes() + (draft ? draft_weight_bytes(*draft) : 0.0);
  const double budget = hardware.memory_bytes * gpu_memory_utilization - weights;
  const double block_bytes =
      double(block_size) * (model.kv_bytes_per_token() + (draft ? draft->spec.kv_bytes_per_token() : 0.0));
  const double blocks = std::floor(budget / block_bytes);
  if (!(blocks >= 1))
    throw InputError(fmt::format(
        "{} weights{} ({:.1f} GB) leave no room for the KV cache in {:.0f}% of {}'s {:.0f} GB; "
        "use a larger GPU or a higher --gpu-memory-utilization",
        model.name, draft && !draft->shares_target_weights ? " and its draft's" : "", weights / 1e9, gpu_memory_utilization * 100, hardware.name,
        hardware.memory_bytes / 1e9));
  return int64_t(std::min(blocks, 2147483647.0));
}

}  // namespace servesim
