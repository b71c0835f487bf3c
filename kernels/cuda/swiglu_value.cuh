// The SwiGLU activation of one element, shared by launch_swiglu (swiglu.cu)
// and the fused gate_up + SwiGLU product (small_m_gemm.cu), so that both
// compute it with the same instructions and round it alike.
#pragma once

#include <cuda_runtime.h>

namespace servesim::cuda {

// silu(g) * u = g / (1 + exp(-g)) * u, in fp32.
__device__ __forceinline__ float swiglu_value(float g, float u) { return g / (1.0f + expf(-g)) * u; }

}  // namespace servesim::cuda
