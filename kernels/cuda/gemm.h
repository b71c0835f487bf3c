// The projections and the LM head through cuBLAS: bf16 inputs, fp32
// accumulation (CUBLAS_COMPUTE_32F), bf16 or fp32 output.
//
// Row-major out[T, N] = in[T, K] W[N, K]^T is, in cuBLAS's column-major
// terms, out' (N x T) = W' (K x N)^T in' (K x T): one cublasGemmEx with
// op(A) = T, op(B) = N and leading dimensions K, K, N.
#pragma once

#include <cublas_v2.h>

#include <cstdint>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"

namespace servesim::cuda {

class Gemm {
 public:
  // A handle bound to `stream`, with its own workspace so that cuBLAS never
  // allocates during a CUDA graph capture.
  explicit Gemm(cudaStream_t stream);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // out[T, N] = in[T, K] W[N, K]^T, bf16 out     in bf16 [T, K], W bf16 [N, K]
  void bf16_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, bf16* out);
  // The same with an fp32 out (logits).
  void f32_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, float* out);

 private:
  void run(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, void* out, cudaDataType out_type);
  cublasHandle_t handle_ = nullptr;
  DeviceBuffer<uint8_t> workspace_;
};

}  // namespace servesim::cuda
