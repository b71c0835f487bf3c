#include "sim/cost/simulated_executor.h"

#include "sim/draft_passes.h"

namespace servesim {

SimulatedExecutor::Speculation::Speculation(const CostModel& target, const CostModel& draft,
                                            AcceptanceModel acceptance_model, int32_t k, uint64_t seed)
    : cost(target, draft),
      acceptance(std::move(acceptance_model)),
      // A stream of its own: acceptance draws never shift the workload's.
      rng(seed ^ 0x5eec0de5a11ce5ULL),
      stats(k) {
  acceptance.require_covers(k);
  acceptance.set_seed(seed);
}

SimulatedExecutor::SimulatedExecutor(const CostModel& target, const Clock& clock)
    : target_(target), clock_(clock) {}

void SimulatedExecutor::speculate(const CostModel& draft, AcceptanceModel acceptance, int32_t k, uint64_t seed) {
  speculation_.emplace(target_, draft, std::move(acceptance), k, seed);
}

std::string SimulatedExecutor::name() const {
  return speculation_ ? "speculative(" + target_.name() + ")" : target_.name();
}

void SimulatedExecutor::execute(const IterationPlan& plan, IterationResult& result) {
  if (!speculation_) {
    result.duration_s = target_.seconds(plan);
  } else {
    Speculation& s = *speculation_;
    s.draft_cache.lookup(plan, s.draft_cached);
    const SpeculativeCost::Seconds cost = s.cost.seconds(plan, s.draft_cached);
    result.duration_s = cost.total;
    s.stats.add_draft_seconds(cost.draft);
    result.emitted_tokens.assign(plan.sequences.size(), 0);
    for (size_t i = 0; i < plan.sequences.size(); ++i) {
      const ScheduledSequence& item = plan.sequences[i];
      const int32_t proposed = proposed_drafts(item);
      int32_t accepted = 0;
      if (!item.is_prefill) {
        if (proposed >= 1) {
          accepted = s.acceptance.sample(item.request_id, proposed, s.rng);
          s.stats.record_step(item.request_id, proposed, accepted);
        } else {
          s.stats.record_plain_decode();
        }
      }
      if (item.samples) result.emitted_tokens[i] = accepted + 1;
      s.draft_cache.advance(item, accepted);
    }
  }
  for (CostMultiplier* m : multipliers_) result.duration_s *= m->factor(plan, clock_.now());
}

bool SimulatedExecutor::needs_plan_items() const {
  if (speculation_ || target_.needs_plan_items()) return true;
  for (const CostMultiplier* m : multipliers_)
    if (m->needs_plan_items()) return true;
  return false;
}

void SimulatedExecutor::on_request_finished(int64_t request_id) {
  if (!speculation_) return;
  speculation_->draft_cache.forget(request_id);
  speculation_->acceptance.forget(request_id);
}

}  // namespace servesim
