#include "sim/speculative_cost.h"

#include <algorithm>

#include "sim/draft_passes.h"

namespace servesim {

SpeculativeCostModel::SpeculativeCostModel(Executor& target, Executor& draft, AcceptanceModel acceptance,
                                           int32_t k, uint64_t seed)
    : target_(target), draft_(draft), acceptance_(std::move(acceptance)),
      // A stream of its own: acceptance draws never shift the workload's.
      rng_(seed ^ 0x5eec0de5a11ce5ULL), stats_(k) {
  acceptance_.require_covers(k);
  acceptance_.set_seed(seed);
}

void SpeculativeCostModel::execute(const IterationPlan& plan, IterationResult& result) {
  run(plan, nullptr, result);
}

void SpeculativeCostModel::execute_with_accepted(const IterationPlan& plan, std::span<const int32_t> accepted,
                                                 IterationResult& result) {
  item_accepted_.assign(accepted.begin(), accepted.end());
  item_accepted_.resize(plan.sequences.size(), 0);
  run(plan, item_accepted_.data(), result);
}

void SpeculativeCostModel::run(const IterationPlan& plan, const int32_t* given_accepted, IterationResult& result) {
  const size_t n = plan.sequences.size();
  // The draft's cache length per item; a request not seen yet has the
  // target's (it can only be prefilling, which does not read it).
  item_draft_cached_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    auto it = draft_cached_.find(item.request_id);
    item_draft_cached_[i] = it == draft_cached_.end() ? item.num_cached_tokens
                                                      : std::min(it->second, item.num_cached_tokens);
  }
  plan_draft_passes(plan, item_draft_cached_, passes_);
  double draft_s = 0;
  for (const IterationPlan& pass : passes_) {
    scratch_.reset();
    draft_.execute(pass, scratch_);
    draft_s += scratch_.duration_s;
  }
  scratch_.reset();
  target_.execute(plan, scratch_);

  result.duration_s = draft_s + scratch_.duration_s;
  stats_.add_draft_seconds(draft_s);
  result.emitted_tokens.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    const ScheduledSequence& item = plan.sequences[i];
    const int32_t proposed = proposed_drafts(item);
    int32_t accepted = 0;
    if (!item.is_prefill) {
      if (proposed >= 1) {
        accepted = given_accepted ? std::clamp(given_accepted[i], 0, proposed)
                                  : acceptance_.sample(item.request_id, proposed, rng_);
        stats_.record_step(item.request_id, proposed, accepted);
      } else {
        stats_.record_plain_decode();
      }
    }
    if (item.samples) result.emitted_tokens[i] = accepted + 1;
    draft_cached_[item.request_id] = draft_cached_after(item, accepted);
  }
}

void SpeculativeCostModel::on_request_finished(int64_t request_id) {
  draft_cached_.erase(request_id);
  acceptance_.forget(request_id);
  target_.on_request_finished(request_id);
  draft_.on_request_finished(request_id);
}

}  // namespace servesim
