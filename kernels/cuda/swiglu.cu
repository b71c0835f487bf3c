// launch_swiglu: the Llama MLP activation silu(gate) * up
// (kernels/cuda/cuda_kernels.h), as the CPU backend's cpu::swiglu.
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/swiglu_value.cuh"

namespace servesim::cuda {
namespace {

constexpr int kThreads = 256;

// gate_up bf16 [T, 2I] (gate columns 0 .. I-1, up columns I .. 2I-1),
// act bf16 [T, I]:
//   act[t, i] = bf16(g / (1 + exp(-g)) * u)  in fp32, g = gate_up[t, i], u = gate_up[t, I + i].
// 2-D grid-stride: y over tokens, x over columns.
__global__ void swiglu_kernel(const bf16* __restrict__ gate_up, int32_t T, int64_t I, bf16* __restrict__ act) {
  const int64_t col_stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    const bf16* gate = gate_up + t * 2 * I;
    const bf16* up = gate + I;
    bf16* out = act + t * I;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < I; i += col_stride) {
      const float g = __bfloat162float(gate[i]), u = __bfloat162float(up[i]);
      out[i] = __float2bfloat16(swiglu_value(g, u));
    }
  }
}

}  // namespace

void launch_swiglu(const bf16* gate_up, int32_t T, int64_t I, bf16* act, cudaStream_t stream) {
  if (T < 0 || I < 0) throw std::invalid_argument("launch_swiglu: negative T or I");
  if (T == 0 || I == 0) return;
  const int64_t col_blocks = (I + kThreads - 1) / kThreads;
  const dim3 grid(unsigned(col_blocks < 1024 ? col_blocks : 1024), unsigned(T < 65535 ? T : 65535));
  swiglu_kernel<<<grid, kThreads, 0, stream>>>(gate_up, T, I, act);
  CUDA_CHECK_LAUNCH("swiglu_kernel");
}

}  // namespace servesim::cuda
