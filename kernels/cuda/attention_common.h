// Index arithmetic and online-softmax steps shared by the attention kernels
// (attention_decode.cu, attention_prefill.cu). Plain C++ without CUDA
// syntax, so the host tests (tests/kernels/test_cuda_attention_math.cpp)
// run the very functions the kernels call.
//
// Online softmax (Milakov & Gimelshein 2018; FlashAttention-2, Dao 2023):
// scores are kept in the log2 domain, s2 = (q . k) * scale * log2(e), so
// exp(score - max) = exp2(s2 - m2). A running state (m, l, acc) over keys
// seen so far is: m the max score, l = sum exp2(s - m), acc = sum exp2(s - m) v.
// A new block of keys with max m_b moves it to m' = max(m, m_b):
//   l' = l * exp2(m - m') + sum_b exp2(s - m'),  acc' likewise.
// Masked keys have s = -inf; a state that has seen none has m = -inf, l = 0.
// Flash-decoding (Dao, Haziza, Massa, Sizov 2023) merges per-split states
// the same way: weight_i = exp2(m_i - max_j m_j), out = sum w_i acc_i / sum w_i l_i.
#pragma once

#include <cmath>
#include <cstdint>

#ifndef SERVESIM_HD
#if defined(__CUDACC__)
#define SERVESIM_HD __host__ __device__ __forceinline__
#else
#define SERVESIM_HD inline
#endif
#endif

namespace servesim::cuda::attention {

constexpr float kLog2e = 1.4426950408889634f;

// ---- online softmax -------------------------------------------------------

SERVESIM_HD float exp2_hd(float x) {
#if defined(__CUDA_ARCH__)
  return exp2f(x);
#else
  return std::exp2(x);
#endif
}

SERVESIM_HD float max_of(float a, float b) { return a > b ? a : b; }

// Factor that moves a running (l, acc) from max m_old to m_new >= m_old.
// An empty state (m_old = -inf) has l = acc = 0: any finite factor works,
// and 0 avoids exp2(-inf - (-inf)) = NaN.
SERVESIM_HD float rescale_factor(float m_old, float m_new) {
  return m_old == -INFINITY ? 0.0f : exp2_hd(m_old - m_new);
}

// exp2(s - m) for a score s under max m >= s; 0 for a masked key (s = -inf),
// also when m = -inf (every key so far masked).
SERVESIM_HD float softmax_weight(float s, float m) { return s == -INFINITY ? 0.0f : exp2_hd(s - m); }

// ---- paged KV cache ----------------------------------------------------------

// Element offset of KV head g's row for the token at (block, offset) in one
// layer's cache [num_blocks][Hkv][block_size][dh].
SERVESIM_HD int64_t kv_row_offset(int32_t block, int32_t g, int32_t num_kv_heads, int32_t block_size,
                                  int32_t offset, int32_t head_dim) {
  return ((int64_t(block) * num_kv_heads + g) * block_size + offset) * head_dim;
}

// ---- decode (flash-decoding) -------------------------------------------------

// Keys [begin, end) of split `split` out of `num_splits` over a context of
// `context` keys: ceil(context / num_splits) keys each, the last ones short
// or empty (begin == end == context).
struct KeyRange {
  int32_t begin, end;
};
SERVESIM_HD KeyRange split_range(int32_t context, int32_t num_splits, int32_t split) {
  const int64_t len = (int64_t(context) + num_splits - 1) / num_splits;
  const int64_t b = int64_t(split) * len, e = b + len;
  return {int32_t(b < context ? b : context), int32_t(e < context ? e : context)};
}

constexpr int32_t kDecodeThreads = 128;  // 4 warps per block
constexpr int32_t kDecodeKeysPerThread = 4;  // keys each key lane holds per chunk

// Threads that share one key row, 8 bf16 (16 bytes) each: dh / 8 rounded up
// to a power of two (a shuffle-reduction group), lanes >= dh / 8 idle.
SERVESIM_HD int32_t decode_lanes_per_key(int32_t head_dim) {
  int32_t lanes = 1;
  while (lanes * 8 < head_dim) lanes *= 2;
  return lanes;
}
// Query heads one block serves (a power of two, at most 8): the block reads
// its KV head's keys once for all of them. A GQA group above 8 is split over
// ceil(group / 8) blocks.
SERVESIM_HD int32_t decode_heads_per_block(int32_t group) {
  int32_t g = 1;
  while (g < group && g < 8) g *= 2;
  return g;
}
SERVESIM_HD int32_t ceil_div(int32_t a, int32_t b) { return (a + b - 1) / b; }

// Workspace: the weighted values of every (sequence, query head, split),
// [num_sequences][H][num_splits][dh], then its (m, l) pairs
// [num_sequences][H][num_splits][2].
SERVESIM_HD int64_t decode_partial_index(int32_t sequence, int32_t head, int32_t split, int32_t num_heads,
                                         int32_t num_splits) {
  return (int64_t(sequence) * num_heads + head) * num_splits + split;
}
inline int64_t decode_workspace_floats(int32_t num_sequences, int32_t num_heads, int32_t head_dim,
                                       int32_t num_splits) {
  return int64_t(num_sequences) * num_heads * num_splits * (int64_t(head_dim) + 2);
}

// About two blocks per SM over the (sequence, KV head) pairs, in [1, 64].
inline int32_t choose_decode_splits(int32_t num_sequences, int32_t num_kv_heads, int32_t sm_count) {
  const int64_t pairs = int64_t(num_sequences > 1 ? num_sequences : 1) * (num_kv_heads > 1 ? num_kv_heads : 1);
  const int64_t target = 2 * int64_t(sm_count > 1 ? sm_count : 1);
  const int64_t splits = (target + pairs - 1) / pairs;
  return int32_t(splits < 1 ? 1 : splits > 64 ? 64 : splits);
}

// ---- prefill (FlashAttention-2 tiles) ----------------------------------------

constexpr int32_t kPrefillThreads = 128;  // 4 warps, 16 query rows each
constexpr int32_t kPrefillRows = 64;      // query rows per block (kPrefillQueryTile)
constexpr int32_t kPrefillKeys = 64;      // keys per K/V tile

// Keys a work item's tile reads: positions 0 .. num_cached + first_query + num_query - 1.
SERVESIM_HD int32_t prefill_kv_len(int32_t num_cached, int32_t first_query, int32_t num_query) {
  return num_cached + first_query + num_query;
}
// Last key position row `row` of the tile sees (causal). Padding rows
// (row >= num_query, never written) see what the last real row sees, so
// every row has at least key 0 and no row's softmax is empty.
SERVESIM_HD int32_t prefill_last_visible(int32_t num_cached, int32_t first_query, int32_t num_query, int32_t row) {
  return num_cached + first_query + (row < num_query ? row : num_query - 1);
}

// Dynamic shared memory of the prefill kernel, in bytes from its start
// (every region 128-byte aligned; row strides padded against bank conflicts
// and kept multiples of 16 bytes, as wmma::load_matrix_sync needs):
//   q         bf16 [64 rows][dh + 8]
//   k, v      bf16 [64 keys][dh + 8]
//   scratch   fp32 [4 warps][16][max(64, dh) + 4]   (scores, then the output)
//   p         bf16 [4 warps][16][64 + 8]             (probabilities)
//   alpha, l  fp32 [4 warps][16] each
struct PrefillSmem {
  int32_t ld_qkv, ld_scratch, ld_p;  // row strides in elements
  int32_t q, k, v, scratch, p, alpha, l, bytes;
};
SERVESIM_HD int32_t align128(int32_t bytes) { return (bytes + 127) / 128 * 128; }
SERVESIM_HD PrefillSmem prefill_smem(int32_t head_dim) {
  PrefillSmem s{};
  const int32_t warps = kPrefillThreads / 32;
  s.ld_qkv = head_dim + 8;
  s.ld_scratch = (head_dim > kPrefillKeys ? head_dim : kPrefillKeys) + 4;
  s.ld_p = kPrefillKeys + 8;
  s.q = 0;
  s.k = s.q + align128(kPrefillRows * s.ld_qkv * 2);
  s.v = s.k + align128(kPrefillKeys * s.ld_qkv * 2);
  s.scratch = s.v + align128(kPrefillKeys * s.ld_qkv * 2);
  s.p = s.scratch + align128(warps * 16 * s.ld_scratch * 4);
  s.alpha = s.p + align128(warps * 16 * s.ld_p * 2);
  s.l = s.alpha + align128(warps * 16 * 4);
  s.bytes = s.l + align128(warps * 16 * 4);
  return s;
}

}  // namespace servesim::cuda::attention
