// launch_small_m_gemm (kernels/cuda/cuda_kernels.h): the projections and
// the LM head of a decode step, where T <= 8 rows meet a weight of N x K.
//
// Why not cuBLASLt here: at T <= 8 the product is a matrix-vector product
// that streams the weight once, and its speed is the copy bandwidth at
// which the weight is read. cuBLASLt's tiles are made for T in the tens and
// up; measured on an H200 (experiments/results/h200/, 2026-11-30) the 8B
// shape's qkv and o projections streamed at about half the copy rate at
// T = 1. This kernel is the usual GEMV layout (llama.cpp's mul_mat_vec and
// TensorRT-LLM's small-batch GEMV read weights the same way):
//   - one warp computes R whole output rows for all T tokens;
//   - each lane reads 16 bytes (8 bf16) of each of its rows per step, so a
//     warp reads 512 contiguous bytes of a row per step, and 2-4 steps
//     are in flight (the k loop is unrolled);
//   - the T activation chunks a lane needs at that k are read once per step
//     and reused across the R rows (activations are T x K: small, L1/L2
//     resident; the weights are streamed with an evict-first hint so they
//     do not push the activations out);
//   - fp32 accumulation, a warp-shuffle reduction at the end.
// R grows with T so that activation reads per weight byte stay below what
// L1 serves: R = 2 at T <= 2, 4 above.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/swiglu_value.cuh"

namespace servesim::cuda {
namespace {

constexpr int kThreads = 128;  // 4 warps per block
constexpr int kWarpsPerBlock = kThreads / 32;

__device__ __forceinline__ void store(bf16* p, float v) { *p = __float2bfloat16(v); }
__device__ __forceinline__ void store(float* p, float v) { *p = v; }

// acc += dot(x[0..7], w[0..7]), both 8 bf16 in a uint4.
__device__ __forceinline__ float dot8(const uint4& x, const uint4& w, float acc) {
  const __nv_bfloat162* x2 = reinterpret_cast<const __nv_bfloat162*>(&x);
  const __nv_bfloat162* w2 = reinterpret_cast<const __nv_bfloat162*>(&w);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 a = __bfloat1622float2(x2[i]), b = __bfloat1622float2(w2[i]);
    acc = fmaf(a.x, b.x, acc);
    acc = fmaf(a.y, b.y, acc);
  }
  return acc;
}

// in bf16 [T, K], w bf16 [N, K], out [T, N]:
//   out[t, n] = sum_k in[t, k] w[n, k]
// or with kSwiglu, w bf16 [2N, K] (gate rows, then up rows) and out bf16 [T, N]:
//   out[t, n] = bf16(silu(g) u), g = bf16(sum_k in[t, k] w[n, k]), u = bf16(... w[N + n, k]),
// the gate_up product and launch_swiglu (swiglu.cu) in one pass, bit for
// bit (each row's sum runs in the same order either way, and is rounded to
// bf16 before the activation as the stored gate_up would be).
// K % 8 == 0 and in, w 16-byte aligned (the launcher checks). Warp g of the
// grid computes output columns g C .. g C + C - 1 (those below N), C = R
// plain, R / 2 with kSwiglu.
template <int T, int R, class Out, bool kSwiglu>
__global__ void __launch_bounds__(kThreads) small_m_gemm_kernel(const bf16* __restrict__ in,
                                                                const bf16* __restrict__ w, int64_t N, int64_t K,
                                                                Out* __restrict__ out) {
  constexpr int C = kSwiglu ? R / 2 : R;  // output columns per warp
  const int lane = int(threadIdx.x) & 31;
  const int64_t first = (int64_t(blockIdx.x) * kWarpsPerBlock + int64_t(threadIdx.x) / 32) * C;
  if (first >= N) return;
  const int64_t chunks = K / 8;  // uint4 per row
  const uint4* in4 = reinterpret_cast<const uint4*>(in);
  // Row r of the warp: column first + r % C's weight row (with kSwiglu, its
  // gate row for r < C, its up row N further for r >= C). A column past N
  // rereads the last one's row and is not stored.
  const uint4* rows[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t column = first + r % C < N ? first + r % C : N - 1;
    rows[r] = reinterpret_cast<const uint4*>(w) + (kSwiglu && r >= C ? N + column : column) * chunks;
  }
  float acc[T][R];
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[t][r] = 0.0f;

  // Steps in flight per lane: more where each carries fewer rows' bytes.
  constexpr int kUnroll = T <= 2 ? 4 : 2;
#pragma unroll kUnroll
  for (int64_t c = lane; c < chunks; c += 32) {
    uint4 wv[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wv[r] = __ldcs(rows[r] + c);
#pragma unroll
    for (int t = 0; t < T; ++t) {
      const uint4 x = __ldg(in4 + t * chunks + c);
#pragma unroll
      for (int r = 0; r < R; ++r) acc[t][r] = dot8(x, wv[r], acc[t][r]);
    }
  }

#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc[t][r] += __shfl_xor_sync(0xffffffffu, acc[t][r], offset);
  if (lane != 0) return;
#pragma unroll
  for (int t = 0; t < T; ++t)
#pragma unroll
    for (int r = 0; r < C; ++r) {
      if (first + r >= N) continue;
      if constexpr (kSwiglu) {
        // As swiglu_kernel: from the bf16 g and u that gate_up would hold.
        const float g = __bfloat162float(__float2bfloat16(acc[t][r]));
        const float u = __bfloat162float(__float2bfloat16(acc[t][r + C]));
        store(out + int64_t(t) * N + first + r, swiglu_value(g, u));
      } else {
        store(out + int64_t(t) * N + first + r, acc[t][r]);
      }
    }
}

template <int T, class Out, bool kSwiglu>
void launch_rows(const bf16* in, const bf16* w, int64_t N, int64_t K, Out* out, cudaStream_t stream) {
  constexpr int R = T <= 2 ? 2 : 4;
  constexpr int C = kSwiglu ? R / 2 : R;
  const int64_t warps = (N + C - 1) / C;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  if (blocks > 0x7fffffff) throw std::invalid_argument("launch_small_m_gemm: N too large");
  small_m_gemm_kernel<T, R, Out, kSwiglu><<<unsigned(blocks), kThreads, 0, stream>>>(in, w, N, K, out);
  CUDA_CHECK_LAUNCH("small_m_gemm_kernel");
}

template <bool kSwiglu = false, class Out>
void launch(const bf16* in, const bf16* w, int32_t T, int64_t N, int64_t K, Out* out, cudaStream_t stream) {
  if (T < 0 || N < 0 || K < 0) throw std::invalid_argument("launch_small_m_gemm: negative T, N or K");
  if (T > kSmallMGemmMaxRows)
    throw std::invalid_argument("launch_small_m_gemm: T above kSmallMGemmMaxRows (use cuda::Gemm)");
  if (!small_m_gemm_fits(in, w, K)) throw std::invalid_argument("launch_small_m_gemm: K % 8 != 0 or unaligned");
  if (T == 0 || N == 0) return;
  switch (T) {
    case 1: return launch_rows<1, Out, kSwiglu>(in, w, N, K, out, stream);
    case 2: return launch_rows<2, Out, kSwiglu>(in, w, N, K, out, stream);
    case 3: return launch_rows<3, Out, kSwiglu>(in, w, N, K, out, stream);
    case 4: return launch_rows<4, Out, kSwiglu>(in, w, N, K, out, stream);
    case 5: return launch_rows<5, Out, kSwiglu>(in, w, N, K, out, stream);
    case 6: return launch_rows<6, Out, kSwiglu>(in, w, N, K, out, stream);
    case 7: return launch_rows<7, Out, kSwiglu>(in, w, N, K, out, stream);
    default: return launch_rows<8, Out, kSwiglu>(in, w, N, K, out, stream);
  }
}

}  // namespace

bool small_m_gemm_fits(const bf16* in, const bf16* w, int64_t K) {
  return K % 8 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

void launch_small_m_gemm(const bf16* in, const bf16* w, int32_t T, int64_t N, int64_t K, bf16* out,
                         cudaStream_t stream) {
  launch(in, w, T, N, K, out, stream);
}

void launch_small_m_gemm(const bf16* in, const bf16* w, int32_t T, int64_t N, int64_t K, float* out,
                         cudaStream_t stream) {
  launch(in, w, T, N, K, out, stream);
}

void launch_small_m_gemm_swiglu(const bf16* in, const bf16* w_gate_up, int32_t T, int64_t I, int64_t K, bf16* act,
                                cudaStream_t stream) {
  launch<true>(in, w_gate_up, T, I, K, act, stream);
}

}  // namespace servesim::cuda
