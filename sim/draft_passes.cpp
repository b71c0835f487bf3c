#include "sim/draft_passes.h"

#include <algorithm>
#include <stdexcept>

#include <fmt/format.h>

namespace servesim {

void plan_draft_passes(const IterationPlan& target, std::span<const int32_t> draft_cached,
                       std::vector<IterationPlan>& passes) {
  if (draft_cached.size() != target.sequences.size())
    throw std::logic_error("plan_draft_passes: one draft_cached entry per plan item expected");
  int32_t max_drafts = 0;
  for (const ScheduledSequence& item : target.sequences) max_drafts = std::max(max_drafts, proposed_drafts(item));
  const size_t num_passes = target.sequences.empty() ? 0 : size_t(std::max(max_drafts, 1));
  passes.resize(num_passes);
  for (size_t p = 0; p < num_passes; ++p) {
    passes[p].clear();
    passes[p].index = int64_t(p);
  }
  if (num_passes == 0) return;

  for (size_t i = 0; i < target.sequences.size(); ++i) {
    const ScheduledSequence& item = target.sequences[i];
    ScheduledSequence d = item;
    if (item.is_prefill) {
      d.samples = false;  // the draft only builds its KV of the prompt
      d.num_sample_rows = 0;
      passes[0].add(d);
      continue;
    }
    const int32_t c = item.num_cached_tokens, k = proposed_drafts(item);
    if (draft_cached[i] < 0 || draft_cached[i] > c)
      throw std::logic_error(fmt::format("plan_draft_passes: request {} has {} tokens in the draft cache, {} in "
                                         "the target's", item.request_id, draft_cached[i], c));
    d.num_cached_tokens = draft_cached[i];
    d.num_query_tokens = c + 1 - draft_cached[i];
    d.samples = k >= 1;
    d.num_sample_rows = d.samples ? 1 : 0;  // draft 1 from the last row
    passes[0].add(d);
    for (int32_t j = 2; j <= k; ++j) {
      ScheduledSequence next = item;
      next.num_cached_tokens = c + j - 1;
      next.num_query_tokens = 1;
      next.samples = true;
      next.num_sample_rows = 1;
      passes[size_t(j - 1)].add(next);
    }
  }
}

int32_t draft_cached_after(const ScheduledSequence& item, int32_t accepted) {
  const int32_t c = item.num_cached_tokens;
  if (item.is_prefill) return c + item.num_query_tokens;
  const int32_t k = proposed_drafts(item);
  return k >= 1 ? c + std::min(k, accepted + 1) : c + 1;
}

}  // namespace servesim
