// A built-in decoder on some device: runs the forward pass of a packed batch
// against its own paged KV cache and returns the sampling rows' logits.
#pragma once

#include <memory>
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
  // Computes `layout`, writing each new token's K and V into the blocks its
  // sequence's block table names, and returns logits [S, V] row-major.
  virtual const std::vector<float>& forward(const BatchLayout& layout) = 0;
};

struct CpuDecoderOptions {
  int threads = 0;  // 0: every core
};

// The CPU (Eigen) decoder. `num_blocks` x `block_size` tokens of KV cache.
std::unique_ptr<DecoderModel> make_cpu_decoder(HostWeights&& weights, int64_t num_blocks,
                                               int32_t block_size, const CpuDecoderOptions& options);

}  // namespace servesim
