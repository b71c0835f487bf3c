// A built-in decoder on some device: runs the forward pass of a packed batch
// against its own paged KV cache and returns the sampling rows' logits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/cpu/storage.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/sampler.h"
#include "sim/model_spec.h"

namespace servesim {

class DecoderModel {
 public:
  virtual ~DecoderModel() = default;
  virtual const ModelSpec& spec() const = 0;
  virtual std::string device() const = 0;  // "cpu (2 threads)", "cuda:0 NVIDIA H200", ...
  // Bytes of the weights and of the KV cache as the device stores them.
  virtual double weight_bytes() const = 0;
  virtual double kv_cache_bytes() const = 0;
  // The paged KV cache's shape: blocks of block_size tokens.
  virtual int64_t kv_num_blocks() const = 0;
  virtual int32_t kv_block_size() const = 0;
  // Computes `layout`, writing each new token's K and V into the blocks its
  // sequence's block table names, and returns logits [S, V] row-major.
  virtual const std::vector<float>& forward(const BatchLayout& layout) = 0;
  // Computes `layout` and chooses each sampling row's token on the device,
  // where the decoder can (the CUDA decoder: greedy, or temperature with
  // top_p = 1), sparing the logits' copy to the host; uniforms[k] is row
  // k's draw (sampling_uniform). Returns false, having computed nothing,
  // where the caller must call forward() and sample the logits itself.
  virtual bool forward_select(const BatchLayout& layout, const SamplingParams& params,
                              std::span<const double> uniforms, std::vector<int32_t>& tokens) {
    (void)layout, (void)params, (void)uniforms, (void)tokens;
    return false;
  }
  // Readies, ahead of serving, what a first pass of a new batch size would
  // otherwise pay for, for batches of up to max_tokens tokens and
  // max_sample_rows sampling rows: on the CUDA decoder, cuBLASLt's choice
  // of algorithm for every bucket of token counts (kernels/cuda/gemm.h).
  // Computes nothing and writes no KV cache.
  virtual void prepare_batches(int32_t max_tokens, int32_t max_sample_rows) {
    (void)max_tokens, (void)max_sample_rows;
  }
  // Copies the cached K and V of one token of `layer` (its `position` in the
  // sequence whose blocks are `block_table`) into k and v, [Hkv * dh] each,
  // head by head. Read-only; for tests that compare caches (speculative
  // rollback).
  virtual void read_kv(int32_t layer, std::span<const int32_t> block_table, int32_t position,
                       std::span<float> k, std::span<float> v) const = 0;
};

struct CpuDecoderOptions {
  CpuDecoderOptions(int threads_ = 0, const cpu::Precision& precision_ = {})
      : threads(threads_), precision(precision_) {}
  int threads = 0;           // 0: every core
  cpu::Precision precision;  // fp32 throughout by default
};

// The CPU (Eigen) decoder. `num_blocks` x `block_size` tokens of KV cache.
std::unique_ptr<DecoderModel> make_cpu_decoder(HostWeights&& weights, int64_t num_blocks,
                                               int32_t block_size, const CpuDecoderOptions& options);

struct CudaDecoderOptions {
  int device = 0;               // the CUDA device ordinal (--device cuda:N)
  bool graphs = true;           // replay decode iterations from CUDA graphs
  int32_t max_graph_batch = 512;  // decode batches above this run without a graph
};

// The CUDA decoder (bf16, cuBLAS, kernels/cuda; reached through the module
// loader of kernels/cuda_plugin/, InputError naming --device without one):
// from host weights (consumed; converted to bf16 on the device) ...
std::unique_ptr<DecoderModel> make_cuda_decoder(HostWeights&& weights, int64_t num_blocks, int32_t block_size,
                                                const CudaDecoderOptions& options);
// ... or with random_weights(spec, seed)'s values made on the device (an 8B
// model's would take minutes to make on the host). With `layers_of` (a
// self-draft's target), the weights are those of random_weights(*layers_of,
// seed)'s first spec.num_hidden_layers layers.
std::unique_ptr<DecoderModel> make_cuda_decoder_random(const ModelSpec& spec, uint64_t seed, int64_t num_blocks,
                                                       int32_t block_size, const CudaDecoderOptions& options,
                                                       const ModelSpec* layers_of = nullptr);

}  // namespace servesim
