// The CPU backend: fp32 activations in Eigen row-major matrices, weights in
// fp32, bf16 or int8 (WeightMatrix), a paged KV cache in fp32, bf16 or int8
// (KvCache), kernels parallelised with OpenMP (Eigen itself runs
// single-threaded inside each thread's share). Every kernel computes in
// fp32: a stored bf16 or int8 value is converted as it is loaded.
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "kernels/cpu/kv_cache.h"
#include "kernels/cpu/storage.h"
#include "kernels/cpu/weight_matrix.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"

namespace servesim::cpu {

struct LayerWeights {
  Vector attn_norm;        // [d]
  WeightMatrix w_qkv;      // [(H + 2 Hkv) dh, d]   q, k, v projections stacked
  Vector b_qkv;            // [(H + 2 Hkv) dh]      empty without attention_bias
  WeightMatrix w_o;        // [d, H dh]
  Vector mlp_norm;         // [d]
  WeightMatrix w_gate_up;  // [2 I, d]              gate rows then up rows
  WeightMatrix w_down;     // [d, I]
};

struct Weights {
  WeightMatrix embedding;  // [V, d]
  std::vector<LayerWeights> layers;
  Vector final_norm;       // [d]
  WeightMatrix lm_head;    // [V, d]; empty when tied to the embedding
  const WeightMatrix& head() const { return lm_head.empty() ? embedding : lm_head; }
  // Bytes as stored (scales included).
  double bytes() const;
};

// Activations of one forward pass, reused across passes.
struct Scratch {
  Matrix x;       // [T, d]        residual stream
  Matrix h;       // [T, d]        normalised input of a block
  Matrix qkv;     // [T, (H + 2 Hkv) dh]
  Matrix attn;    // [T, H dh]
  Matrix gate_up; // [T, 2 I]
  Matrix act;     // [T, I]
  Matrix cos, sin;  // [T, dh / 2] rotary tables of this batch's positions
  Matrix last;    // [S, d]        final-normed sampling rows
  Matrix logits;  // [S, V]
};

class Backend {
 public:
  using Weights = cpu::Weights;
  using KvCache = cpu::KvCache;
  using Scratch = cpu::Scratch;

  explicit Backend(const ModelSpec& spec, const Precision& precision = {});

  // Converts host weights (consumed, to bound peak memory) to this backend's.
  Weights upload(HostWeights&& host) const;
  KvCache make_kv_cache(int64_t num_blocks, int32_t block_size) const;

  int num_layers() const { return int(spec_.num_hidden_layers); }
  const ModelSpec& spec() const { return spec_; }
  const Precision& precision() const { return precision_; }

  void prepare(Scratch& s, const BatchLayout& layout) const;
  void embed(const Weights& w, const BatchLayout& layout, Scratch& s) const;
  void rmsnorm_attention_input(const Weights& w, int layer, Scratch& s) const;
  void qkv_projection(const Weights& w, int layer, Scratch& s) const;
  void rotary_and_cache_write(int layer, const BatchLayout& layout, KvCache& kv, Scratch& s) const;
  void attention(int layer, const BatchLayout& layout, KvCache& kv, Scratch& s) const;
  void output_projection_add(const Weights& w, int layer, Scratch& s) const;
  void rmsnorm_mlp_input(const Weights& w, int layer, Scratch& s) const;
  void mlp_add(const Weights& w, int layer, Scratch& s) const;
  void logits(const Weights& w, const BatchLayout& layout, Scratch& s) const;

 private:
  ModelSpec spec_;
  Precision precision_;
  std::vector<double> inv_freq_;  // [dh / 2] rope_theta^(-2i/dh)
};

// The kernels, exposed for tests and benchmarks.
// out[t] = in[t] / sqrt(mean(in[t]^2) + eps) * weight        (per row)
void rmsnorm(const Matrix& in, const Vector& weight, float eps, Matrix& out);
// out = in W^T (accumulate: out += in W^T); W is [N, K] row-major, in [T, K].
// Threads split the N output columns. A bf16 or int8 W is converted to
// fp32 row by row as the product reads it (a decode batch) or chunk by
// chunk into a per-thread buffer (a prefill).
void matmul(const Matrix& in, const Matrix& w, Matrix& out, bool accumulate);
void matmul(const Matrix& in, const WeightMatrix& w, Matrix& out, bool accumulate);
// act[t, i] = silu(gu[t, i]) * gu[t, I + i]
void swiglu(const Matrix& gate_up, Matrix& act);

}  // namespace servesim::cpu
