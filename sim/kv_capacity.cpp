#include "sim/kv_capacity.h"

#include <cmath>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

// The target's and a separate draft's weights on one GPU (a draft runs at
// the target's TP degree).
double weights_per_gpu(const ModelSpec& model, const DraftModel* draft, const ParallelConfig& parallel) {
  double bytes = weight_bytes_per_gpu(model, parallel);
  if (draft && !draft->shares_target_weights)
    bytes += parallel.single_gpu() ? draft_weight_bytes(*draft) : weight_bytes_per_gpu(draft->spec, parallel);
  return bytes;
}

// Blocks (maybe < 1) that one GPU of `parallel` has room for.
double blocks_that_fit(const ModelSpec& model, const HardwareSpec& hardware, double utilization,
                       int32_t block_size, const DraftModel* draft, const ParallelConfig& parallel) {
  const double weights = weights_per_gpu(model, draft, parallel);
  const double budget = hardware.memory_bytes * utilization - weights;
  const double per_token = kv_bytes_per_token_per_gpu(model, parallel) +
                           (draft ? kv_bytes_per_token_per_gpu(draft->spec, parallel) : 0.0);
  return std::floor(budget / (double(block_size) * per_token));
}

// The smallest TP degree (up to one node's 8 GPUs, of those the model splits
// into) whose GPUs leave room for the KV cache, at the same PP; 0 when none does.
int32_t smallest_fitting_tp(const ModelSpec& model, const HardwareSpec& hardware, double utilization,
                            int32_t block_size, const DraftModel* draft, const ParallelConfig& parallel) {
  for (int32_t tp = parallel.tensor_parallel_size + 1; tp <= 8; ++tp) {
    const ParallelConfig p{tp, parallel.pipeline_parallel_size};
    try {
      p.validate_for(model);
      if (draft) p.validate_for(draft->spec);
    } catch (const InputError&) {
      continue;
    }
    if (blocks_that_fit(model, hardware, utilization, block_size, draft, p) >= 1) return tp;
  }
  return 0;
}

}  // namespace

int64_t kv_capacity_blocks(const ModelSpec& model, const HardwareSpec& hardware,
                           double gpu_memory_utilization, int32_t block_size, const DraftModel* draft,
                           const ParallelConfig& parallel) {
  if (!(gpu_memory_utilization > 0 && gpu_memory_utilization <= 1))
    throw InputError(fmt::format("--gpu-memory-utilization must be in (0, 1] (got {})",
                                 gpu_memory_utilization));
  if (block_size < 1 || block_size > kMaxBlockSize)
    throw InputError(fmt::format("--block-size must be in 1 .. {} (got {})", kMaxBlockSize, block_size));
  const double blocks = blocks_that_fit(model, hardware, gpu_memory_utilization, block_size, draft, parallel);
  if (!(blocks >= 1)) {
    const double weights = weights_per_gpu(model, draft, parallel);
    const int32_t tp = smallest_fitting_tp(model, hardware, gpu_memory_utilization, block_size, draft, parallel);
    const std::string layout = parallel.single_gpu() ? "" : fmt::format(" per GPU at {}", describe_layout(parallel));
    const std::string fix =
        tp ? fmt::format("--tensor-parallel-size {} would leave room (the weights split over {} GPUs)", tp,
                         tp * parallel.pipeline_parallel_size)
           : std::string("no TP degree up to one node's 8 GPUs would (add --pipeline-parallel-size)");
    throw InputError(fmt::format(
        "{} weights{} ({:.1f} GB{}) leave no room for the KV cache in {:.0f}% of {}'s {:.0f} GB; {}; or use a "
        "larger GPU, a higher --gpu-memory-utilization or --quantization",
        model.name, draft && !draft->shares_target_weights ? " and its draft's" : "", weights / 1e9, layout,
        gpu_memory_utilization * 100, hardware.name, hardware.memory_bytes / 1e9, fix));
  }
  return int64_t(std::min(blocks, 2147483647.0));
}

}  // namespace servesim
