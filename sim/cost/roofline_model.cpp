#include "sim/cost/roofline_model.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {

void RooflineOptions::validate() const {
  if (!(compute_efficiency > 0 && compute_efficiency <= 1))
    throw InputError(fmt::format("--compute-efficiency must be in (0, 1] (got {})", compute_efficiency));
  if (!(memory_efficiency > 0 && memory_efficiency <= 1))
    throw InputError(fmt::format("--memory-efficiency must be in (0, 1] (got {})", memory_efficiency));
  if (!(iteration_overhead_s >= 0) || !std::isfinite(iteration_overhead_s))
    throw InputError(fmt::format("--iteration-overhead must be >= 0 (got {})", iteration_overhead_s));
  if (!(sequence_overhead_s >= 0) || !std::isfinite(sequence_overhead_s))
    throw InputError(fmt::format("--sequence-overhead must be >= 0 (got {})", sequence_overhead_s));
}

// Defaults and their sources: docs/quantization.md.
RelativeEfficiency quantized_gemm_efficiency(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::None: return {1.0, 1.0};
    // W8A8: small-M GEMMs gain 1.25-1.7x over bf16 (not the 2x of their
    // bytes), large ones ~1.6x (not the 2x of the peak).
    case WeightQuantization::Fp8:
    case WeightQuantization::Int8: return {0.80, 0.75};
    // Weight-only (Marlin-style): near the bytes' gain at small batch, the
    // dequantization inside the GEMM costs compute at large batch.
    case WeightQuantization::W8A16:
    case WeightQuantization::W4A16: return {0.75, 0.95};
  }
  return {1.0, 1.0};
}

RelativeEfficiency kv_attention_efficiency(KvCacheDtype d, bool decode) {
  if (d == KvCacheDtype::Auto) return {1.0, 1.0};
  // 8-bit K and V dequantized on load: decode at ~0.7x bf16's bandwidth
  // efficiency, prefill 3-25% slower (taken at ~12%).
  return decode ? RelativeEfficiency{1.0, 0.70} : RelativeEfficiency{0.89, 1.0};
}

RooflineModel::RooflineModel(const ModelSpec& model, const HardwareSpec& hardware,
                             const RooflineOptions& options, const ParallelConfig& parallel)
    : model_(model), hardware_(hardware), options_(options) {
  parallel.validate_for(model_);
  rank_ = rank_shape(model_, ParallelConfig{parallel.tensor_parallel_size, 1});
  options_.validate();
  hardware_.validate(hardware_.name);
  flops_per_s_ = hardware_.bf16_flops * options_.compute_efficiency;
  bytes_per_s_ = hardware_.memory_bandwidth * options_.memory_efficiency;
  gemm_peak_ = hardware_.gemm_flops(model_.quantization.weights);  // InputError: the device lacks the dtype
  dtype_bytes_ = model_.dtype_bytes();  // InputError: an unknown torch_dtype
  const double kv_token = model_.quantization.kv_bytes_per_token_layer(double(rank_.kv_heads),
                                                                       double(model_.head_dim), dtype_bytes_);
  whole_attention_terms_ = std::floor(kv_token) == kv_token;
  // Filled here, not on first use: one model serves many threads (capacity).
  by_tokens_.resize(kTabulatedTokens);
  for (int64_t t = 0; t < kTabulatedTokens; ++t) by_tokens_[size_t(t)] = token_costs(t);
  lm_head_by_rows_.resize(kTabulatedRows);
  for (int64_t s = 0; s < kTabulatedRows; ++s) lm_head_by_rows_[size_t(s)] = lm_head_time(s);
}

double RooflineModel::op_time(double flops, double bytes) const {
  return std::max(flops / flops_per_s_, bytes / bytes_per_s_);
}

double RooflineModel::op_time(double flops, double bytes, double peak_flops, RelativeEfficiency e) const {
  return std::max(flops / (peak_flops * options_.compute_efficiency * e.compute),
                  bytes / (bytes_per_s_ * e.memory));
}

RooflineModel::TokenCosts RooflineModel::token_costs(int64_t tokens) const {
  // One TP rank's share (at TP 1, the model's own sizes): heads, KV heads,
  // MLP width; T query tokens in the batch.
  const double d = double(model_.hidden_size), I = double(rank_.intermediate);
  const double H = double(rank_.heads), Hkv = double(rank_.kv_heads);
  const double dh = double(model_.head_dim);
  const double L = double(model_.num_hidden_layers), b = double(dtype_bytes_);
  const double T = double(tokens);
  const double q_out = H * dh, kv_out = Hkv * dh, qkv_out = q_out + 2 * kv_out;

  // Unquantized weights keep the expressions they always had (below,
  // beside the quantized ones): the same sums in another order would move
  // every committed prediction in its last bits.
  const Quantization& quant = model_.quantization;
  const int checkpoint_bytes = dtype_bytes_;
  const double a_in = quant.activation_bytes(checkpoint_bytes);
  const RelativeEfficiency gemm_eff = quantized_gemm_efficiency(quant.weights);

  // GEMM [T, K] x [K, N]: 2*T*K*N FLOPs at the compute dtype's peak; bytes =
  // weights as stored (+ scales) + input T*K (8-bit for W8A8) + output T*N,
  // each read or written once (weights dominate at small T).
  auto gemm = [&](double K, double N) {
    if (quant.weights == WeightQuantization::None) return op_time(2 * T * K * N, b * (K * N + T * K + T * N));
    return op_time(2 * T * K * N, quant.linear_bytes(K, N, checkpoint_bytes) + a_in * T * K + b * T * N, gemm_peak_,
                   gemm_eff);
  };
  TokenCosts out;
  out.qkv_proj = L * gemm(d, qkv_out);
  out.o_proj = L * gemm(q_out, d);
  out.gate_up_proj = L * gemm(d, 2 * I);
  out.down_proj = L * gemm(I, d);

  // Memory-bound elementwise work per layer, bytes read + written per token:
  // two RMSNorms 2*2d, rotary on q and k 2*(q_out + kv_out), two residual
  // adds 2*3d, SwiGLU silu(gate)*up 3I. Plus the embedding gather 2d once.
  const double per_token_layer = 4 * d + 2 * (q_out + kv_out) + 6 * d + 3 * I;
  // W8A8 quantizes each GEMM's input first: read in bf16, write 8 bits, for
  // the qkv (d), o (H dh), gate/up (d) and down (I) inputs of every layer.
  const double quantize_bytes = quant.w8a8() ? (b + 1) * (2 * d + q_out + I) : 0.0;
  out.elementwise = quant.w8a8() ? op_time(0, b * T * (L * per_token_layer + 2 * d) + L * T * quantize_bytes)
                                  : op_time(0, b * T * (L * per_token_layer + 2 * d));
  return out;
}

double RooflineModel::lm_head_time(int64_t rows) const {
  // Final RMSNorm and LM head on the sampling rows only (a rank's V_rank
  // rows of it); fp32 logits written by the GEMM and the whole vocabulary's
  // read again by the sampler.
  const double d = double(model_.hidden_size), V = double(model_.vocab_size), V_rank = double(rank_.vocab);
  const double b = double(dtype_bytes_), S = double(rows);
  if (S > 0) return op_time(2 * S * d * V_rank, b * (V_rank * d + 2 * S * d) + 4.0 * S * V_rank) + op_time(0, 4.0 * S * V);
  return 0;
}

// Attention of one sequence with q new tokens over c cached ones: query i
// (0-based) sees c + i + 1 keys, so q*c + q(q+1)/2 query-key pairs, each 2
// FLOPs for QK^T and 2 for PV per head dimension: 4*H*dh*pairs. Memory: K
// and V of all c + q tokens read once (FlashAttention streams them), the
// new K and V written to the cache, Q read and O written. K and V bytes per
// token and layer as cached (--kv-cache-dtype).
RooflineModel::AttentionTerms RooflineModel::attention_terms_by_items(const IterationPlan& plan) const {
  const double H = double(rank_.heads), Hkv = double(rank_.kv_heads), dh = double(model_.head_dim);
  const double b = double(dtype_bytes_), q_out = H * dh, kv_out = Hkv * dh;
  const Quantization& quant = model_.quantization;
  const double kv_token = quant.kv_bytes_per_token_layer(Hkv, dh, dtype_bytes_);
  if (plan.items_lag) throw std::logic_error("RooflineModel: a plan whose items lag cannot be summed item by item");
  AttentionTerms out;
  for (const ScheduledSequence& s : plan.sequences) {
    const double q = s.num_query_tokens, c = s.num_cached_tokens;
    const double pairs = q * c + q * (q + 1) / 2;
    const double flops = 4 * H * dh * pairs;
    const double bytes = quant.kv_cache == KvCacheDtype::Auto
                             ? b * ((c + q) * 2 * kv_out + q * 2 * kv_out + 2 * q * q_out)
                             : kv_token * ((c + q) + q) + b * 2 * q * q_out;
    (s.is_prefill ? out.prefill_flops : out.decode_flops) += flops;
    (s.is_prefill ? out.prefill_bytes : out.decode_bytes) += bytes;
  }
  return out;
}

RooflineModel::AttentionTerms RooflineModel::attention_terms(const IterationPlan& plan) const {
  // The same terms from the plan's sums, in O(1): each item's FLOPs and
  // bytes above are whole numbers (whole head counts, head dim and bytes per
  // element; a whole number of cached bytes per token), so while every total
  // stays below 2^52 the doubles summed item by item hold them exactly, in
  // any order, and equal these products bit for bit.
  if (!whole_attention_terms_) return attention_terms_by_items(plan);
  const double H = double(rank_.heads), Hkv = double(rank_.kv_heads), dh = double(model_.head_dim);
  const double b = double(dtype_bytes_), q_out = H * dh, kv_out = Hkv * dh;
  const Quantization& quant = model_.quantization;
  const double kv_token = quant.kv_bytes_per_token_layer(Hkv, dh, dtype_bytes_);
  auto flops_of = [&](const IterationPlan::AttentionSums& a) { return 4 * H * dh * double(a.pairs); };
  auto bytes_of = [&](const IterationPlan::AttentionSums& a, int32_t query_tokens) {
    const double q = double(query_tokens), c = double(a.cached_tokens);
    return quant.kv_cache == KvCacheDtype::Auto ? b * ((c + q) * 2 * kv_out + q * 2 * kv_out + 2 * q * q_out)
                                                : kv_token * ((c + q) + q) + b * 2 * q * q_out;
  };
  AttentionTerms out;
  out.prefill_flops = flops_of(plan.prefill_attention);
  out.prefill_bytes = bytes_of(plan.prefill_attention, plan.num_prefill_tokens);
  out.decode_flops = flops_of(plan.decode_attention);
  out.decode_bytes = bytes_of(plan.decode_attention, plan.num_decode_tokens);
  constexpr double kExactBelow = 4503599627370496.0;  // 2^52
  if (out.prefill_flops < kExactBelow && out.prefill_bytes < kExactBelow && out.decode_flops < kExactBelow &&
      out.decode_bytes < kExactBelow)
    return out;
  return attention_terms_by_items(plan);
}

RooflineBreakdown RooflineModel::breakdown(const IterationPlan& plan) const {
  const double L = double(model_.num_hidden_layers);
  const Quantization& quant = model_.quantization;

  RooflineBreakdown out;
  // The linear layers' and elementwise times depend on the batch's tokens
  // alone: looked up for the batches the tables hold.
  const int64_t T = plan.num_tokens();
  const TokenCosts linear = T < int64_t(by_tokens_.size()) ? by_tokens_[size_t(T)] : token_costs(T);
  out.qkv_proj = linear.qkv_proj;
  out.o_proj = linear.o_proj;
  out.gate_up_proj = linear.gate_up_proj;
  out.down_proj = linear.down_proj;

  const AttentionTerms attention = attention_terms(plan);
  const double pf_flops = attention.prefill_flops, pf_bytes = attention.prefill_bytes;
  const double dc_flops = attention.decode_flops, dc_bytes = attention.decode_bytes;
  // Prefill and decode sequences run as two attention kernels per layer.
  const double bf16_peak = hardware_.bf16_flops;
  const bool kv_auto = quant.kv_cache == KvCacheDtype::Auto;
  if (pf_flops > 0)
    out.prefill_attention = L * (kv_auto ? op_time(pf_flops, pf_bytes)
                                         : op_time(pf_flops, pf_bytes, bf16_peak,
                                                   kv_attention_efficiency(quant.kv_cache, false)));
  if (dc_flops > 0)
    out.decode_attention = L * (kv_auto ? op_time(dc_flops, dc_bytes)
                                        : op_time(dc_flops, dc_bytes, bf16_peak,
                                                  kv_attention_efficiency(quant.kv_cache, true)));
  out.elementwise = linear.elementwise;
  const int64_t S = plan.num_sample_rows;
  out.lm_head = S < int64_t(lm_head_by_rows_.size()) ? lm_head_by_rows_[size_t(S)] : lm_head_time(S);
  out.overhead = options_.iteration_overhead_s;
  // Per sequence, not per row: a speculative verification samples k + 1
  // rows of one sequence in one pass of its sampler and bookkeeping.
  if (options_.sequence_overhead_s > 0) out.overhead += plan.num_sampling_sequences * options_.sequence_overhead_s;
  return out;
}

nlohmann::json RooflineModel::describe() const {
  nlohmann::json j = {{"executor", "roofline"},
                      {"compute_efficiency", options_.compute_efficiency},
                      {"memory_efficiency", options_.memory_efficiency},
                      {"iteration_overhead_s", options_.iteration_overhead_s}};
  if (options_.sequence_overhead_s > 0) j["sequence_overhead_s"] = options_.sequence_overhead_s;
  const Quantization& q = model_.quantization;
  if (!q.is_default()) {
    const RelativeEfficiency g = quantized_gemm_efficiency(q.weights);
    const RelativeEfficiency dc = kv_attention_efficiency(q.kv_cache, true);
    const RelativeEfficiency pf = kv_attention_efficiency(q.kv_cache, false);
    j["quantization"] = q.to_json();
    j["quantized_efficiency"] = {
        {"gemm_peak_flops", gemm_peak_},
        {"gemm", {{"compute", g.compute}, {"memory", g.memory}}},
        {"decode_attention", {{"compute", dc.compute}, {"memory", dc.memory}}},
        {"prefill_attention", {{"compute", pf.compute}, {"memory", pf.memory}}},
        {"meaning", "multipliers on compute_efficiency and memory_efficiency (docs/quantization.md)"}};
  }
  return j;
}

}  // namespace servesim
