// The communication a tensor- and pipeline-parallel forward pass adds to its
// compute, from the interconnect's all-reduce, all-gather and send times
// (sim/interconnect.h). Formulas and sources: docs/parallelism.md.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/interconnect.h"
#include "sim/iteration_plan.h"
#include "sim/model_spec.h"
#include "sim/parallel_config.h"

namespace servesim {

// Seconds of one iteration's communication, summed over the pipeline.
struct CommunicationBreakdown {
  double all_reduce = 0;      // TP: 2 per layer + the vocab-parallel embedding's
  double logits_gather = 0;   // TP: the LM head's logits gathered for the sampler
  double stage_transfer = 0;  // PP: hidden states and residual sent stage to stage
  double total() const { return all_reduce + logits_gather + stage_transfer; }
};

// GPUs in one node's NVLink (or PCIe) domain: a preset costs TP up to this.
inline constexpr int kLargestNodeGroup = 8;

class CommunicationModel {
 public:
  // InputError for a TP degree beyond kLargestNodeGroup on a preset.
  CommunicationModel(const ModelSpec& model, const ParallelConfig& parallel, Interconnect interconnect);

  // T = plan.num_tokens() tokens of d activations in the model's dtype b:
  //   all_reduce     = (2 L + 1) x all_reduce(TP, T d b)   (Megatron-LM's two
  //                    row-parallel outputs per layer, o_proj and down_proj,
  //                    plus vLLM's VocabParallelEmbedding);
  //   logits_gather  = all_gather(TP, S V b) for the S sampling rows;
  //   stage_transfer = (PP - 1) x send(2 T d b)  (vLLM's IntermediateTensors:
  //                    hidden_states and residual).
  CommunicationBreakdown breakdown(const IterationPlan& plan) const;
  double seconds(const IterationPlan& plan) const { return breakdown(plan).total(); }

  const Interconnect& interconnect() const { return interconnect_; }
  // {"interconnect": ..., "all_reduces_per_forward": 2L + 1, "activation_bytes", "how"}.
  nlohmann::json describe() const;

 private:
  ModelSpec model_;
  ParallelConfig parallel_;
  Interconnect interconnect_;
};

}  // namespace servesim
