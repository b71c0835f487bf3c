#include "sim/cost/communication_model.h"

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

CommunicationModel::CommunicationModel(const ModelSpec& model, const ParallelConfig& parallel,
                                       Interconnect interconnect)
    : model_(model), parallel_(parallel), interconnect_(std::move(interconnect)) {
  const int tp = parallel_.tensor_parallel_size;
  // A preset describes the GPUs of one node; TP across nodes (InfiniBand
  // between them) is not modelled. A measured table costs what it covers.
  if (!interconnect_.measured && tp > kLargestNodeGroup)
    throw InputError(fmt::format("--tensor-parallel-size {}: the {} preset describes up to {} GPUs of one node; "
                                 "tensor parallelism across nodes is not modelled (use --pipeline-parallel-size "
                                 "across nodes, or --interconnect with a table measured at {} ranks)",
                                 tp, interconnect_.name, kLargestNodeGroup, tp));
}

CommunicationBreakdown CommunicationModel::breakdown(const IterationPlan& plan) const {
  const int tp = parallel_.tensor_parallel_size, pp = parallel_.pipeline_parallel_size;
  const double T = double(plan.num_tokens()), S = double(plan.num_sample_rows);
  const double d = double(model_.hidden_size), b = double(model_.dtype_bytes());
  const double L = double(model_.num_hidden_layers), V = double(model_.vocab_size);
  CommunicationBreakdown out;
  if (tp > 1) {
    out.all_reduce = (2 * L + 1) * interconnect_.all_reduce_seconds(tp, T * d * b);
    if (S > 0) out.logits_gather = interconnect_.all_gather_seconds(tp, S * V * b);
  }
  if (pp > 1) out.stage_transfer = double(pp - 1) * interconnect_.send_seconds(2 * T * d * b);
  return out;
}

nlohmann::json CommunicationModel::describe() const {
  return {{"interconnect", interconnect_.to_json()},
          {"all_reduces_per_forward", 2 * model_.num_hidden_layers + 1},
          {"activation_bytes", model_.dtype_bytes()},
          {"how", interconnect_.measured
                      ? "the user's measured all-reduce table (--interconnect); nothing here was timed by servesim"
                      : "analytic: latency floor + bytes x 2(n-1)/n / bus bandwidth of the interconnect preset, "
                        "not measured on this deployment (docs/parallelism.md)"}};
}

}  // namespace servesim
