// What the CUDA calibration (calib/calibrate_cuda.cpp) times with: one layer of
// the model on the CUDA backend, run exactly as the CUDA decoder runs it,
// the packed batches its cells stage, and the model's sizes in bytes (to
// check GPU memory before allocating). Needs the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/gemm.h"
#include "kernels/decoder/batch_layout.h"
#include "sim/model_spec.h"

namespace servesim::cuda_calib {

// The model's dimensions, named as in kernels/decoder/forward.h, and what
// the CUDA backend allocates for them.
struct Shape {
  int64_t d, I, V, H, Hkv, dh, qkv_out, q_out, L;
  explicit Shape(const ModelSpec& m);
  // bf16 bytes of one layer's matrices.
  double layer_weight_bytes() const;
  // The embedding and the LM head (one matrix when tied), bf16.
  double head_bytes(bool tied) const;
  // K and V of one token in one layer, bf16.
  double kv_bytes_per_token() const;
  // A cuda::Scratch for T tokens, S sampling rows and `decode` decode
  // sequences (the attention workspace at its largest split count).
  double scratch_bytes(double T, double S, double decode) const;
};

// A packed batch of `sequences` sequences with `query` new tokens after
// `cached` each, every sequence in its own KV blocks (numbered from 0).
// Not copyable: the layout points into the ids and the block tables.
class Batch {
 public:
  Batch(int64_t sequences, int64_t query, int64_t cached, int32_t block_size, bool sample);
  Batch(const Batch&) = delete;
  Batch& operator=(const Batch&) = delete;
  const BatchLayout& layout() const { return layout_; }
  // The KV blocks such a batch uses.
  static int64_t blocks(int64_t sequences, int64_t query, int64_t cached, int32_t block_size);

 private:
  std::vector<int32_t> ids_;
  std::vector<std::vector<int32_t>> tables_;
  BatchLayout layout_;
};

// One layer of the model on the CUDA backend: its weights (random, scaled
// as the whole model's, with the embedding and the LM head), a one-layer KV
// cache of `kv_blocks` blocks, activations reserved for the largest batch
// (all filled with noise: softmax over real numbers, not ties), and a GEMM
// handle making the calls cuda::Backend makes. Everything on `stream`.
struct CudaLayerKernels {
  cuda::Backend be;
  cuda::Weights w;
  cuda::KvCache kv;
  cuda::Scratch s;
  cuda::Gemm gemm;
  uint64_t seed;

  CudaLayerKernels(const ModelSpec& model, int64_t kv_blocks, int32_t block_size, uint64_t weights_seed, cudaStream_t stream,
      int32_t max_tokens, int32_t max_rows, int32_t max_decode);
  cudaStream_t stream() const { return be.stream(); }
  // Noise in every activation and in the KV cache; synchronises.
  void fill_noise();
  // Stages `layout` as the decoder does (its index arrays to the device, the
  // rotary tables of its positions) and synchronises: untimed. Refills the
  // noise when a buffer had to grow.
  void stage(const BatchLayout& layout);
};

}  // namespace servesim::cuda_calib
