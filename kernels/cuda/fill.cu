// launch_fill_uniform (bf16 and fp32) and launch_convert_to_bf16
// (kernels/cuda/cuda_kernels.h): random weights made on the device, and
// host fp32 weights converted on the device.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 1 << 16;

// SplitMix64's output function (Steele, Lea, Flood 2014; the constants of
// sim/random.h's splitmix64_finalize): state += golden gamma, then mix.
__device__ uint64_t splitmix64_finalize(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Element i of the tensor whose stream seed is `seed`, as random_weights()
// (kernels/decoder/host_weights.cpp) makes it on the host: value i of a
// SplitMix64 stream started at `seed` is splitmix64_finalize(seed + i *
// gamma); its top 53 bits give u_i in [0, 1); the tensor holds
//   offset + scale * float(2 u_i - 1)
// in float arithmetic without FMA contraction (explicit _rn operations), so
// the host's values are reproduced bit for bit.
__device__ float fill_value(uint64_t seed, int64_t i, float scale, float offset) {
  const double u = double(splitmix64_finalize(seed + uint64_t(i) * 0x9E3779B97F4A7C15ULL) >> 11) * 0x1.0p-53;
  const float symmetric = float(__dadd_rn(__dmul_rn(u, 2.0), -1.0));
  return __fadd_rn(offset, __fmul_rn(scale, symmetric));
}
__global__ void fill_uniform_kernel(float* __restrict__ p, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = fill_value(seed, i, scale, offset);
}
__global__ void fill_uniform_kernel(bf16* __restrict__ p, int64_t n, uint64_t seed, float scale, float offset) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    p[i] = __float2bfloat16(fill_value(seed, i, scale, offset));
}

// src fp32 [n], dst bf16 [n]: dst[i] = bf16(src[i]) (round to nearest even).
__global__ void convert_to_bf16_kernel(const float* __restrict__ src, int64_t n, bf16* __restrict__ dst) {
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16(src[i]);
}

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b > kMaxBlocks ? kMaxBlocks : b);
}

}  // namespace

void launch_fill_uniform(bf16* p, int64_t n, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  if (n < 0) throw std::invalid_argument("launch_fill_uniform: negative n");
  if (n == 0) return;
  fill_uniform_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, n, seed, scale, offset);
  CUDA_CHECK_LAUNCH("fill_uniform_kernel(bf16)");
}

void launch_fill_uniform(float* p, int64_t n, uint64_t seed, float scale, float offset, cudaStream_t stream) {
  if (n < 0) throw std::invalid_argument("launch_fill_uniform: negative n");
  if (n == 0) return;
  fill_uniform_kernel<<<blocks_for(n), kThreads, 0, stream>>>(p, n, seed, scale, offset);
  CUDA_CHECK_LAUNCH("fill_uniform_kernel(fp32)");
}

void launch_convert_to_bf16(const float* src, int64_t n, bf16* dst, cudaStream_t stream) {
  if (n < 0) throw std::invalid_argument("launch_convert_to_bf16: negative n");
  if (n == 0) return;
  convert_to_bf16_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, n, dst);
  CUDA_CHECK_LAUNCH("convert_to_bf16_kernel");
}

}  // namespace servesim::cuda
