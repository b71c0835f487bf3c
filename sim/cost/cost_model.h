// A cost model: the seconds one forward pass of an IterationPlan takes on a
// device, as a pure function of the plan (and of the model, hardware and
// settings it was built with). The roofline and the profile model implement
// it; what draws acceptance (speculative decoding), jitter or a drift
// timeline wraps a cost model in the simulated executor
// (sim/cost/simulated_executor.h) and never re-implements it.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sim/iteration_plan.h"

namespace servesim {

class CostModel {
 public:
  virtual ~CostModel() = default;
  virtual std::string name() const = 0;
  // Seconds of `plan` (never empty); the same plan always costs the same.
  virtual double seconds(const IterationPlan& plan) const = 0;
  // False where seconds() reads only the plan's counts and sums, never its
  // items: the scheduler may then leave repeated decodes' items as they were
  // (IterationPlan::items_lag).
  virtual bool needs_plan_items() const { return true; }
  // What summary.json's config.cost_model says of it.
  virtual nlohmann::json describe() const = 0;
};

// Multiplies an iteration's cost in a simulation: a draw of the device's
// noise (sim/cost/cost_jitter.h), or a drift timeline measured on a real run
// (validate/host_drift/). `start_s` is when the iteration starts on the
// simulation's clock.
class CostMultiplier {
 public:
  virtual ~CostMultiplier() = default;
  virtual double factor(const IterationPlan& plan, double start_s) = 0;
  virtual bool needs_plan_items() const { return true; }  // as CostModel's
};

}  // namespace servesim
