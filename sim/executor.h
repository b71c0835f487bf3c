// An Executor turns an IterationPlan into an IterationResult: in a
// simulation a cost model predicts its duration (sim/cost/simulated_executor.h);
// in a real run the decoder runs it. Executors hold no scheduling logic.
#pragma once

#include <cstdint>
#include <string>

#include "sim/iteration_plan.h"

namespace servesim {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Fills `result` (reset by the caller) for `plan` (never empty).
  virtual void execute(const IterationPlan& plan, IterationResult& result) = 0;
  // True when every execute() emits exactly one token for each sampling
  // sequence and finishes none early (result.emitted_tokens and
  // result.finished left empty): the serving loop may then run a stretch of
  // repeated decode steps without asking per sequence (serving_loop.cpp).
  virtual bool emits_one_token_per_sequence() const { return false; }
  // False where execute() reads only the plan's counts and sums
  // (IterationPlan::AttentionSums), never its items: repeated decode steps
  // may then leave the items as they were (IterationPlan::items_lag).
  virtual bool needs_plan_items() const { return true; }
  // The request has completed: state kept for it (its tokens) can go. A
  // preempted request is not finished; it comes back to be recomputed.
  virtual void on_request_finished(int64_t request_id) { (void)request_id; }
};

}  // namespace servesim
