#include "sim/cost/speculative_cost.h"

#include <algorithm>

#include "sim/draft_passes.h"

namespace servesim {

void DraftCacheState::lookup(const IterationPlan& plan, std::vector<int32_t>& draft_cached) const {
  draft_cached.resize(plan.sequences.size());
  for (size_t i = 0; i < plan.sequences.size(); ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    auto it = cached_.find(item.request_id);
    draft_cached[i] = it == cached_.end() ? item.num_cached_tokens : std::min(it->second, item.num_cached_tokens);
  }
}

void DraftCacheState::advance(const ScheduledSequence& item, int32_t accepted) {
  cached_[item.request_id] = draft_cached_after(item, accepted);
}

SpeculativeCost::Seconds SpeculativeCost::seconds(const IterationPlan& plan,
                                                  std::span<const int32_t> draft_cached) const {
  plan_draft_passes(plan, draft_cached, passes_);
  Seconds s;
  for (const IterationPlan& pass : passes_) s.draft += draft_.seconds(pass);
  s.total = s.draft + target_.seconds(plan);
  return s;
}

}  // namespace servesim
