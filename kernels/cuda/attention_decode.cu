// Decode attention: one new token per sequence against its paged KV cache,
// by flash-decoding (Dao, Haziza, Massa, Sizov 2023): each (sequence,
// KV head) context is cut into num_splits key ranges processed in parallel
// with an online softmax (FlashAttention-2, Dao 2023), and a second kernel
// merges the ranges' partial results. Math is in attention_common.h.
//
// decode_partial_kernel   grid (num_splits, Hkv * head_chunks, num_sequences), 128 threads
//   A block serves G query heads (G = decode_heads_per_block(H / Hkv)) of one
//   KV head over one key range. Thread t is slice t % TPK of key lane
//   t / TPK (TPK = decode_lanes_per_key(dh)): the slice holds elements
//   8 * slice .. 8 * slice + 7 of q, k, v and the accumulator, read as one
//   16-byte load. Keys go in chunks of NK = 4 * (128 / TPK); key lane r holds
//   keys r, r + R, r + 2R, r + 3R of the chunk (R = 128 / TPK key lanes).
//   Per chunk: scores (shuffle-reduced over the TPK slices) -> shared
//   memory; one warp per head updates the running max and sum; every
//   thread rescales its accumulator and adds p * v for its keys.
//   Output: workspace partial (acc [dh], m, l) per (sequence, head, split).
// decode_combine_kernel   grid (H, num_sequences), 128 threads
//   out[row, h, :] = bf16(sum_i w_i acc_i / sum_i w_i l_i), w_i = exp2(m_i - max m).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "kernels/cuda/attention_common.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

using namespace attention;

constexpr int kWarps = kDecodeThreads / 32;

// 8 bf16 (one 16-byte load) to fp32: a bf16 is the high half of its fp32,
// and the element at the lower address is the low half of each word.
__device__ __forceinline__ void unpack8(const uint4& raw, float (&f)[8]) {
  const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    f[2 * i] = __uint_as_float(w[i] << 16);
    f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
  }
}

__device__ __forceinline__ uint4 load16(const bf16* p) { return __ldg(reinterpret_cast<const uint4*>(p)); }

// Shapes: qkv [T, qkv_stride], caches [num_blocks][Hkv][block_size][dh],
// ws_acc [S][H][num_splits][dh], ws_ml [S][H][num_splits][2].
template <int TPK, int G>
__global__ void __launch_bounds__(kDecodeThreads)
    decode_partial_kernel(AttentionArgs args, int32_t num_splits, float* ws_acc, float* ws_ml) {
  constexpr int R = kDecodeThreads / TPK;        // key lanes
  constexpr int KPT = kDecodeKeysPerThread;      // keys per key lane per chunk
  constexpr int NK = R * KPT;                    // keys per chunk
  constexpr int HPW = (G + kWarps - 1) / kWarps;  // heads per warp in the softmax step
  __shared__ float s_p[G][NK];                   // scores, then probabilities
  __shared__ float s_alpha[G];
  __shared__ float s_red[kWarps][G][TPK * 8];     // per-warp accumulators at the end

  const int dh = args.head_dim, H = args.num_heads, Hkv = args.num_kv_heads, bs = args.block_size;
  const int group = H / Hkv, chunks = ceil_div(group, G);
  const int split = blockIdx.x, g = blockIdx.y / chunks, chunk = blockIdx.y % chunks, seq = blockIdx.z;
  const int head0 = g * group + chunk * G;                       // first query head of the block
  const int heads = group - chunk * G < G ? group - chunk * G : G;  // valid heads, 1 .. G
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int slice = tid % TPK, r = tid / TPK;
  const bool slice_on = slice * 8 < dh;

  const DeviceSequence sq = args.sequences[seq];
  const int32_t* table = args.block_tables + sq.block_offset;
  const KeyRange range = split_range(sq.num_cached + 1, num_splits, split);

  // q, pre-multiplied by scale * log2(e); heads past `heads` stay 0.
  const float qscale = rsqrtf(float(dh)) * kLog2e;
  float q[G][8];
#pragma unroll
  for (int j = 0; j < G; ++j) {
    float f[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    if (j < heads && slice_on)
      unpack8(load16(args.qkv + int64_t(sq.first_row) * args.qkv_stride + int64_t(head0 + j) * dh + slice * 8), f);
#pragma unroll
    for (int e = 0; e < 8; ++e) q[j][e] = f[e] * qscale;
  }

  float acc[G][8];
#pragma unroll
  for (int j = 0; j < G; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e) acc[j][e] = 0.0f;
  float m_run[HPW], l_run[HPW];  // warp `warp` owns heads warp + kWarps * i
#pragma unroll
  for (int i = 0; i < HPW; ++i) m_run[i] = -INFINITY, l_run[i] = 0.0f;

  for (int c0 = range.begin; c0 < range.end; c0 += NK) {
    // Issue every load of the chunk first (K and V rows of this lane's keys).
    uint4 kraw[KPT], vraw[KPT];
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
      const int p = c0 + r + i * R;
      kraw[i] = vraw[i] = make_uint4(0, 0, 0, 0);
      if (p < range.end && slice_on) {
        const int64_t off = kv_row_offset(table[p / bs], g, Hkv, bs, p % bs, dh) + slice * 8;
        kraw[i] = load16(args.k_cache + off);
        vraw[i] = load16(args.v_cache + off);
      }
    }
    // Scores: dot over this slice, then summed over the TPK slices of the key.
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
      float k[8];
      unpack8(kraw[i], k);
#pragma unroll
      for (int j = 0; j < G; ++j) {
        float s = 0.0f;
#pragma unroll
        for (int e = 0; e < 8; ++e) s = fmaf(q[j][e], k[e], s);
#pragma unroll
        for (int off = TPK / 2; off > 0; off /= 2) s += __shfl_xor_sync(0xffffffffu, s, off);
        if (slice == 0) s_p[j][r + i * R] = c0 + r + i * R < range.end ? s : -INFINITY;
      }
    }
    __syncthreads();
    // Online softmax per head: warp w owns heads w, w + 4, ...
#pragma unroll
    for (int i = 0; i < HPW; ++i) {
      const int j = warp + kWarps * i;
      if (j < G) {
        float mx = -INFINITY;
        for (int kk = lane; kk < NK; kk += 32) mx = max_of(mx, s_p[j][kk]);
#pragma unroll
        for (int off = 16; off > 0; off /= 2) mx = max_of(mx, __shfl_xor_sync(0xffffffffu, mx, off));
        const float m_new = max_of(m_run[i], mx);
        const float alpha = rescale_factor(m_run[i], m_new);
        float sum = 0.0f;
        for (int kk = lane; kk < NK; kk += 32) {
          const float p = softmax_weight(s_p[j][kk], m_new);
          s_p[j][kk] = p;
          sum += p;
        }
#pragma unroll
        for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
        l_run[i] = l_run[i] * alpha + sum;
        m_run[i] = m_new;
        if (lane == 0) s_alpha[j] = alpha;
      }
    }
    __syncthreads();
    // acc = acc * alpha + sum over this lane's keys of p * v.
#pragma unroll
    for (int j = 0; j < G; ++j) {
      const float a = s_alpha[j];
#pragma unroll
      for (int e = 0; e < 8; ++e) acc[j][e] *= a;
    }
#pragma unroll
    for (int i = 0; i < KPT; ++i) {
      if (c0 + r + i * R < range.end) {  // masked keys' v may be junk (NaN)
        float v[8];
        unpack8(vraw[i], v);
#pragma unroll
        for (int j = 0; j < G; ++j) {
          const float p = s_p[j][r + i * R];
#pragma unroll
          for (int e = 0; e < 8; ++e) acc[j][e] = fmaf(p, v[e], acc[j][e]);
        }
      }
    }
    __syncthreads();  // s_p and s_alpha are rewritten by the next chunk
  }

  // Sum the key lanes: within a warp by shuffles (lanes slice + TPK * x),
  // then across warps in shared memory, in a fixed order.
#pragma unroll
  for (int j = 0; j < G; ++j)
#pragma unroll
    for (int e = 0; e < 8; ++e)
#pragma unroll
      for (int off = TPK; off < 32; off *= 2) acc[j][e] += __shfl_xor_sync(0xffffffffu, acc[j][e], off);
  if (lane < TPK && slice_on) {
#pragma unroll
    for (int j = 0; j < G; ++j)
#pragma unroll
      for (int e = 0; e < 8; ++e) s_red[warp][j][slice * 8 + e] = acc[j][e];
  }
  __syncthreads();
  for (int idx = tid; idx < heads * dh; idx += kDecodeThreads) {
    const int j = idx / dh, d = idx % dh;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += s_red[w][j][d];
    ws_acc[decode_partial_index(seq, head0 + j, split, H, num_splits) * dh + d] = sum;
  }
#pragma unroll
  for (int i = 0; i < HPW; ++i) {
    const int j = warp + kWarps * i;
    if (j < heads && lane == 0) {
      const int64_t at = decode_partial_index(seq, head0 + j, split, H, num_splits) * 2;
      ws_ml[at] = m_run[i];
      ws_ml[at + 1] = l_run[i];
    }
  }
}

// Merges the splits of (sequence blockIdx.y, head blockIdx.x).
// ws_acc [S][H][num_splits][dh], ws_ml [S][H][num_splits][2], out [T, H * dh].
__global__ void __launch_bounds__(kDecodeThreads)
    decode_combine_kernel(const DeviceSequence* sequences, int32_t H, int32_t dh, int32_t num_splits,
                          const float* ws_acc, const float* ws_ml, bf16* out) {
  const int h = blockIdx.x, seq = blockIdx.y;
  const int64_t base = decode_partial_index(seq, h, 0, H, num_splits);
  float m_all = -INFINITY;
  for (int s = 0; s < num_splits; ++s) m_all = max_of(m_all, ws_ml[(base + s) * 2]);
  float l_all = 0.0f;
  for (int s = 0; s < num_splits; ++s) l_all += softmax_weight(ws_ml[(base + s) * 2], m_all) * ws_ml[(base + s) * 2 + 1];
  const float inv = l_all > 0.0f ? 1.0f / l_all : 0.0f;
  bf16* o = out + int64_t(sequences[seq].first_row) * H * dh + int64_t(h) * dh;
  for (int d = threadIdx.x; d < dh; d += blockDim.x) {
    float sum = 0.0f;
    for (int s = 0; s < num_splits; ++s) {
      const float w = softmax_weight(ws_ml[(base + s) * 2], m_all);
      if (w != 0.0f) sum += w * ws_acc[(base + s) * dh + d];  // empty splits: skipped
    }
    o[d] = __float2bfloat16(sum * inv);
  }
}

template <int TPK, int G>
void launch_partial(const AttentionArgs& a, int32_t num_sequences, int32_t num_splits, float* ws_acc,
                    float* ws_ml, cudaStream_t stream) {
  const int chunks = ceil_div(a.num_heads / a.num_kv_heads, G);
  const dim3 grid(unsigned(num_splits), unsigned(a.num_kv_heads * chunks), unsigned(num_sequences));
  decode_partial_kernel<TPK, G><<<grid, kDecodeThreads, 0, stream>>>(a, num_splits, ws_acc, ws_ml);
  CUDA_CHECK_LAUNCH("decode_partial_kernel");
}

template <int TPK>
void dispatch_heads(const AttentionArgs& a, int32_t num_sequences, int32_t num_splits, float* ws_acc,
                    float* ws_ml, cudaStream_t stream) {
  switch (decode_heads_per_block(a.num_heads / a.num_kv_heads)) {
    case 1: return launch_partial<TPK, 1>(a, num_sequences, num_splits, ws_acc, ws_ml, stream);
    case 2: return launch_partial<TPK, 2>(a, num_sequences, num_splits, ws_acc, ws_ml, stream);
    case 4: return launch_partial<TPK, 4>(a, num_sequences, num_splits, ws_acc, ws_ml, stream);
    default: return launch_partial<TPK, 8>(a, num_sequences, num_splits, ws_acc, ws_ml, stream);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

int64_t decode_attention_workspace_floats(int32_t num_sequences, int32_t num_heads, int32_t head_dim,
                                          int32_t num_splits) {
  return decode_workspace_floats(num_sequences, num_heads, head_dim, num_splits);
}

int32_t decode_attention_splits(int32_t num_sequences, int32_t num_kv_heads, int32_t sm_count) {
  return choose_decode_splits(num_sequences, num_kv_heads, sm_count);
}

void launch_decode_attention(const AttentionArgs& a, int32_t num_sequences, int32_t num_splits, float* workspace,
                             cudaStream_t stream) {
  const int32_t dh = a.head_dim;
  if (dh <= 0 || dh % 16 != 0 || dh > 256)
    throw std::invalid_argument("decode attention: head_dim " + std::to_string(dh) +
                                " must be a multiple of 16 in 16 .. 256");
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0 || a.block_size <= 0)
    throw std::invalid_argument("decode attention: need num_heads a positive multiple of num_kv_heads and block_size > 0");
  if (num_splits < 1 || num_sequences < 0 || num_sequences > 65535 ||
      int64_t(a.num_kv_heads) * ceil_div(a.num_heads / a.num_kv_heads, 8) > 65535)
    throw std::invalid_argument("decode attention: need num_splits >= 1, at most 65535 sequences and KV heads");
  if (a.qkv_stride % 8 != 0 || !aligned16(a.qkv) || !aligned16(a.k_cache) || !aligned16(a.v_cache))
    throw std::invalid_argument("decode attention: qkv, caches and qkv_stride must be 16-byte aligned");
  if (num_sequences == 0) return;
  float* ws_acc = workspace;
  float* ws_ml = workspace + int64_t(num_sequences) * a.num_heads * num_splits * dh;
  switch (decode_lanes_per_key(dh)) {
    case 2: dispatch_heads<2>(a, num_sequences, num_splits, ws_acc, ws_ml, stream); break;
    case 4: dispatch_heads<4>(a, num_sequences, num_splits, ws_acc, ws_ml, stream); break;
    case 8: dispatch_heads<8>(a, num_sequences, num_splits, ws_acc, ws_ml, stream); break;
    case 16: dispatch_heads<16>(a, num_sequences, num_splits, ws_acc, ws_ml, stream); break;
    default: dispatch_heads<32>(a, num_sequences, num_splits, ws_acc, ws_ml, stream); break;
  }
  const dim3 grid(unsigned(a.num_heads), unsigned(num_sequences));
  decode_combine_kernel<<<grid, kDecodeThreads, 0, stream>>>(a.sequences, a.num_heads, dh, num_splits, ws_acc,
                                                             ws_ml, a.out);
  CUDA_CHECK_LAUNCH("decode_combine_kernel");
}

}  // namespace servesim::cuda
