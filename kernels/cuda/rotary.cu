// launch_rotary_tables and launch_rotary_cache_write (kernels/cuda/cuda_kernels.h):
// rotary position embedding, rotate-half form as Hugging Face's Llama
// (apply_rotary_pos_emb with rotate_half: pairs (j, j + dh/2)), and the
// store of this pass's K and V into the paged cache.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

constexpr int kThreads = 256;

// positions int32 [T], inv_freq double [half], cos / sin fp32 [T, half]:
//   angle = double(positions[t]) * inv_freq[i]  (double: positions reach 2^17)
//   cos[t, i] = float(cos(angle)), sin[t, i] = float(sin(angle)).
// 1-D grid-stride over the T * half entries.
__global__ void rotary_tables_kernel(const int32_t* __restrict__ positions, int32_t T,
                                     const double* __restrict__ inv_freq, int32_t half, float* __restrict__ cos_out,
                                     float* __restrict__ sin_out) {
  const int64_t n = int64_t(T) * half;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / half, i = e % half;
    double s, c;
    sincos(double(positions[t]) * inv_freq[i], &s, &c);
    cos_out[e] = float(c);
    sin_out[e] = float(s);
  }
}

// qkv bf16 [T, (H + 2 Hkv) dh] in place, bias fp32 [(H + 2 Hkv) dh] or null,
// cos / sin fp32 [T, dh/2], slot_mapping int32 [T],
// k_cache / v_cache bf16 [num_blocks][Hkv][block_size][dh].
// Per token t (grid y, stride), the work items (grid x, stride) are
//   e < (H + Hkv) * half:  the rotary pair (j, j + half) of q/k head e / half;
//   otherwise:             v column e - (H + Hkv) * half of the v heads.
// Each item adds the bias in fp32, rotates, rounds to bf16 once, writes qkv,
// and copies k / v to the cache when slot_mapping[t] >= 0 (the same bf16
// values that stay in qkv).
__global__ void rotary_cache_write_kernel(bf16* __restrict__ qkv, const float* __restrict__ bias,
                                          const float* __restrict__ cos_tab, const float* __restrict__ sin_tab,
                                          const int32_t* __restrict__ slot_mapping, int32_t T, int32_t H,
                                          int32_t Hkv, int32_t dh, int32_t block_size, bf16* __restrict__ k_cache,
                                          bf16* __restrict__ v_cache) {
  const int64_t half = dh / 2;
  const int64_t width = int64_t(H + 2 * Hkv) * dh;       // qkv row length
  const int64_t rotary_items = int64_t(H + Hkv) * half;  // q and k pairs
  const int64_t items = rotary_items + int64_t(Hkv) * dh;  // + v columns
  const int64_t item_stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    bf16* row = qkv + t * width;
    const int64_t slot = slot_mapping[t];
    const int64_t block = slot >= 0 ? slot / block_size : 0, offset = slot >= 0 ? slot % block_size : 0;
    // Cache element (KV head g, column j) of this token: ((block * Hkv + g) * block_size + offset) * dh + j.
    auto cache_index = [&](int64_t g, int64_t j) { return ((block * Hkv + g) * block_size + offset) * dh + j; };
    for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < items; e += item_stride) {
      if (e < rotary_items) {
        const int64_t head = e / half, j = e % half;
        const int64_t c1 = head * dh + j, c2 = c1 + half;  // columns of the pair in the row
        float x1 = __bfloat162float(row[c1]), x2 = __bfloat162float(row[c2]);
        if (bias) {
          x1 += bias[c1];
          x2 += bias[c2];
        }
        const float c = cos_tab[t * half + j], s = sin_tab[t * half + j];
        const bf16 y1 = __float2bfloat16(x1 * c - x2 * s);
        const bf16 y2 = __float2bfloat16(x2 * c + x1 * s);
        row[c1] = y1;
        row[c2] = y2;
        if (head >= H && slot >= 0) {  // a k head: g = head - H
          k_cache[cache_index(head - H, j)] = y1;
          k_cache[cache_index(head - H, j + half)] = y2;
        }
      } else {
        const int64_t v = e - rotary_items;  // 0 .. Hkv * dh - 1
        const int64_t col = int64_t(H + Hkv) * dh + v;
        bf16 y = row[col];
        if (bias) {
          y = __float2bfloat16(__bfloat162float(y) + bias[col]);
          row[col] = y;
        }
        if (slot >= 0) v_cache[cache_index(v / dh, v % dh)] = y;
      }
    }
  }
}

unsigned blocks_for(int64_t n, int64_t cap) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 1 ? 1 : b > cap ? cap : b);
}

}  // namespace

void launch_rotary_tables(const int32_t* positions, int32_t T, const double* inv_freq, int32_t half, float* cos,
                          float* sin, cudaStream_t stream) {
  if (T < 0 || half < 0) throw std::invalid_argument("launch_rotary_tables: negative T or half");
  if (T == 0 || half == 0) return;
  rotary_tables_kernel<<<blocks_for(int64_t(T) * half, 1 << 16), kThreads, 0, stream>>>(positions, T, inv_freq,
                                                                                       half, cos, sin);
  CUDA_CHECK_LAUNCH("rotary_tables_kernel");
}

void launch_rotary_cache_write(bf16* qkv, const float* bias, const float* cos, const float* sin,
                               const int32_t* slot_mapping, int32_t T, int32_t H, int32_t Hkv, int32_t dh,
                               int32_t block_size, bf16* k_cache, bf16* v_cache, cudaStream_t stream) {
  if (T < 0 || H <= 0 || Hkv <= 0 || dh <= 0 || dh % 2 != 0 || block_size <= 0)
    throw std::invalid_argument("launch_rotary_cache_write: needs T >= 0, H, Hkv, block_size > 0 and dh even");
  if (T == 0) return;
  const int64_t items = int64_t(H + Hkv) * (dh / 2) + int64_t(Hkv) * dh;
  const dim3 grid(blocks_for(items, 1024), unsigned(T < 65535 ? T : 65535));
  rotary_cache_write_kernel<<<grid, kThreads, 0, stream>>>(qkv, bias, cos, sin, slot_mapping, T, H, Hkv, dh,
                                                           block_size, k_cache, v_cache);
  CUDA_CHECK_LAUNCH("rotary_cache_write_kernel");
}

}  // namespace servesim::cuda
