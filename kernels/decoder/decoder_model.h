// A built-in decoder on some device: runs the forward pass of a packed batch
// against its own paged KV cache and returns the sampling rows' logits.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/host_weights.h"
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
  // Copies the cached K and V of one token of `layer` (its `position` in the
  // sequence whose blocks are `block_table`) into k and v, [Hkv * dh] each,
  // head by head. Read-only; for tests that compare caches (speculative
  // rollback).
  virtual void read_kv(int32_t layer, std::span<const int32_t> block_table, int32_t position,
                       std::span<float> k, std::span<float> v) const = 0;
};

struct CpuDecoderOptions {
  int threads = 0;  // 0: every core
};

// The CPU (Eigen) decoder. `num_blocks` x `block_size` tokens of KV cache.
std::unique_ptr<DecoderModel> make_cpu_decoder(HostWeights&& weights, int64_t num_blocks,
                                               int32_t block_size, const CpuDecoderOptions& options);

}  // namespace servesim
