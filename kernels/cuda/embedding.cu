// launch_embedding: gathers token rows of the bf16 embedding table into the
// fp32 residual stream (kernels/cuda/cuda_kernels.h).
#include <stdexcept>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"

namespace servesim::cuda {
namespace {

constexpr int kThreads = 256;

// embedding bf16 [V, d], tokens int32 [T], x fp32 [T, d]:
//   x[t, c] = float(embedding[tokens[t], c]).
// 2-D grid-stride: y over tokens, x over columns (any T, any d).
__global__ void embedding_kernel(const bf16* __restrict__ embedding, const int32_t* __restrict__ tokens,
                                 int32_t T, int64_t d, float* __restrict__ x) {
  const int64_t col_stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
    const bf16* src = embedding + int64_t(tokens[t]) * d;
    float* dst = x + t * d;
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < d; c += col_stride)
      dst[c] = __bfloat162float(src[c]);
  }
}

}  // namespace

void launch_embedding(const bf16* embedding, const int32_t* tokens, int32_t T, int64_t d, float* x,
                      cudaStream_t stream) {
  if (T < 0 || d < 0) throw std::invalid_argument("launch_embedding: negative T or d");
  if (T == 0 || d == 0) return;
  const int64_t col_blocks = (d + kThreads - 1) / kThreads;
  const dim3 grid(unsigned(col_blocks < 1024 ? col_blocks : 1024), unsigned(T < 65535 ? T : 65535));
  embedding_kernel<<<grid, kThreads, 0, stream>>>(embedding, tokens, T, d, x);
  CUDA_CHECK_LAUNCH("embedding_kernel");
}

}  // namespace servesim::cuda
