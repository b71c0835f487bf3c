// The roofline cost model: predicts an iteration's time from datasheet
// numbers, with no calibration (what-if for hardware you do not have).
//
// Each operator costs max(FLOPs / (peak x compute_efficiency),
//                          bytes / (bandwidth x memory_efficiency))
// (Williams, Waterman & Patterson, "Roofline", CACM 2009), operators run one
// after another, and the iteration adds a fixed overhead. Per-operator
// roofline as in LLMCompass and Vidur's analytical fallback.
//
// Quantization (ModelSpec::quantization, docs/quantization.md): the linear
// layers' weight bytes as stored, their inputs in 8 bits for W8A8, the
// GEMMs' peak of their compute dtype (HardwareSpec::gemm_flops), the K and V
// bytes as cached, the work quantization adds (W8A8 activation quantization
// as an elementwise pass), and efficiencies relative to the bf16 ones per
// dtype (quantized_gemm_efficiency, kv_attention_efficiency).
#pragma once

#include <cstdint>
#include <vector>

#include "sim/cost/cost_model.h"
#include "sim/hardware_spec.h"
#include "sim/model_spec.h"
#include "sim/parallel_config.h"

namespace servesim {

// Multipliers on RooflineOptions' compute and memory efficiencies.
struct RelativeEfficiency {
  double compute = 1.0;
  double memory = 1.0;
};
// The GEMMs of a weight dtype (none: 1, 1).
RelativeEfficiency quantized_gemm_efficiency(WeightQuantization q);
// Attention over an 8-bit KV cache (auto: 1, 1); decode or prefill kernels.
RelativeEfficiency kv_attention_efficiency(KvCacheDtype d, bool decode);

struct RooflineOptions {
  // Fraction of dense bf16 peak that large GEMMs reach (docs/cost-models.md
  // gives the figures this default comes from).
  double compute_efficiency = 0.70;
  // Fraction of datasheet bandwidth that streaming kernels reach.
  double memory_efficiency = 0.85;
  // Host-side scheduling, launch and sampling synchronisation per iteration:
  // an assumption for a CUDA-graph engine, to be replaced by a calibrated
  // profile.
  double iteration_overhead_s = 200e-6;
  // Host-side cost per sequence that samples a token in an iteration: the
  // sampler, detokenizing, stop checks and the engine's per-request
  // bookkeeping, which grow with the batch (Vidur's CPU-overhead predictors
  // are functions of the batch size for this reason). 0 (not modelled)
  // unless given or fitted (`fit --fit-parameters ...,sequence-overhead`).
  double sequence_overhead_s = 0;

  void validate() const;  // InputError naming the flag
};

// Seconds spent in each operator class for one iteration (summed over layers).
struct RooflineBreakdown {
  double qkv_proj = 0, o_proj = 0, gate_up_proj = 0, down_proj = 0;
  double prefill_attention = 0, decode_attention = 0;
  double elementwise = 0;  // norms, rotary, SwiGLU, residual adds, embedding
  double lm_head = 0;      // final norm, LM head and sampling of sampling sequences
  double overhead = 0;
  double total() const {
    return qkv_proj + o_proj + gate_up_proj + down_proj + prefill_attention + decode_attention +
           elementwise + lm_head + overhead;
  }
};

class RooflineModel final : public CostModel {
 public:
  // With `parallel`, the time of one rank of a TP group at the sharded
  // shapes (rank_shape), every pipeline stage in turn; the sampler still
  // reads the whole vocabulary's logits. Communication is not included
  // (ParallelCostModel adds it).
  RooflineModel(const ModelSpec& model, const HardwareSpec& hardware, const RooflineOptions& options,
                const ParallelConfig& parallel = {});

  std::string name() const override { return "roofline"; }
  double seconds(const IterationPlan& plan) const override { return breakdown(plan).total(); }
  // {executor: "roofline", compute_efficiency, memory_efficiency, iteration_overhead_s}.
  nlohmann::json describe() const override;
  RooflineBreakdown breakdown(const IterationPlan& plan) const;
  // The plan's counts and sums are all it reads (see attention_terms).
  bool needs_plan_items() const override { return false; }

  // Prefill and decode attention's FLOPs and bytes (one layer): from the
  // plan's AttentionSums where that is exact (always, short of sums near
  // 2^52), else summed item by item.
  struct AttentionTerms {
    double prefill_flops = 0, prefill_bytes = 0, decode_flops = 0, decode_bytes = 0;
  };
  AttentionTerms attention_terms(const IterationPlan& plan) const;
  AttentionTerms attention_terms_by_items(const IterationPlan& plan) const;

  // One operator's time under the roofline (bf16 peak and efficiencies) ...
  double op_time(double flops, double bytes) const;
  // ... and with another peak and relative efficiencies.
  double op_time(double flops, double bytes, double peak_flops, RelativeEfficiency e) const;

 private:
  // The linear layers' and elementwise times of a batch of `tokens` query
  // tokens, and the LM head's of `rows` sampling rows: functions of that
  // count alone, tabulated for the counts most iterations have (a simulation
  // asks for them every iteration) and computed beyond.
  struct TokenCosts {
    double qkv_proj = 0, o_proj = 0, gate_up_proj = 0, down_proj = 0, elementwise = 0;
  };
  TokenCosts token_costs(int64_t tokens) const;
  double lm_head_time(int64_t rows) const;
  static constexpr int64_t kTabulatedTokens = 2049;  // vLLM's default token budget, 2048, included
  static constexpr int64_t kTabulatedRows = 513;

  ModelSpec model_;
  HardwareSpec hardware_;
  RooflineOptions options_;
  RankShape rank_;
  double flops_per_s_;  // peak x compute efficiency
  double bytes_per_s_;  // bandwidth x memory efficiency
  double gemm_peak_;    // the GEMMs' dense peak in their compute dtype
  // Bytes of the checkpoint's dtype, read once: ModelSpec::dtype_bytes
  // compares strings, too dear for every iteration.
  int dtype_bytes_;
  bool whole_attention_terms_ = false;  // each item's attention FLOPs and bytes are whole numbers
  std::vector<TokenCosts> by_tokens_;     // [tokens] for tokens < kTabulatedTokens
  std::vector<double> lm_head_by_rows_;  // [rows] for rows < kTabulatedRows
};

}  // namespace servesim
