// launch_add_rmsnorm: the residual add fused with the next RMSNorm
// (kernels/cuda/cuda_kernels.h). RMSNorm as Hugging Face's LlamaRMSNorm:
//   y = x / sqrt(mean(x^2) + eps) * weight, all in fp32.
#include <cstdint>
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

// Sum of v over the block (blockDim.x a multiple of 32, at most 1024); every
// thread gets the total. Three barriers, so consecutive calls may reuse
// `warp_sums` safely.
__device__ float block_sum(float v, float* warp_sums /* [32] */) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, num_warps = blockDim.x / 32;
  for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float s = lane < num_warps ? warp_sums[lane] : 0.0f;
    for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) warp_sums[32] = s;
  }
  __syncthreads();
  const float total = warp_sums[32];
  __syncthreads();
  return total;
}

// kVec consecutive elements: float4 / 8-byte bf16 loads when kVec == 4 (the
// launcher checks alignment), plain scalar accesses when kVec == 1.
template <int kVec>
__device__ void load(const float* p, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    for (int i = 0; i < kVec; ++i) v[i] = p[i];
  }
}
template <int kVec>
__device__ void store(float* p, const float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    *reinterpret_cast<float4*>(p) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    for (int i = 0; i < kVec; ++i) p[i] = v[i];
  }
}
// Four bf16 move as one 8-byte uint2: elements 0, 1 in .x, 2, 3 in .y, the
// lower address in the low 16 bits (little-endian). A bf16 is the top half
// of an fp32, so bits << 16 is its exact float value.
template <int kVec>
__device__ void load(const bf16* p, float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    const uint2 raw = *reinterpret_cast<const uint2*>(p);
    v[0] = __uint_as_float(raw.x << 16);
    v[1] = __uint_as_float(raw.x & 0xffff0000u);
    v[2] = __uint_as_float(raw.y << 16);
    v[3] = __uint_as_float(raw.y & 0xffff0000u);
  } else {
    for (int i = 0; i < kVec; ++i) v[i] = __bfloat162float(p[i]);
  }
}
template <int kVec>
__device__ void store(bf16* p, const float (&v)[kVec]) {
  if constexpr (kVec == 4) {
    unsigned b[4];
    for (int i = 0; i < 4; ++i) b[i] = __bfloat16_as_ushort(__float2bfloat16(v[i]));  // round to nearest even
    *reinterpret_cast<uint2*>(p) = make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
  } else {
    for (int i = 0; i < kVec; ++i) p[i] = __float2bfloat16(v[i]);
  }
}

// x fp32 [*, d], branch bf16 [*, d] (nullable), rows int32 [num_rows]
// (nullable: row k is k), weight fp32 [d], out bf16 [num_rows, d].
// One block per output row k (grid-stride), r = rows ? rows[k] : k:
//   x[r, :] += branch[r, :];  out[k, :] = bf16(x[r, :] * rsqrt(mean(x[r, :]^2) + eps) * weight).
// d % kVec == 0. Each thread touches the same columns in both passes, so
// it reads back only what it wrote itself.
template <int kVec>
__global__ void add_rmsnorm_kernel(float* __restrict__ x, const bf16* __restrict__ branch,
                                   const int32_t* __restrict__ rows, int32_t num_rows, int64_t d,
                                   const float* __restrict__ weight, float eps, bf16* __restrict__ out) {
  __shared__ float warp_sums[33];
  const int64_t groups = d / kVec;
  for (int64_t k = blockIdx.x; k < num_rows; k += gridDim.x) {
    const int64_t r = rows ? int64_t(rows[k]) : k;
    float* xr = x + r * d;
    float sum = 0.0f;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[kVec];
      load<kVec>(xr + g * kVec, v);
      if (branch) {
        float b[kVec];
        load<kVec>(branch + r * d + g * kVec, b);
        for (int i = 0; i < kVec; ++i) v[i] += b[i];
        store<kVec>(xr + g * kVec, v);
      }
      for (int i = 0; i < kVec; ++i) sum += v[i] * v[i];
    }
    const float scale = 1.0f / sqrtf(block_sum(sum, warp_sums) / float(d) + eps);
    bf16* outk = out + k * d;
    for (int64_t g = threadIdx.x; g < groups; g += blockDim.x) {
      float v[kVec], w[kVec];
      load<kVec>(xr + g * kVec, v);
      load<kVec>(weight + g * kVec, w);
      for (int i = 0; i < kVec; ++i) v[i] = v[i] * scale * w[i];
      store<kVec>(outk + g * kVec, v);
    }
  }
}

bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

}  // namespace

void launch_add_rmsnorm(float* x, const bf16* branch, const int32_t* rows, int32_t num_rows, int64_t d,
                        const float* weight, float eps, bf16* out, cudaStream_t stream) {
  if (num_rows < 0 || d < 0) throw std::invalid_argument("launch_add_rmsnorm: negative num_rows or d");
  if (num_rows == 0 || d == 0) return;
  const bool vec4 = d % 4 == 0 && aligned(x, 16) && aligned(weight, 16) && aligned(out, 8) &&
                    (branch == nullptr || aligned(branch, 8));
  const int64_t groups = vec4 ? d / 4 : d;
  // Threads: enough for one group each, rounded to whole warps, 32 .. 512.
  const int64_t want = (groups + 31) / 32 * 32;
  const int threads = int(want < 32 ? 32 : want > 512 ? 512 : want);
  const unsigned blocks = unsigned(num_rows);  // int32 fits gridDim.x (2^31 - 1)
  if (vec4) {
    add_rmsnorm_kernel<4><<<blocks, threads, 0, stream>>>(x, branch, rows, num_rows, d, weight, eps, out);
    CUDA_CHECK_LAUNCH("add_rmsnorm_kernel<4>");
  } else {
    add_rmsnorm_kernel<1><<<blocks, threads, 0, stream>>>(x, branch, rows, num_rows, d, weight, eps, out);
    CUDA_CHECK_LAUNCH("add_rmsnorm_kernel<1>");
  }
}

}  // namespace servesim::cuda
