#include "kernels/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>

namespace servesim::cuda {
namespace {

// Grows `b` to n elements, counting reallocations (they invalidate graphs).
template <class T>
void grow(DeviceBuffer<T>& b, size_t n, int64_t& generation) {
  if (n <= b.size()) return;
  b.resize(n);
  ++generation;
}

int current_sm_count() {
  int device = 0, sms = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return sms;
}

}  // namespace

namespace {

// Which of two values the environment variable `name` holds: false when it
// is unset or `first`, true when `second`; std::invalid_argument otherwise.
bool second_choice(const char* name, const std::string& first, const std::string& second) {
  const char* value = std::getenv(name);
  const std::string v = value ? value : "";
  if (v.empty() || v == first) return false;
  if (v == second) return true;
  throw std::invalid_argument(std::string(name) + "=" + v + ": expected " + first + " or " + second);
}

}  // namespace

PrefillKernel prefill_kernel_from_environment() {
  return second_choice("SERVESIM_PREFILL_ATTENTION", "wmma", "mma") ? PrefillKernel::Mma : PrefillKernel::Wmma;
}

bool small_m_gemm_from_environment() { return !second_choice("SERVESIM_SMALL_M_GEMM", "on", "off"); }

Backend::Backend(const ModelSpec& spec, cudaStream_t stream)
    : spec_(spec),
      stream_(stream),
      sm_count_(current_sm_count()),
      gemm_(stream),
      prefill_kernel_(prefill_kernel_from_environment()) {
  if (!small_m_gemm_from_environment()) gemm_.set_small_m_rows(0);
  const int64_t half = spec_.head_dim / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i)
    inv_freq[size_t(i)] = std::pow(spec_.rope_theta, -2.0 * double(i) / double(spec_.head_dim));
  inv_freq_.upload(inv_freq);
}

void Backend::prepare_gemms(const Weights& w, Scratch& s, int64_t max_tokens, int64_t max_sample_rows) {
  const int64_t d = spec_.hidden_size, I = spec_.intermediate_size, dh = spec_.head_dim;
  const int64_t H = spec_.num_attention_heads, Hkv = spec_.num_key_value_heads, V = spec_.vocab_size;
  const LayerWeights& L = w.layers.front();
  struct Product {
    const bf16* w;
    int64_t N, K;
  };
  // Launched from the largest activation buffers: gate_up [T, 2I] out of
  // the T x K inputs' largest, act [T, I] or h [T, d].
  for (const Product& p : {Product{L.w_qkv, (H + 2 * Hkv) * dh, d}, Product{L.w_o, d, H * dh},
                           Product{L.w_gate_up, 2 * I, d}, Product{L.w_down, d, I}}) {
    gemm_.prepare(p.N, p.K, false, max_tokens);
    const bf16* in = p.K <= I ? s.act.data() : p.K <= d ? s.h.data() : nullptr;
    const size_t in_rows = p.K <= I ? s.act.size() / size_t(p.K) : s.h.size() / size_t(p.K);
    for (int64_t b : gemm_algorithm_buckets(max_tokens)) {
      if (!in || size_t(b) > in_rows || size_t(b * p.N) > s.gate_up.size()) break;
      gemm_.bf16_out(in, p.w, b, p.N, p.K, s.gate_up.data());
    }
  }
  gemm_.prepare(V, d, true, max_sample_rows);  // LM head, fp32 logits
  for (int64_t b : gemm_algorithm_buckets(max_sample_rows)) {
    if (size_t(b * d) > s.last.size() || size_t(b * V) > s.logits.size()) break;
    gemm_.f32_out(s.last.data(), w.lm_head, b, V, d, s.logits.data());
  }
}

double Backend::scratch_bytes(int64_t T, int64_t S) const {
  const ModelSpec& m = spec_;
  const double d = double(m.hidden_size), I = double(m.intermediate_size), V = double(m.vocab_size);
  const double qkv = double((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim);
  const double q_out = double(m.num_attention_heads * m.head_dim), dh = double(m.head_dim);
  // x fp32; h, qkv, attn, branch, gate_up, act bf16; cos and sin fp32 -- as reserve() grows them.
  const double per_token = 4 * d + 2 * (d + qkv + q_out + d + 2 * I + I) + 4 * dh;
  return double(T) * per_token + double(S) * (2 * d + 4 * V);
}

int32_t Backend::decode_splits(int32_t n) const {
  return decode_attention_splits(n, int32_t(spec_.num_key_value_heads), sm_count_);
}

void Backend::reserve(Scratch& s, int32_t T, int32_t S, int32_t decode_sequences) const {
  const ModelSpec& m = spec_;
  const size_t t = size_t(std::max(T, 1)), rows = size_t(std::max(S, 1));
  const size_t d = size_t(m.hidden_size), I = size_t(m.intermediate_size), V = size_t(m.vocab_size);
  const size_t qkv = size_t((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim);
  const size_t q_out = size_t(m.num_attention_heads * m.head_dim), half = size_t(m.head_dim / 2);
  int64_t& g = s.buffers_generation;
  grow(s.x, t * d, g);
  grow(s.h, t * d, g);
  grow(s.qkv, t * qkv, g);
  grow(s.attn, t * q_out, g);
  grow(s.branch, t * d, g);
  grow(s.gate_up, t * 2 * I, g);
  grow(s.act, t * I, g);
  grow(s.cos, t * half, g);
  grow(s.sin, t * half, g);
  grow(s.last, rows * d, g);
  grow(s.logits, rows * V, g);
  if (decode_sequences > 0)
    grow(s.attention_workspace,
         size_t(decode_attention_workspace_floats(decode_sequences, int32_t(m.num_attention_heads),
                                                  int32_t(m.head_dim), decode_splits(decode_sequences))),
         g);
}

void Backend::prepare(Scratch& s, const BatchLayout&) {
  reserve(s, s.meta.num_tokens(), s.meta.num_samples(), s.meta.num_decode_sequences());
  launch_rotary_tables(s.meta.positions(), s.meta.num_tokens(), inv_freq_.data(), int32_t(spec_.head_dim / 2),
                       s.cos.data(), s.sin.data(), stream_);
}

void Backend::embed(const Weights& w, const BatchLayout&, Scratch& s) {
  launch_embedding(w.embedding, s.meta.tokens(), s.meta.num_tokens(), spec_.hidden_size, s.x.data(), stream_);
  s.branch_pending = false;
}

void Backend::rmsnorm_attention_input(const Weights& w, int layer, Scratch& s) {
  launch_add_rmsnorm(s.x.data(), s.branch_pending ? s.branch.data() : nullptr, nullptr, s.meta.num_tokens(),
                     spec_.hidden_size, w.layers[size_t(layer)].attn_norm, float(spec_.rms_norm_eps), s.h.data(),
                     stream_);
  s.branch_pending = false;
}

void Backend::qkv_projection(const Weights& w, int layer, Scratch& s) {
  const int64_t qkv = (spec_.num_attention_heads + 2 * spec_.num_key_value_heads) * spec_.head_dim;
  s.qkv_bias = w.layers[size_t(layer)].b_qkv;  // added by rotary_and_cache_write
  gemm_.bf16_out(s.h.data(), w.layers[size_t(layer)].w_qkv, s.meta.num_tokens(), qkv, spec_.hidden_size,
                 s.qkv.data());
}

void Backend::rotary_and_cache_write(int layer, const BatchLayout&, KvCache& kv, Scratch& s) {
  // qkv_projection's bias is added here, fused with the rotation.
  launch_rotary_cache_write(s.qkv.data(), s.qkv_bias, s.cos.data(), s.sin.data(), s.meta.slot_mapping(),
                            s.meta.num_tokens(), int32_t(spec_.num_attention_heads),
                            int32_t(spec_.num_key_value_heads), int32_t(spec_.head_dim), kv.block_size,
                            kv.k_layer(layer), kv.v_layer(layer), stream_);
}

void Backend::attention(int layer, const BatchLayout&, KvCache& kv, Scratch& s) {
  AttentionArgs a;
  a.qkv = s.qkv.data();
  a.qkv_stride = (spec_.num_attention_heads + 2 * spec_.num_key_value_heads) * spec_.head_dim;
  a.k_cache = kv.k_layer(layer);
  a.v_cache = kv.v_layer(layer);
  a.sequences = s.meta.sequences();
  a.block_tables = s.meta.block_tables();
  a.num_heads = int32_t(spec_.num_attention_heads);
  a.num_kv_heads = int32_t(spec_.num_key_value_heads);
  a.head_dim = int32_t(spec_.head_dim);
  a.block_size = kv.block_size;
  a.out = s.attn.data();
  // One-token sequences (decode) come first in s.meta's order, the rest are
  // covered by the prefill work items.
  const int32_t decode = s.meta.num_decode_sequences();
  if (decode > 0) launch_decode_attention(a, decode, decode_splits(decode), s.attention_workspace.data(), stream_);
  if (s.meta.num_prefill_items() > 0)
    launch_prefill_attention(a, s.meta.prefill_items(), s.meta.num_prefill_items(), stream_, prefill_kernel_);
}

void Backend::output_projection_add(const Weights& w, int layer, Scratch& s) {
  gemm_.bf16_out(s.attn.data(), w.layers[size_t(layer)].w_o, s.meta.num_tokens(), spec_.hidden_size,
                 spec_.num_attention_heads * spec_.head_dim, s.branch.data());
  s.branch_pending = true;
}

void Backend::rmsnorm_mlp_input(const Weights& w, int layer, Scratch& s) {
  launch_add_rmsnorm(s.x.data(), s.branch.data(), nullptr, s.meta.num_tokens(), spec_.hidden_size,
                     w.layers[size_t(layer)].mlp_norm, float(spec_.rms_norm_eps), s.h.data(), stream_);
  s.branch_pending = false;
}

void Backend::mlp_add(const Weights& w, int layer, Scratch& s) {
  const LayerWeights& L = w.layers[size_t(layer)];
  const int64_t T = s.meta.num_tokens(), d = spec_.hidden_size, I = spec_.intermediate_size;
  if (gemm_.takes_small_m(s.h.data(), L.w_gate_up, T, d)) {
    launch_small_m_gemm_swiglu(s.h.data(), L.w_gate_up, int32_t(T), I, d, s.act.data(), stream_);  // decode
  } else {
    gemm_.bf16_out(s.h.data(), L.w_gate_up, T, 2 * I, d, s.gate_up.data());
    launch_swiglu(s.gate_up.data(), int32_t(T), I, s.act.data(), stream_);
  }
  gemm_.bf16_out(s.act.data(), L.w_down, T, d, I, s.branch.data());
  s.branch_pending = true;
}

void Backend::logits(const Weights& w, const BatchLayout&, Scratch& s) {
  // The last residual add and the final norm, on the sampling rows only.
  launch_add_rmsnorm(s.x.data(), s.branch_pending ? s.branch.data() : nullptr, s.meta.sample_rows(),
                     s.meta.num_samples(), spec_.hidden_size, w.final_norm, float(spec_.rms_norm_eps),
                     s.last.data(), stream_);
  s.branch_pending = false;
  gemm_.f32_out(s.last.data(), w.lm_head, s.meta.num_samples(), spec_.vocab_size, spec_.hidden_size,
                s.logits.data());
}

}  // namespace servesim::cuda
