#include "sim/scheduler_settings.h"

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/kv_capacity.h"

namespace servesim {

SchedulerConfig resolve_scheduler_config(const SchedulerSettings& s, const ModelSpec& model,
                                         const HardwareSpec& hardware, const DraftModel* draft,
                                         const ParallelConfig& parallel) {
  SchedulerConfig c;
  c.policy = s.policy;
  c.max_num_seqs = s.max_num_seqs;
  c.block_size = s.block_size;
  c.num_speculative_tokens = s.num_speculative_tokens;
  c.speculative_disable_by_batch_size = s.speculative_disable_by_batch_size;
  c.enable_prefix_caching = s.enable_prefix_caching;
  c.waiting_order = s.waiting_order;
  c.max_model_len = s.max_model_len.value_or(model.max_position_embeddings);
  if (c.max_model_len > model.max_position_embeddings)
    throw InputError(fmt::format("--max-model-len {} exceeds {}'s max_position_embeddings {}",
                                 c.max_model_len, model.name, model.max_position_embeddings));
  if (s.max_num_batched_tokens) {
    c.max_num_batched_tokens = *s.max_num_batched_tokens;
  } else if (s.policy == SchedulerPolicy::Chunked) {
    c.max_num_batched_tokens = 2048;
  } else {
    c.max_num_batched_tokens = int32_t(std::min<int64_t>(std::max<int64_t>(c.max_model_len, 2048), INT32_MAX));
  }
  if (s.num_gpu_blocks) {
    c.num_gpu_blocks = *s.num_gpu_blocks;
  } else {
    c.num_gpu_blocks = kv_capacity_blocks(model, hardware, s.gpu_memory_utilization, s.block_size, draft, parallel);
  }
  c.validate();
  return c;
}

}  // namespace servesim
