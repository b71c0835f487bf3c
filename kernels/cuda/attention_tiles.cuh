// Asynchronous copies of the prefill attention kernels
// (attention_prefill.cu, attention_prefill_mma.cu): 16-byte cp.async from
// global to shared memory, and a K or V tile of the paged cache.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/attention_common.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda::attention {

// 16 bytes global -> shared, asynchronously; zero-filled when !valid (then
// src, still a valid address, is not read).
__device__ __forceinline__ void cp_async16(void* dst, const void* src, bool valid) {
  const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(__cvta_generic_to_global(src)),
               "r"(valid ? 16 : 0)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Keys kt0 .. kt0 + kPrefillKeys - 1 of KV head g into dst [kPrefillKeys][ld]
// (rows >= kv_len zero), by the block's kPrefillThreads threads.
template <int DH>
__device__ __forceinline__ void load_kv_tile(const __nv_bfloat16* cache, __nv_bfloat16* dst, int ld, int kt0,
                                             int kv_len, const int32_t* table, int g, int Hkv, int bs) {
  constexpr int kVecs = DH / 8;  // 16-byte pieces per row
  for (int idx = threadIdx.x; idx < kPrefillKeys * kVecs; idx += kPrefillThreads) {
    const int row = idx / kVecs, vec = idx % kVecs, p = kt0 + row;
    const bool valid = p < kv_len;
    const __nv_bfloat16* src = valid ? cache + kv_row_offset(table[p / bs], g, Hkv, bs, p % bs, DH) + vec * 8 : cache;
    cp_async16(dst + row * ld + vec * 8, src, valid);
  }
}

// What a prefill block serves: block (h, y) of grid (H, num_items) takes
// query head h (KV head g) of work item num_items - 1 - y (the last items,
// usually the longest causal rows, start first), nq of its rows from new
// token q0, over kv_len keys in `tiles` tiles of kPrefillKeys. nq <= 0: no
// work (the same for the whole block).
struct PrefillBlock {
  int h, g, nq, q0, kv_len, tiles;
  DeviceSequence sq;
  const int32_t* table;
};
__device__ __forceinline__ PrefillBlock prefill_block(const AttentionArgs& args, const PrefillWorkItem* items,
                                                      int32_t num_items) {
  PrefillBlock b;
  b.h = int(blockIdx.x);
  b.g = b.h / (args.num_heads / args.num_kv_heads);
  const PrefillWorkItem item = items[num_items - 1 - int(blockIdx.y)];
  b.sq = args.sequences[item.sequence];
  b.nq = item.num_query < kPrefillRows ? item.num_query : kPrefillRows;
  b.q0 = item.first_query;
  b.kv_len = prefill_kv_len(b.sq.num_cached, b.q0, b.nq);
  b.tiles = ceil_div(b.kv_len, kPrefillKeys);
  b.table = args.block_tables + b.sq.block_offset;
  return b;
}

// The tile's query rows q0 .. q0 + nq - 1 of head h (rows nq .. kPrefillRows - 1
// zero) into dst [kPrefillRows][ld].
template <int DH>
__device__ __forceinline__ void load_query_tile(const AttentionArgs& args, const DeviceSequence& sq, int q0, int nq,
                                                int h, __nv_bfloat16* dst, int ld) {
  for (int idx = threadIdx.x; idx < kPrefillRows * (DH / 8); idx += kPrefillThreads) {
    const int row = idx / (DH / 8), vec = idx % (DH / 8);
    const bool valid = row < nq;
    const __nv_bfloat16* src =
        valid ? args.qkv + int64_t(sq.first_row + q0 + row) * args.qkv_stride + int64_t(h) * DH + vec * 8 : args.qkv;
    cp_async16(dst + row * ld + vec * 8, src, valid);
  }
}

}  // namespace servesim::cuda::attention

namespace servesim::cuda {
// The mma kernel (attention_prefill_mma.cu) for head dims prefill_mma_supports;
// arguments checked by launch_prefill_attention.
void launch_prefill_attention_mma(const AttentionArgs& a, const PrefillWorkItem* items, int32_t num_items,
                                  cudaStream_t stream);
}  // namespace servesim::cuda
