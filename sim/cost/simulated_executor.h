// The executor of a simulation: a cost model under the virtual clock.
//
// Each iteration lasts the cost model's seconds for its plan, times every
// CostMultiplier attached (a draw of the device's noise, a drift timeline).
// With speculation it also decides what each verification accepted, drawn
// from an AcceptanceModel, and costs the draft's passes by the draft's cost
// model (sim/cost/speculative_cost.h). It holds no scheduling logic and no
// cost rule of its own.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/acceptance.h"
#include "sim/clock.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/speculative_cost.h"
#include "sim/executor.h"
#include "sim/random.h"
#include "sim/speculative_stats.h"

namespace servesim {

class SimulatedExecutor final : public Executor {
 public:
  // `target` and `clock` (the simulation's, read for the multipliers) must
  // outlive this.
  SimulatedExecutor(const CostModel& target, const Clock& clock);

  // Speculative decoding: `draft` costs the draft passes (outlives this),
  // `acceptance` decides each verification, k >= 1 drafts at most, `seed`
  // seeds acceptance's own stream.
  void speculate(const CostModel& draft, AcceptanceModel acceptance, int32_t k, uint64_t seed);
  // Every iteration's cost is multiplied by `multiplier` (outlives this),
  // after those added before it.
  void multiply_by(CostMultiplier& multiplier) { multipliers_.push_back(&multiplier); }

  std::string name() const override;
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override;
  bool emits_one_token_per_sequence() const override { return !speculation_; }
  bool needs_plan_items() const override;

  // What speculation did so far; nullptr without speculation.
  const SpeculativeStats* speculative_stats() const { return speculation_ ? &speculation_->stats : nullptr; }

 private:
  struct Speculation {
    Speculation(const CostModel& target, const CostModel& draft, AcceptanceModel acceptance, int32_t k,
                uint64_t seed);
    SpeculativeCost cost;
    AcceptanceModel acceptance;
    Rng rng;
    SpeculativeStats stats;
    DraftCacheState draft_cache;
    std::vector<int32_t> draft_cached;  // per item of the current plan
  };

  const CostModel& target_;
  const Clock& clock_;
  std::optional<Speculation> speculation_;
  std::vector<CostMultiplier*> multipliers_;
};

}  // namespace servesim
