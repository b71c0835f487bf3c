// The cost of a speculative iteration: the draft's passes (the rule of
// sim/draft_passes.h, costed by the draft's own cost model) followed by one
// verification pass of the target, whose plan already carries k' + 1 query
// tokens per speculating decode.
//
//   iteration seconds = sum over draft passes of draft(pass) + target(plan)
//
// Both cost models (roofline or profile) cost the draft's extra query rows
// and the verification's k' + 1 rows per sequence with the same per-operator
// rules as any other tokens, so the speculative overhead grows with the batch
// exactly as the target's and the draft's GEMMs and attention do: at large
// batches verification turns compute-bound and speculation stops paying.
//
// The draft passes depend on how many tokens each request's draft cache
// holds, which follows the drafts each step accepted: DraftCacheState keeps
// that, for a simulation (acceptance drawn) and for a replay of a real run
// (acceptance recorded) alike.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "sim/cost/cost_model.h"
#include "sim/iteration_plan.h"

namespace servesim {

// Tokens in each live request's draft cache.
class DraftCacheState {
 public:
  // d_i for every item of `plan` (sim/draft_passes.h): what the request's
  // draft holds, at most its target's cached tokens; a request not seen yet
  // has the target's (it can only be prefilling, which does not read it).
  void lookup(const IterationPlan& plan, std::vector<int32_t>& draft_cached) const;
  // `item` was verified and accepted `accepted` drafts.
  void advance(const ScheduledSequence& item, int32_t accepted);
  void forget(int64_t request_id) { cached_.erase(request_id); }

 private:
  std::unordered_map<int64_t, int32_t> cached_;
};

class SpeculativeCost {
 public:
  // Both must outlive this.
  SpeculativeCost(const CostModel& target, const CostModel& draft) : target_(target), draft_(draft) {}

  struct Seconds {
    double draft = 0, total = 0;  // the draft passes' part, and the iteration's
  };
  // `plan` with draft caches of draft_cached[i] tokens for its items.
  Seconds seconds(const IterationPlan& plan, std::span<const int32_t> draft_cached) const;

  const CostModel& target() const { return target_; }
  const CostModel& draft() const { return draft_; }

 private:
  const CostModel& target_;
  const CostModel& draft_;
  mutable std::vector<IterationPlan> passes_;  // reused between calls
};

}  // namespace servesim
