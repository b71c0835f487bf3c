#include "engine/warm_up.h"

#include <algorithm>
#include <chrono>
#include <numeric>
#include <vector>

namespace servesim {

nlohmann::json WarmUpReport::to_json() const {
  return {{"prefill_tokens", prefill_tokens}, {"decode_steps", decode_steps}, {"seconds", seconds}};
}

WarmUpReport warm_up(DecoderModel& model, const WarmUpSettings& settings) {
  WarmUpReport report;
  const int64_t bs = model.kv_block_size();
  const int64_t capacity = model.kv_num_blocks() * bs;
  const int64_t decodes = std::max<int64_t>(0, settings.decode_steps);
  const int64_t prefill = std::min<int64_t>(settings.prefill_tokens, capacity - decodes);
  if (settings.prefill_tokens <= 0 || prefill <= 0) return report;

  const auto start = std::chrono::steady_clock::now();
  if (settings.max_batched_tokens > 0 && settings.max_sample_rows > 0)
    model.prepare_batches(settings.max_batched_tokens, settings.max_sample_rows);
  std::vector<int32_t> blocks(size_t((prefill + decodes + bs - 1) / bs));
  std::iota(blocks.begin(), blocks.end(), 0);
  const int64_t vocab = model.spec().vocab_size;
  std::vector<int32_t> ids(static_cast<size_t>(prefill));
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(int64_t(i) % vocab);

  BatchLayout layout;
  layout.add_sequence(ids, 0, blocks, true);
  model.forward(layout);
  for (int64_t step = 0; step < decodes; ++step) {
    const int32_t token = int32_t(step % vocab);
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(&token, 1), int32_t(prefill + step), blocks, true);
    model.forward(layout);
  }
  report.prefill_tokens = int32_t(prefill);
  report.decode_steps = int32_t(decodes);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace servesim
