// Prefill attention (prompt chunks, speculative verification: several new
// tokens per sequence): FlashAttention-2 (Dao 2023) over the paged cache,
// on tensor cores through the wmma API (bf16 16x16x16, fp32 accumulators).
// Math helpers and the shared-memory layout are in attention_common.h.
//
// prefill_kernel<DH>   grid (H, num_items), 128 threads (4 warps)
//   Block (h, y) serves query head h of work item num_items - 1 - y (the
//   last items, usually the longest causal rows, start first; the heads of
//   one item run side by side and share its K/V in L2). Query tile: the
//   item's rows, padded to 64 (zeros), bf16 in shared memory; warp w owns
//   rows 16w .. 16w + 15 (a warp with no real row only helps load).
//   Per K/V tile of 64 keys (zero rows past the item's keys):
//     S = Q K^T           wmma, fp32 [16, 64] per warp -> shared scratch
//     mask, online softmax per row (2 lanes a row): running max m, sum l;
//     P = bf16(exp2(S * scale * log2 e - m)) -> shared; l sums the rounded P
//     O = O * alpha + P V O stays in wmma accumulators [16, dh] per warp;
//                         alpha is applied per element through a row map
//                         (see row_of below)
//   K(t+1) streams in (cp.async) while P V(t) runs and V(t+1) while
//   S(t+1) runs: single buffers, two commit groups per tile.
//   Output: out[row, h, :] = bf16(O / l).
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <mma.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_common.h"
#include "kernels/cuda/attention_tiles.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

using namespace attention;
using namespace nvcuda;

static_assert(kPrefillRows == kPrefillQueryTile, "one block row per query of a work item");
static_assert(kPrefillRows == 16 * (kPrefillThreads / 32), "16 query rows per warp");

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBCol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragBRow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Shapes: qkv [T, qkv_stride], caches [num_blocks][Hkv][block_size][DH],
// out [T, H * DH]; shared memory as prefill_smem(DH).
template <int DH>
__global__ void __launch_bounds__(kPrefillThreads)
    prefill_kernel(AttentionArgs args, const PrefillWorkItem* items, int32_t num_items) {
  constexpr int NF = DH / 16;  // 16-column fragments of a [16, DH] row block
  const PrefillSmem L = prefill_smem(DH);
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* s_q = reinterpret_cast<bf16*>(smem + L.q);
  bf16* s_k = reinterpret_cast<bf16*>(smem + L.k);
  bf16* s_v = reinterpret_cast<bf16*>(smem + L.v);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float* scr = reinterpret_cast<float*>(smem + L.scratch) + warp * 16 * L.ld_scratch;  // this warp's [16][ld]
  bf16* s_p = reinterpret_cast<bf16*>(smem + L.p) + warp * 16 * L.ld_p;
  float* s_alpha = reinterpret_cast<float*>(smem + L.alpha) + warp * 16;
  float* s_l = reinterpret_cast<float*>(smem + L.l) + warp * 16;

  const int H = args.num_heads, Hkv = args.num_kv_heads, bs = args.block_size;
  const PrefillBlock blk = prefill_block(args, items, num_items);
  if (blk.nq <= 0) return;  // uniform over the block
  const int h = blk.h, g = blk.g, nq = blk.nq, q0 = blk.q0, kv_len = blk.kv_len, tiles = blk.tiles;
  const DeviceSequence sq = blk.sq;
  const int32_t* table = blk.table;

  // Prologue: group 1 = Q and K(0), group 2 = V(0).
  load_query_tile<DH>(args, sq, q0, nq, h, s_q, L.ld_qkv);
  load_kv_tile<DH>(args.k_cache, s_k, L.ld_qkv, 0, kv_len, table, g, Hkv, bs);
  cp_async_commit();
  load_kv_tile<DH>(args.v_cache, s_v, L.ld_qkv, 0, kv_len, table, g, Hkv, bs);
  cp_async_commit();

  // row_of[i]: the row (0..15) of accumulator element x[i] in this lane.
  // wmma leaves the element mapping unspecified but fixed per fragment
  // type, so it is read off a fragment loaded from a matrix whose entries
  // are their own row numbers.
  int row_of[FragC::num_elements];
  {
    for (int idx = lane; idx < 256; idx += 32) scr[(idx / 16) * L.ld_scratch + idx % 16] = float(idx / 16);
    __syncwarp();
    FragC rows;
    wmma::load_matrix_sync(rows, scr, L.ld_scratch, wmma::mem_row_major);
#pragma unroll
    for (int i = 0; i < FragC::num_elements; ++i) row_of[i] = int(rows.x[i]);
    __syncwarp();
  }

  FragC o[NF];
#pragma unroll
  for (int f = 0; f < NF; ++f) wmma::fill_fragment(o[f], 0.0f);
  const bool active = warp * 16 < nq;  // warp-uniform
  const int r = lane / 2, half = lane % 2;  // softmax: lanes 2r, 2r + 1 share row r
  const int last_visible = prefill_last_visible(sq.num_cached, q0, nq, warp * 16 + r);
  const float scale_log2 = rsqrtf(float(DH)) * kLog2e;
  float m_run = -INFINITY, l_run = 0.0f;  // row r's state, same in both lanes

  for (int t = 0; t < tiles; ++t) {
    const int kt0 = t * kPrefillKeys;
    cp_async_wait<1>();  // Q, K(t) landed (V(t) may be in flight)
    __syncthreads();
    if (active) {
      // S [16, 64] = Q rows of this warp . K(t)^T; K as a col-major B is K^T.
      FragC s[kPrefillKeys / 16];
#pragma unroll
      for (int n = 0; n < kPrefillKeys / 16; ++n) wmma::fill_fragment(s[n], 0.0f);
#pragma unroll
      for (int k = 0; k < NF; ++k) {
        FragA a;
        wmma::load_matrix_sync(a, s_q + warp * 16 * L.ld_qkv + k * 16, L.ld_qkv);
#pragma unroll
        for (int n = 0; n < kPrefillKeys / 16; ++n) {
          FragBCol b;
          wmma::load_matrix_sync(b, s_k + n * 16 * L.ld_qkv + k * 16, L.ld_qkv);
          wmma::mma_sync(s[n], a, b, s[n]);
        }
      }
#pragma unroll
      for (int n = 0; n < kPrefillKeys / 16; ++n)
        wmma::store_matrix_sync(scr + n * 16, s[n], L.ld_scratch, wmma::mem_row_major);
      __syncwarp();
      // Row r, columns c = 2 jj + half: mask, max, probabilities.
      float x[kPrefillKeys / 2];
      float mx = -INFINITY;
#pragma unroll
      for (int jj = 0; jj < kPrefillKeys / 2; ++jj) {
        const int c = 2 * jj + half;
        x[jj] = kt0 + c <= last_visible ? scr[r * L.ld_scratch + c] * scale_log2 : -INFINITY;
        mx = max_of(mx, x[jj]);
      }
      mx = max_of(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      const float m_new = max_of(m_run, mx);
      const float alpha = rescale_factor(m_run, m_new);
      float sum = 0.0f;
#pragma unroll
      for (int jj = 0; jj < kPrefillKeys / 2; ++jj) {
        const bf16 p = __float2bfloat16(softmax_weight(x[jj], m_new));
        s_p[r * L.ld_p + 2 * jj + half] = p;
        sum += __bfloat162float(p);  // l sums exactly the weights P V uses
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      if (half == 0) s_alpha[r] = alpha;
      __syncwarp();
      float row_alpha[FragC::num_elements];
#pragma unroll
      for (int i = 0; i < FragC::num_elements; ++i) row_alpha[i] = s_alpha[row_of[i]];
#pragma unroll
      for (int f = 0; f < NF; ++f)
#pragma unroll
        for (int i = 0; i < FragC::num_elements; ++i) o[f].x[i] *= row_alpha[i];
    }
    cp_async_wait<0>();  // V(t) landed
    __syncthreads();     // ... for every thread; and no warp reads K(t) any more
    if (t + 1 < tiles) {
      load_kv_tile<DH>(args.k_cache, s_k, L.ld_qkv, kt0 + kPrefillKeys, kv_len, table, g, Hkv, bs);
      cp_async_commit();
    }
    if (active) {
      // O [16, DH] += P [16, 64] . V(t) [64, DH]
#pragma unroll
      for (int k = 0; k < kPrefillKeys / 16; ++k) {
        FragA a;
        wmma::load_matrix_sync(a, s_p + k * 16, L.ld_p);
#pragma unroll
        for (int f = 0; f < NF; ++f) {
          FragBRow b;
          wmma::load_matrix_sync(b, s_v + k * 16 * L.ld_qkv + f * 16, L.ld_qkv);
          wmma::mma_sync(o[f], a, b, o[f]);
        }
      }
    }
    __syncthreads();  // no warp reads V(t) any more
    if (t + 1 < tiles) {
      load_kv_tile<DH>(args.v_cache, s_v, L.ld_qkv, kt0 + kPrefillKeys, kv_len, table, g, Hkv, bs);
      cp_async_commit();
    }
  }

  if (!active) return;
  // out = O / l, through this warp's scratch ([16][ld_scratch], ld >= DH).
  if (half == 0) s_l[r] = l_run;
#pragma unroll
  for (int f = 0; f < NF; ++f) wmma::store_matrix_sync(scr + f * 16, o[f], L.ld_scratch, wmma::mem_row_major);
  __syncwarp();
  const int64_t out_stride = int64_t(H) * DH;
  for (int idx = lane; idx < 16 * (DH / 2); idx += 32) {
    const int rr = idx / (DH / 2), c = 2 * (idx % (DH / 2)), row = warp * 16 + rr;
    if (row < nq) {
      const float inv = 1.0f / s_l[rr];  // >= 1: the row's max key has P = 1
      const float* src = scr + rr * L.ld_scratch + c;
      *reinterpret_cast<__nv_bfloat162*>(args.out + int64_t(sq.first_row + q0 + row) * out_stride +
                                         int64_t(h) * DH + c) = __floats2bfloat162_rn(src[0] * inv, src[1] * inv);
    }
  }
}

template <int DH>
void launch(const AttentionArgs& a, const PrefillWorkItem* items, int32_t num_items, cudaStream_t stream) {
  const int32_t bytes = prefill_smem(DH).bytes;
  // Above 48 KB needs the opt-in (per device; cheap, and legal while a
  // stream is being captured).
  CUDA_CHECK(cudaFuncSetAttribute(prefill_kernel<DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
  const dim3 grid(unsigned(a.num_heads), unsigned(num_items));
  prefill_kernel<DH><<<grid, kPrefillThreads, bytes, stream>>>(a, items, num_items);
  CUDA_CHECK_LAUNCH("prefill_kernel");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void launch_prefill_attention(const AttentionArgs& a, const PrefillWorkItem* items, int32_t num_items,
                              cudaStream_t stream, PrefillKernel kernel) {
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.block_size <= 0)
    throw std::invalid_argument("prefill attention: need num_heads a positive multiple of num_kv_heads and block_size > 0");
  if (num_items < 0 || num_items > 65535)
    throw std::invalid_argument("prefill attention: num_items " + std::to_string(num_items) + " not in 0 .. 65535");
  if (a.qkv_stride % 8 != 0 || !aligned16(a.qkv) || !aligned16(a.k_cache) || !aligned16(a.v_cache) ||
      !aligned16(a.out))
    throw std::invalid_argument("prefill attention: qkv, caches, out and qkv_stride must be 16-byte aligned");
  if (kernel == PrefillKernel::Mma && prefill_mma_supports(a.head_dim)) {
    if (num_items > 0) launch_prefill_attention_mma(a, items, num_items, stream);
    return;
  }
  switch (a.head_dim) {
#define SERVESIM_PREFILL_CASE(DH)                      \
  case DH:                                             \
    if (num_items > 0) launch<DH>(a, items, num_items, stream); \
    return;
    SERVESIM_PREFILL_CASE(16) SERVESIM_PREFILL_CASE(32) SERVESIM_PREFILL_CASE(48) SERVESIM_PREFILL_CASE(64)
    SERVESIM_PREFILL_CASE(80) SERVESIM_PREFILL_CASE(96) SERVESIM_PREFILL_CASE(112) SERVESIM_PREFILL_CASE(128)
    SERVESIM_PREFILL_CASE(144) SERVESIM_PREFILL_CASE(160) SERVESIM_PREFILL_CASE(176) SERVESIM_PREFILL_CASE(192)
    SERVESIM_PREFILL_CASE(208) SERVESIM_PREFILL_CASE(224) SERVESIM_PREFILL_CASE(240) SERVESIM_PREFILL_CASE(256)
#undef SERVESIM_PREFILL_CASE
    default:
      throw std::invalid_argument("prefill attention: head_dim " + std::to_string(a.head_dim) +
                                  " must be a multiple of 16 in 16 .. 256");
  }
}

}  // namespace servesim::cuda
