// A tensor- and pipeline-parallel group's iteration: one rank's compute at
// the sharded shapes (a roofline or a profile of the TP shard) plus the
// communication between ranks and stages. Nothing overlaps: vLLM runs its
// all-reduces on the compute stream, and a sequence's step passes every
// stage in turn, so a step's latency is the sum of its stages and transfers.
#pragma once

#include <memory>

#include "sim/cost/communication_model.h"
#include "sim/cost/cost_model.h"

namespace servesim {

class ParallelCostModel final : public CostModel {
 public:
  ParallelCostModel(std::unique_ptr<CostModel> rank_compute, CommunicationModel communication,
                    ParallelConfig parallel);

  std::string name() const override { return compute_->name(); }
  double seconds(const IterationPlan& plan) const override {
    return compute_->seconds(plan) + communication_.seconds(plan);
  }
  // Communication reads the plan's token and row counts alone.
  bool needs_plan_items() const override { return compute_->needs_plan_items(); }
  // The compute model's description with "parallel": layout and communication.
  nlohmann::json describe() const override;

  const CommunicationModel& communication() const { return communication_; }
  const CostModel& rank_compute() const { return *compute_; }

 private:
  std::unique_ptr<CostModel> compute_;
  CommunicationModel communication_;
  ParallelConfig parallel_;
};

}  // namespace servesim
