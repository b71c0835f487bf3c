// Prefill attention on mma.sync, FlashAttention-2's register-resident
// layout (Dao 2023, and its CUTLASS-free descriptions): the same work items,
// masking, online softmax and bf16 rounding of P as the wmma kernel
// (attention_prefill.cu), without its round trips of S and P through
// shared memory. Selected by PrefillKernel::Mma (cuda_kernels.h) for head
// dims up to 128.
//
// prefill_mma_kernel<DH>   grid (H, num_items), 128 threads (4 warps)
//   Block (h, y) serves query head h of work item num_items - 1 - y; warp w
//   owns query rows 16w .. 16w + 15 of the item's 64-row tile.
//   Q [16, DH] of a warp: A fragments in registers for the whole kernel
//   (ldmatrix once). Per K/V tile of 64 keys, double-buffered in shared
//   memory (cp.async: tile t + 1 streams in while tile t is computed):
//     S [16, 64] = Q K^T      mma.m16n8k16 bf16 -> fp32 accumulators; K
//                             rows as B fragments via ldmatrix
//     mask, online softmax    on the accumulators: each lane holds rows g
//                             and g + 8 (g = lane / 4) at 2 columns of each
//                             8-key block; row max and sum across the 4
//                             lanes of a row (shuffles)
//     P = bf16(exp2(S - m))   packed straight into A fragments: the C
//                             layout of two 8-key blocks is the A layout of
//                             one 16-key step
//     O = O alpha + P V       V as B fragments via ldmatrix.trans; O [16, DH]
//                             in fp32 accumulators
//   A warp whose rows see none of a tile's keys skips it (causal).
//   Output: out[row, h, :] = bf16(O / l), straight from the accumulators.
//
// Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and c = 2 (lane % 4):
//   A [16 x 16] row-major: a0 (g, c..c+1), a1 (g+8, c..c+1), a2 (g, c+8..c+9), a3 (g+8, c+8..c+9)
//   B [16 x 8] (k x n):    b0 (k = c..c+1, n = g), b1 (k = c+8..c+9, n = g)
//   C [16 x 8] fp32:       c0, c1 (g, c..c+1), c2, c3 (g+8, c..c+1)
// ldmatrix.x4: lanes 8j .. 8j+7 give the row addresses of 8x8 matrix j, and
// register j of lane l holds its (row l / 4, columns 2 (l % 4) ..+1), or
// with .trans (rows 2 (l % 4) ..+1, column l / 4).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>

#include "kernels/cuda/attention_common.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

using namespace attention;

// Shared memory, bf16 elements from its start; rows padded by 8 elements
// (16 bytes) so that the 8 row addresses of an ldmatrix fall in different
// banks, and stay 16-byte multiples for cp.async:
//   q      [64 rows][DH + 8]
//   k, v   [2 buffers][64 keys][DH + 8] each
template <int DH>
struct MmaSmem {
  static constexpr int ld = DH + 8;
  static constexpr int tile = kPrefillKeys * ld;
  static constexpr int q = 0;
  static constexpr int k = kPrefillRows * ld;
  static constexpr int v = k + 2 * tile;
  static constexpr int bytes = (v + 2 * tile) * 2;
};

__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const bf16* p) {
  const unsigned a = static_cast<unsigned>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
// d [16 x 8] += a [16 x 16] b [16 x 8], bf16 inputs, fp32 accumulation.
__device__ __forceinline__ void mma_bf16(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ unsigned as_bits(__nv_bfloat162 v) { return *reinterpret_cast<unsigned*>(&v); }
// Max (or sum) over the 4 lanes that hold one row.
__device__ __forceinline__ float row_max(float x) {
  x = max_of(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return max_of(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

// Shapes: qkv [T, qkv_stride], caches [num_blocks][Hkv][block_size][DH],
// out [T, H * DH]; shared memory MmaSmem<DH>::bytes.
template <int DH>
__global__ void __launch_bounds__(kPrefillThreads)
    prefill_mma_kernel(AttentionArgs args, const PrefillWorkItem* items, int32_t num_items) {
  using L = MmaSmem<DH>;
  constexpr int KS = DH / 16;            // 16-wide steps over the head dim (Q K^T)
  constexpr int ND = DH / 8;             // 8-wide blocks of the output's head dim
  constexpr int NK = kPrefillKeys / 8;   // 8-key blocks of a tile
  extern __shared__ __align__(128) unsigned char smem_raw[];
  bf16* smem = reinterpret_cast<bf16*>(smem_raw);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const int g8 = lane / 4, c2 = 2 * (lane % 4);

  const int H = args.num_heads, Hkv = args.num_kv_heads, bs = args.block_size;
  const PrefillBlock blk = prefill_block(args, items, num_items);
  if (blk.nq <= 0) return;  // uniform over the block
  const int h = blk.h, g = blk.g, nq = blk.nq, q0 = blk.q0, kv_len = blk.kv_len, tiles = blk.tiles;
  const DeviceSequence sq = blk.sq;
  const int32_t* table = blk.table;

  // Prologue: Q and tile 0 in one group.
  load_query_tile<DH>(args, sq, q0, nq, h, smem + L::q, L::ld);
  load_kv_tile<DH>(args.k_cache, smem + L::k, L::ld, 0, kv_len, table, g, Hkv, bs);
  load_kv_tile<DH>(args.v_cache, smem + L::v, L::ld, 0, kv_len, table, g, Hkv, bs);
  cp_async_commit();

  const int row0 = warp * 16;
  const bool active = row0 < nq;  // warp-uniform
  // Last visible key of rows g8 and g8 + 8, and of the warp's first and last rows.
  const int visible_lo = prefill_last_visible(sq.num_cached, q0, nq, row0 + g8);
  const int visible_hi = prefill_last_visible(sq.num_cached, q0, nq, row0 + g8 + 8);
  const int visible_first = prefill_last_visible(sq.num_cached, q0, nq, row0);
  const int visible_last = prefill_last_visible(sq.num_cached, q0, nq, row0 + 15);
  const float scale_log2 = rsqrtf(float(DH)) * kLog2e;

  unsigned qf[KS][4];  // this warp's Q rows as A fragments
  float o[ND][4];
#pragma unroll
  for (int d = 0; d < ND; ++d) o[d][0] = o[d][1] = o[d][2] = o[d][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;  // rows g8, g8 + 8

  for (int t = 0; t < tiles; ++t) {
    cp_async_wait<0>();  // tile t (and, at t = 0, Q) landed ...
    __syncthreads();     // ... for every thread; and no warp reads tile t - 1's buffers any more
    if (t == 0 && active) {
#pragma unroll
      for (int ks = 0; ks < KS; ++ks)
        ldmatrix_x4(qf[ks], smem + L::q + (row0 + (lane % 8) + ((lane / 8) % 2) * 8) * L::ld + ks * 16 +
                                (lane / 16) * 8);
    }
    if (t + 1 < tiles) {
      const int next = (t + 1) % 2;
      load_kv_tile<DH>(args.k_cache, smem + L::k + next * L::tile, L::ld, (t + 1) * kPrefillKeys, kv_len, table, g,
                       Hkv, bs);
      load_kv_tile<DH>(args.v_cache, smem + L::v + next * L::tile, L::ld, (t + 1) * kPrefillKeys, kv_len, table, g,
                       Hkv, bs);
      cp_async_commit();
    }
    const int kt0 = t * kPrefillKeys;
    if (!active || kt0 > visible_last) continue;  // warp-uniform: no row of the warp sees this tile
    const bf16* s_k = smem + L::k + (t % 2) * L::tile;
    const bf16* s_v = smem + L::v + (t % 2) * L::tile;

    // S [16, 64] = Q K^T: one ldmatrix.x4 gives two 8-key blocks' B fragments.
    float s[NK][4];
#pragma unroll
    for (int j = 0; j < NK; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
    for (int ks = 0; ks < KS; ++ks)
#pragma unroll
      for (int j2 = 0; j2 < NK / 2; ++j2) {
        unsigned b[4];
        ldmatrix_x4(b, s_k + (j2 * 16 + (lane % 8) + (lane / 16) * 8) * L::ld + ks * 16 + ((lane / 8) % 2) * 8);
        mma_bf16(s[2 * j2], qf[ks], b[0], b[1]);
        mma_bf16(s[2 * j2 + 1], qf[ks], b[2], b[3]);
      }

    // Mask (only where some row of the warp does not see the whole tile),
    // scale to the log2 domain, row max.
    const bool whole_tile = kt0 + kPrefillKeys - 1 <= visible_first;
    float max_lo = -INFINITY, max_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < NK; ++j)
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const int key = kt0 + j * 8 + c2 + e;
        float lo = s[j][e] * scale_log2, hi = s[j][2 + e] * scale_log2;
        if (!whole_tile) {
          if (key > visible_lo) lo = -INFINITY;
          if (key > visible_hi) hi = -INFINITY;
        }
        s[j][e] = lo;
        s[j][2 + e] = hi;
        max_lo = max_of(max_lo, lo);
        max_hi = max_of(max_hi, hi);
      }
    const float new_lo = max_of(m_lo, row_max(max_lo)), new_hi = max_of(m_hi, row_max(max_hi));
    const float alpha_lo = rescale_factor(m_lo, new_lo), alpha_hi = rescale_factor(m_hi, new_hi);
    m_lo = new_lo;
    m_hi = new_hi;

    // P in bf16, packed as the A fragments of the four 16-key steps; l sums
    // exactly the weights P V uses.
    unsigned pf[NK / 2][4];
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < NK; ++j) {
      const __nv_bfloat162 lo = __floats2bfloat162_rn(softmax_weight(s[j][0], m_lo), softmax_weight(s[j][1], m_lo));
      const __nv_bfloat162 hi = __floats2bfloat162_rn(softmax_weight(s[j][2], m_hi), softmax_weight(s[j][3], m_hi));
      sum_lo += __low2float(lo) + __high2float(lo);
      sum_hi += __low2float(hi) + __high2float(hi);
      pf[j / 2][(j % 2) * 2] = as_bits(lo);      // a0 (even block) or a2 (odd): row g8
      pf[j / 2][(j % 2) * 2 + 1] = as_bits(hi);  // a1 or a3: row g8 + 8
    }
    l_lo = l_lo * alpha_lo + row_sum(sum_lo);
    l_hi = l_hi * alpha_hi + row_sum(sum_hi);
#pragma unroll
    for (int d = 0; d < ND; ++d) {
      o[d][0] *= alpha_lo;
      o[d][1] *= alpha_lo;
      o[d][2] *= alpha_hi;
      o[d][3] *= alpha_hi;
    }

    // O [16, DH] += P [16, 64] V [64, DH]: one ldmatrix.x4.trans gives two
    // 8-wide head-dim blocks' B fragments of one 16-key step.
#pragma unroll
    for (int ks = 0; ks < kPrefillKeys / 16; ++ks)
#pragma unroll
      for (int d2 = 0; d2 < ND / 2; ++d2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, s_v + (ks * 16 + (lane % 8) + ((lane / 8) % 2) * 8) * L::ld + d2 * 16 + (lane / 16) * 8);
        mma_bf16(o[2 * d2], pf[ks], b[0], b[1]);
        mma_bf16(o[2 * d2 + 1], pf[ks], b[2], b[3]);
      }
  }

  if (!active) return;
  // out = O / l; l >= 1 (the row's max key has P = 1).
  const float inv_lo = 1.0f / l_lo, inv_hi = 1.0f / l_hi;
  const int64_t out_stride = int64_t(H) * DH;
  const int row_lo = row0 + g8, row_hi = row0 + g8 + 8;
  bf16* out_lo = args.out + int64_t(sq.first_row + q0 + row_lo) * out_stride + int64_t(h) * DH + c2;
  bf16* out_hi = args.out + int64_t(sq.first_row + q0 + row_hi) * out_stride + int64_t(h) * DH + c2;
#pragma unroll
  for (int d = 0; d < ND; ++d) {
    if (row_lo < nq)
      *reinterpret_cast<__nv_bfloat162*>(out_lo + d * 8) = __floats2bfloat162_rn(o[d][0] * inv_lo, o[d][1] * inv_lo);
    if (row_hi < nq)
      *reinterpret_cast<__nv_bfloat162*>(out_hi + d * 8) = __floats2bfloat162_rn(o[d][2] * inv_hi, o[d][3] * inv_hi);
  }
}

template <int DH>
void launch(const AttentionArgs& a, const PrefillWorkItem* items, int32_t num_items, cudaStream_t stream) {
  constexpr int bytes = MmaSmem<DH>::bytes;
  CUDA_CHECK(cudaFuncSetAttribute(prefill_mma_kernel<DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(unsigned(a.num_heads), unsigned(num_items));
  prefill_mma_kernel<DH><<<grid, kPrefillThreads, bytes, stream>>>(a, items, num_items);
  CUDA_CHECK_LAUNCH("prefill_mma_kernel");
}

}  // namespace

bool prefill_mma_supports(int32_t head_dim) { return head_dim % 16 == 0 && head_dim >= 16 && head_dim <= 128; }

// Arguments checked by launch_prefill_attention (attention_prefill.cu).
void launch_prefill_attention_mma(const AttentionArgs& a, const PrefillWorkItem* items, int32_t num_items,
                                  cudaStream_t stream) {
  switch (a.head_dim) {
    case 16: return launch<16>(a, items, num_items, stream);
    case 32: return launch<32>(a, items, num_items, stream);
    case 48: return launch<48>(a, items, num_items, stream);
    case 64: return launch<64>(a, items, num_items, stream);
    case 80: return launch<80>(a, items, num_items, stream);
    case 96: return launch<96>(a, items, num_items, stream);
    case 112: return launch<112>(a, items, num_items, stream);
    case 128: return launch<128>(a, items, num_items, stream);
    default: throw std::invalid_argument("prefill attention (mma): head_dim must be a multiple of 16 up to 128");
  }
}

}  // namespace servesim::cuda
