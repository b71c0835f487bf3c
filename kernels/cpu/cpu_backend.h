// The CPU backend: fp32 weights and activations in Eigen row-major matrices,
// a paged fp32 KV cache, kernels parallelised with OpenMP (Eigen itself runs
// single-threaded inside each thread's share).
#pragma once

#include <cstdint>
#include <vector>

#include <Eigen/Core>

#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"

namespace servesim::cpu {

using Matrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using Vector = Eigen::VectorXf;

struct LayerWeights {
  Vector attn_norm;  // [d]
  Matrix w_qkv;      // [(H + 2 Hkv) dh, d]   q, k, v projections stacked
  Vector b_qkv;      // [(H + 2 Hkv) dh]      empty without attention_bias
  Matrix w_o;        // [d, H dh]
  Vector mlp_norm;   // [d]
  Matrix w_gate_up;  // [2 I, d]              gate rows then up rows
  Matrix w_down;     // [d, I]
};

struct Weights {
  Matrix embedding;  // [V, d]
  std::vector<LayerWeights> layers;
  Vector final_norm;  // [d]
  Matrix lm_head;     // [V, d]; empty when tied to the embedding
  const Matrix& head() const { return lm_head.size() ? lm_head : embedding; }
};

// K and V of every layer in fixed-size blocks. Layout per layer and tensor:
// [num_blocks][Hkv][block_size][dh], so one head's block is a contiguous
// [block_size, dh] row-major matrix.
struct KvCache {
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int64_t kv_heads = 0, head_dim = 0, layers = 0;
  std::vector<float> k, v;

  size_t offset(int64_t layer, int64_t block, int64_t head) const {
    return size_t(((layer * num_blocks + block) * kv_heads + head) * block_size * head_dim);
  }
  float* k_block(int64_t layer, int64_t block, int64_t head) { return k.data() + offset(layer, block, head); }
  float* v_block(int64_t layer, int64_t block, int64_t head) { return v.data() + offset(layer, block, head); }
  double bytes() const { return double(k.size() + v.size()) * sizeof(float); }
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

  explicit Backend(const ModelSpec& spec);

  // Converts host weights (consumed, to bound peak memory) to this backend's.
  Weights upload(HostWeights&& host) const;
  KvCache make_kv_cache(int64_t num_blocks, int32_t block_size) const;

  int num_layers() const { return int(spec_.num_hidden_layers); }
  const ModelSpec& spec() const { return spec_; }

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
  std::vector<double> inv_freq_;  // [dh / 2] rope_theta^(-2i/dh)
};

// The kernels, exposed for tests and benchmarks.
// out[t] = in[t] / sqrt(mean(in[t]^2) + eps) * weight        (per row)
void rmsnorm(const Matrix& in, const Vector& weight, float eps, Matrix& out);
// out = in W^T (accumulate: out += in W^T); W is [N, K] row-major, in [T, K].
// Threads split the N output columns.
void matmul(const Matrix& in, const Matrix& w, Matrix& out, bool accumulate);
// act[t, i] = silu(gu[t, i]) * gu[t, I + i]
void swiglu(const Matrix& gate_up, Matrix& act);

}  // namespace servesim::cpu
