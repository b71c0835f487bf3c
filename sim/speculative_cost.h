// The cost model of a speculative iteration: the draft's passes (the rule of
// sim/draft_passes.h, costed by the draft's own cost model) followed by one
// verification pass of the target, whose plan already carries k' + 1 query
// tokens per speculating decode. Acceptance is drawn from an
// AcceptanceModel, or given (a replay of a real run's accepted counts).
//
//   iteration seconds = sum over draft passes of draft(pass) + target(plan)
//
// Both cost models (roofline or profile) cost the draft's extra query rows
// and the verification's k' + 1 rows per sequence with the same per-operator
// rules as any other tokens, so the speculative overhead grows with the batch
// exactly as the target's and the draft's GEMMs and attention do: at large
// batches verification turns compute-bound and speculation stops paying.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "sim/acceptance.h"
#include "sim/executor.h"
#include "sim/random.h"
#include "sim/speculative_stats.h"

namespace servesim {

class SpeculativeCostModel final : public Executor {
 public:
  // `target` costs the verification plan, `draft` the draft passes; both
  // must outlive this. k = the run's --num-speculative-tokens (>= 1).
  SpeculativeCostModel(Executor& target, Executor& draft, AcceptanceModel acceptance, int32_t k,
                       uint64_t seed);

  std::string name() const override { return "speculative(" + target_.name() + ")"; }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override;
  const SpeculativeStats* speculative_stats() const override { return &stats_; }

  // Costs `plan` with the drafts each item accepted given (replay of a real
  // run): accepted[i] for decode item i, ignored for the others.
  void execute_with_accepted(const IterationPlan& plan, std::span<const int32_t> accepted,
                             IterationResult& result);

 private:
  void run(const IterationPlan& plan, const int32_t* accepted, IterationResult& result);

  Executor& target_;
  Executor& draft_;
  AcceptanceModel acceptance_;
  Rng rng_;
  SpeculativeStats stats_;
  std::unordered_map<int64_t, int32_t> draft_cached_;  // tokens in the draft's cache per live request
  std::vector<int32_t> item_draft_cached_, item_accepted_;
  std::vector<IterationPlan> passes_;
  IterationResult scratch_;
};

}  // namespace servesim
