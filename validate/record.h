// Recording a real run: every plan it executed and what the executor
// reported for it, taken by an observer of the serving loop; and the plans
// rebuilt from the record for a cost model.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/serving_loop.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/speculative_cost.h"
#include "sim/iteration_plan.h"

namespace servesim {

// One sequence of an executed plan, and what the executor reported for it.
struct RecordedSequence {
  int64_t request_id = 0;
  int32_t num_query_tokens = 0;
  int32_t num_cached_tokens = 0;
  bool is_prefill = false;
  bool samples = false;
  int32_t emitted_tokens = -1;  // -1: the executor left emitted_tokens empty (one token if sampling)
  bool eos = false;             // the executor reported end-of-sequence
};

enum class IterationKind { Decode, Prefill, Mixed };
const char* to_string(IterationKind kind);
// decode: no prefill sequence; prefill: no decode sequence; mixed: both.
IterationKind iteration_kind(int32_t prefill_sequences, int32_t decode_sequences);

struct RecordedIteration {
  std::vector<RecordedSequence> sequences;
  double measured_s = 0;  // IterationResult::duration_s of the real executor
  int32_t prefill_tokens = 0, decode_tokens = 0;
  int32_t prefill_sequences = 0, decode_sequences = 0;
  IterationKind kind() const { return iteration_kind(prefill_sequences, decode_sequences); }
};

// A copy of an executed plan's sequences and what the executor reported for
// them, nothing else.
RecordedIteration record_iteration(const IterationPlan& plan, const IterationResult& result);

// Appends every iteration of the run it observes to `out` (record_iteration).
class IterationRecorder final : public LoopObserver {
 public:
  explicit IterationRecorder(std::vector<RecordedIteration>& out) : out_(out) {}
  void after_iteration(const IterationPlan& plan, const IterationResult& result,
                       const IterationRecord& record) override;

 private:
  std::vector<RecordedIteration>& out_;
};

// Rebuilds a recorded plan for a cost model. Block tables are zero-filled
// spans of the right length (cost models read token counts, not block ids);
// they point into `block_storage`, which must outlive the plan's use.
void rebuild_plan(const RecordedIteration& iteration, int64_t index, int32_t block_size, IterationPlan& plan,
                  std::vector<int32_t>& block_storage);

// The cost `model` predicts for every recorded plan, seconds; each times
// `multiplier`'s factor at the iteration's real start (`starts_s`, one per
// iteration) where one is given.
std::vector<double> cost_recorded(const std::vector<RecordedIteration>& iterations, const CostModel& model,
                                  int32_t block_size, CostMultiplier* multiplier = nullptr,
                                  std::span<const double> starts_s = {});
// The same for a speculative run: each plan's draft passes and verification,
// with the drafts each decode accepted in the real run (emitted - 1).
std::vector<double> cost_recorded(const std::vector<RecordedIteration>& iterations, const SpeculativeCost& model,
                                  int32_t block_size);

}  // namespace servesim
