#include "kernels/cpu/kv_cache.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/weight_matrix.h"

namespace servesim::cpu {

KvCache::KvCache(int64_t layers_, int64_t num_blocks_, int32_t block_size_, int64_t kv_heads_, int64_t head_dim_,
                 Storage storage)
    : layers(layers_), num_blocks(num_blocks_), kv_heads(kv_heads_), head_dim(head_dim_), block_size(block_size_),
      storage_(storage) {
  const size_t rows = size_t(layers * num_blocks * kv_heads * block_size), n = rows * size_t(head_dim);
  // Huge pages, advised before the first write: a decode reads each
  // sequence's blocks wherever the block manager put them, one 4 KiB page
  // per block and head with ordinary pages.
  switch (storage) {
    case Storage::Fp32:
      allocate_huge(k32_, n);
      allocate_huge(v32_, n);
      break;
    case Storage::Bf16:
      allocate_huge(k16_, n);
      allocate_huge(v16_, n);
      break;
    case Storage::Int8:
      allocate_huge(k8_, n);
      allocate_huge(v8_, n);
      k_scale_.assign(rows, 1.0f);
      v_scale_.assign(rows, 1.0f);
      break;
  }
}

double KvCache::bytes() const {
  const double elements = double(layers * num_blocks * kv_heads * block_size * head_dim);
  return 2.0 * elements * storage_bytes(storage_) + double(k_scale_.size() + v_scale_.size()) * sizeof(float);
}

void KvCache::write(int64_t layer, int64_t block, int64_t head, int64_t slot, const float* k, const float* v) {
  const size_t at = offset(layer, block, head) + size_t(slot * head_dim);
  switch (storage_) {
    case Storage::Fp32:
      std::copy_n(k, head_dim, k32_.data() + at);
      std::copy_n(v, head_dim, v32_.data() + at);
      break;
    case Storage::Bf16:
      for (int64_t i = 0; i < head_dim; ++i) {
        k16_[at + size_t(i)] = to_bf16(k[i]);
        v16_[at + size_t(i)] = to_bf16(v[i]);
      }
      break;
    case Storage::Int8: {
      const size_t r = row(layer, block, head, slot);
      k_scale_[r] = int8_scale(k, head_dim);
      v_scale_[r] = int8_scale(v, head_dim);
      quantize_int8(k, head_dim, k_scale_[r], k8_.data() + at);
      quantize_int8(v, head_dim, v_scale_[r], v8_.data() + at);
      break;
    }
  }
}

void KvCache::load(const std::vector<float>& f32, const std::vector<uint16_t>& b16, const std::vector<int8_t>& q,
                   const std::vector<float>& scale, int64_t layer, int64_t block, int64_t head, int64_t valid,
                   float* dst) const {
  const size_t at = offset(layer, block, head);
  switch (storage_) {
    case Storage::Fp32: std::copy_n(f32.data() + at, valid * head_dim, dst); break;
    case Storage::Bf16: load_bf16(b16.data() + at, valid * head_dim, dst); break;
    case Storage::Int8: {
      const size_t r0 = row(layer, block, head, 0);
      for (int64_t s = 0; s < valid; ++s)
        load_int8(q.data() + at + size_t(s * head_dim), head_dim, scale[r0 + size_t(s)], dst + s * head_dim);
      break;
    }
  }
}

void KvCache::load_k(int64_t layer, int64_t block, int64_t head, int64_t valid, float* dst) const {
  load(k32_, k16_, k8_, k_scale_, layer, block, head, valid, dst);
}

void KvCache::load_v(int64_t layer, int64_t block, int64_t head, int64_t valid, float* dst) const {
  load(v32_, v16_, v8_, v_scale_, layer, block, head, valid, dst);
}

void KvCache::fill(const std::function<void(size_t row, float* k, float* v)>& fill_row) {
  std::vector<float> k(static_cast<size_t>(head_dim)), v(static_cast<size_t>(head_dim));
  size_t r = 0;
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t b = 0; b < num_blocks; ++b)
      for (int64_t h = 0; h < kv_heads; ++h)
        for (int64_t s = 0; s < block_size; ++s, ++r) {
          fill_row(r, k.data(), v.data());
          write(l, b, h, s, k.data(), v.data());
        }
}

}  // namespace servesim::cpu
