#include "sim/cost/parallel_cost_model.h"

namespace servesim {

ParallelCostModel::ParallelCostModel(std::unique_ptr<CostModel> rank_compute, CommunicationModel communication,
                                     ParallelConfig parallel)
    : compute_(std::move(rank_compute)), communication_(std::move(communication)), parallel_(parallel) {}

nlohmann::json ParallelCostModel::describe() const {
  nlohmann::json j = compute_->describe();
  j["parallel"] = parallel_.to_json();
  j["parallel"]["communication"] = communication_.describe();
  j["parallel"]["compute"] = "one rank's kernels at the TP shard's shapes, every stage of the pipeline in turn";
  return j;
}

}  // namespace servesim
