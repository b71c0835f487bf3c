// An Executor turns an IterationPlan into an IterationResult: the roofline
// and profile cost models predict its duration; the decoder runs it.
// Executors hold no scheduling logic.
#pragma once

#include <string>

#include "sim/iteration_plan.h"

namespace servesim {

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  // Fills `result` (reset by the caller) for `plan` (never empty).
  virtual void execute(const IterationPlan& plan, IterationResult& result) = 0;
};

}  // namespace servesim
