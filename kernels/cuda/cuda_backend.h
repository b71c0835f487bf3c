// The CUDA backend of the shared forward pass (kernels/decoder/forward.h):
// bf16 weights and activations, an fp32 residual stream, a paged bf16 KV
// cache, cuBLAS GEMMs and the kernels of cuda_kernels.h, all enqueued on one
// stream. Nothing here synchronises: the decoder (cuda_decoder.cpp) copies
// the results back.
//
// The residual adds are deferred and fused: output_projection_add and
// mlp_add leave their GEMM's result in Scratch::branch, and the next RMSNorm
// (or the final norm in logits()) adds it to the residual x first.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/cuda/batch_metadata.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/host_weights.h"
#include "sim/model_spec.h"

namespace servesim::cuda {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [d]
  const bf16* w_qkv = nullptr;       // [(H + 2 Hkv) dh, d]   q, k, v projections stacked
  const float* b_qkv = nullptr;      // [(H + 2 Hkv) dh]      null without attention_bias
  const bf16* w_o = nullptr;         // [d, H dh]
  const float* mlp_norm = nullptr;   // [d]
  const bf16* w_gate_up = nullptr;   // [2 I, d]              gate rows then up rows
  const bf16* w_down = nullptr;      // [d, I]
};

struct Weights {
  DeviceBuffer<bf16> matrices;   // every bf16 matrix, one allocation
  DeviceBuffer<float> vectors;   // norm weights and biases, fp32
  const bf16* embedding = nullptr;  // [V, d]
  const bf16* lm_head = nullptr;    // [V, d]; the embedding when tied
  const float* final_norm = nullptr;  // [d]
  std::vector<LayerWeights> layers;
  double bytes() const { return double(matrices.bytes() + vectors.bytes()); }
};

// Per layer, K and V each [num_blocks][Hkv][block_size][dh] bf16.
struct KvCache {
  int64_t num_blocks = 0;
  int32_t block_size = 0;
  int64_t kv_heads = 0, head_dim = 0, layers = 0;
  DeviceBuffer<bf16> k, v;  // [layers][num_blocks][Hkv][block_size][dh]

  size_t layer_elements() const { return size_t(num_blocks * kv_heads * block_size * head_dim); }
  bf16* k_layer(int64_t layer) { return k.data() + size_t(layer) * layer_elements(); }
  bf16* v_layer(int64_t layer) { return v.data() + size_t(layer) * layer_elements(); }
  const bf16* k_layer(int64_t layer) const { return k.data() + size_t(layer) * layer_elements(); }
  const bf16* v_layer(int64_t layer) const { return v.data() + size_t(layer) * layer_elements(); }
  double bytes() const { return double(k.bytes() + v.bytes()); }
};

// Activations of one forward pass, sized for the largest batch seen (or
// reserved); generation() changes whenever a buffer is reallocated, which
// invalidates captured graphs.
struct Scratch {
  BatchMetadata meta;          // the batch's index arrays (device)
  DeviceBuffer<float> x;       // [T, d]        residual stream, fp32
  DeviceBuffer<bf16> h;        // [T, d]        normalised input of a block
  DeviceBuffer<bf16> qkv;      // [T, (H + 2 Hkv) dh]
  DeviceBuffer<bf16> attn;     // [T, H dh]
  DeviceBuffer<bf16> branch;   // [T, d]        o_proj / down_proj output awaiting its residual add
  DeviceBuffer<bf16> gate_up;  // [T, 2 I]
  DeviceBuffer<bf16> act;      // [T, I]
  DeviceBuffer<float> cos, sin;  // [T, dh / 2] rotary tables of this batch's positions
  DeviceBuffer<bf16> last;     // [S, d]        final-normed sampling rows
  DeviceBuffer<float> logits;  // [S, V]
  DeviceBuffer<float> attention_workspace;  // decode attention's partial results
  int64_t buffers_generation = 0;
  bool branch_pending = false;  // branch holds a residual not yet added to x
  const float* qkv_bias = nullptr;  // the layer's b_qkv, for rotary_and_cache_write
  int64_t generation() const { return buffers_generation + meta.generation(); }
};

class Backend {
 public:
  using Weights = cuda::Weights;
  using KvCache = cuda::KvCache;
  using Scratch = cuda::Scratch;

  // Works on the current device, on `stream`.
  Backend(const ModelSpec& spec, cudaStream_t stream);

  // Host weights (consumed) converted to bf16 on the device.
  Weights upload(HostWeights&& host) const;
  // Random weights made on the device with random_weights()'s distributions
  // and streams (host_weights.h), so they equal bf16(random_weights(spec,
  // seed)); scaled as random_weights(scales_of, seed) scales them (a
  // self-draft takes its target's first layers, scaled for the target's depth).
  Weights random(uint64_t seed, const ModelSpec& scales_of) const;
  KvCache make_kv_cache(int64_t num_blocks, int32_t block_size) const;

  int num_layers() const { return int(spec_.num_hidden_layers); }
  const ModelSpec& spec() const { return spec_; }
  cudaStream_t stream() const { return stream_; }

  // Grows the activations for T tokens and S sampling rows (no-op when they fit).
  void reserve(Scratch& s, int32_t T, int32_t S, int32_t decode_sequences) const;
  // cuBLASLt's algorithms for every projection at up to max_tokens tokens
  // and the LM head at up to max_sample_rows rows (Gemm::prepare), and one
  // launch of each bucket that fits the activations `s` holds (with layer
  // 0's weights; the outputs are scratch): a bucket's first launch costs
  // more than its algorithm choice, so both happen before serving
  // (docs/cuda.md).
  void prepare_gemms(const Weights& w, Scratch& s, int64_t max_tokens, int64_t max_sample_rows);
  // Device bytes of the activations for T tokens and S sampling rows.
  double scratch_bytes(int64_t T, int64_t S) const;
  // The decode attention's split count for a batch of n one-token sequences.
  int32_t decode_splits(int32_t n) const;

  // The forward pass's steps (forward.h). They read the batch from
  // s.meta, which the caller has staged and uploaded; `layout` is unused.
  void prepare(Scratch& s, const BatchLayout& layout);
  void embed(const Weights& w, const BatchLayout& layout, Scratch& s);
  void rmsnorm_attention_input(const Weights& w, int layer, Scratch& s);
  void qkv_projection(const Weights& w, int layer, Scratch& s);
  void rotary_and_cache_write(int layer, const BatchLayout& layout, KvCache& kv, Scratch& s);
  void attention(int layer, const BatchLayout& layout, KvCache& kv, Scratch& s);
  void output_projection_add(const Weights& w, int layer, Scratch& s);
  void rmsnorm_mlp_input(const Weights& w, int layer, Scratch& s);
  void mlp_add(const Weights& w, int layer, Scratch& s);
  void logits(const Weights& w, const BatchLayout& layout, Scratch& s);

 private:
  ModelSpec spec_;
  cudaStream_t stream_;
  int sm_count_ = 0;
  DeviceBuffer<double> inv_freq_;  // [dh / 2] rope_theta^(-2i/dh)
  Gemm gemm_;
  PrefillKernel prefill_kernel_ = PrefillKernel::Wmma;  // SERVESIM_PREFILL_ATTENTION
};

// The prefill attention kernel SERVESIM_PREFILL_ATTENTION names: unset or
// "wmma" Wmma, "mma" Mma; std::invalid_argument naming the variable otherwise.
PrefillKernel prefill_kernel_from_environment();
// Whether decode's products take the small-M kernel (Gemm::small_m_rows):
// SERVESIM_SMALL_M_GEMM unset or "on" yes, "off" no (every product through
// cuBLASLt, the MLP's SwiGLU apart); std::invalid_argument otherwise.
bool small_m_gemm_from_environment();

}  // namespace servesim::cuda
