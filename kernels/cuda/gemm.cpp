#include "kernels/cuda/gemm.h"

#include <limits>
#include <stdexcept>

namespace servesim::cuda {
namespace {

// cuBLAS's recommended workspace on Hopper is 32 MiB.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;

int checked_int(int64_t v, const char* what) {
  if (v < 0 || v > std::numeric_limits<int>::max())
    throw std::invalid_argument(std::string("Gemm: ") + what + " out of cuBLAS's int range");
  return int(v);
}

}  // namespace

Gemm::Gemm(cudaStream_t stream) : workspace_(kWorkspaceBytes) {
  CUBLAS_CHECK(cublasCreate(&handle_));
  CUBLAS_CHECK(cublasSetStream(handle_, stream));
  CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_.data(), workspace_.bytes()));
  // bf16 tensor cores; fp32 accumulation is kept by CUBLAS_COMPUTE_32F.
  CUBLAS_CHECK(cublasSetMathMode(handle_, CUBLAS_DEFAULT_MATH));
}

Gemm::~Gemm() {
  if (handle_) cublasDestroy(handle_);
}

void Gemm::bf16_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, bf16* out) {
  run(in, w, T, N, K, out, CUDA_R_16BF);
}

void Gemm::f32_out(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, float* out) {
  run(in, w, T, N, K, out, CUDA_R_32F);
}

void Gemm::run(const bf16* in, const bf16* w, int64_t T, int64_t N, int64_t K, void* out, cudaDataType out_type) {
  if (T == 0) return;
  const float alpha = 1.0f, beta = 0.0f;
  const int m = checked_int(N, "N"), n = checked_int(T, "T"), k = checked_int(K, "K");
  CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, m, n, k, &alpha, w, CUDA_R_16BF, k, in,
                            CUDA_R_16BF, k, &beta, out, out_type, m, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace servesim::cuda
