// The CPU backend's paged KV cache: K and V of every layer in fixed-size
// blocks, in fp32, bf16 or int8 (one fp32 scale per token and head, for K
// and for V; --kv-cache-dtype int8). Layout per layer and tensor:
// [num_blocks][Hkv][block_size][dh], so one head's block is a contiguous
// [block_size, dh] row-major matrix; int8's scales [num_blocks][Hkv][block_size].
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kernels/cpu/storage.h"

namespace servesim::cpu {

class KvCache {
 public:
  KvCache() = default;
  KvCache(int64_t layers, int64_t num_blocks, int32_t block_size, int64_t kv_heads, int64_t head_dim,
          Storage storage);

  int64_t layers = 0, num_blocks = 0, kv_heads = 0, head_dim = 0;
  int32_t block_size = 0;
  Storage storage() const { return storage_; }
  // Bytes as stored, scales included.
  double bytes() const;

  // Stores one token's K and V ([dh] each) of `head` at `slot` of `block`.
  void write(int64_t layer, int64_t block, int64_t head, int64_t slot, const float* k, const float* v);
  // The first `valid` rows of a head's block in fp32 into dst ([valid, dh]).
  void load_k(int64_t layer, int64_t block, int64_t head, int64_t valid, float* dst) const;
  void load_v(int64_t layer, int64_t block, int64_t head, int64_t valid, float* dst) const;
  // A head's block where the cache holds fp32 (storage() == Fp32), read in place.
  const float* fp32_k(int64_t layer, int64_t block, int64_t head) const { return k32_.data() + offset(layer, block, head); }
  const float* fp32_v(int64_t layer, int64_t block, int64_t head) const { return v32_.data() + offset(layer, block, head); }

  // Sets every row (layer, block, head, slot), in storage order: fill(row,
  // k, v) writes that row's K and V ([dh] each). For benchmarks that need a
  // cache of realistic values.
  void fill(const std::function<void(size_t row, float* k, float* v)>& fill_row);

 private:
  size_t offset(int64_t layer, int64_t block, int64_t head) const {
    return size_t(((layer * num_blocks + block) * kv_heads + head) * block_size * head_dim);
  }
  size_t row(int64_t layer, int64_t block, int64_t head, int64_t slot) const {
    return size_t(((layer * num_blocks + block) * kv_heads + head) * block_size + slot);
  }
  void load(const std::vector<float>& f32, const std::vector<uint16_t>& b16, const std::vector<int8_t>& q,
            const std::vector<float>& scale, int64_t layer, int64_t block, int64_t head, int64_t valid,
            float* dst) const;

  Storage storage_ = Storage::Fp32;
  std::vector<float> k32_, v32_;         // Fp32
  std::vector<uint16_t> k16_, v16_;      // Bf16
  std::vector<int8_t> k8_, v8_;          // Int8
  std::vector<float> k_scale_, v_scale_; // Int8: one per row
};

}  // namespace servesim::cpu
