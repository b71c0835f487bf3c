#include "kernels/cuda/cuda_check.h"

#include <cublas_api.h>

#include <fmt/format.h>

namespace servesim::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw CudaError(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(status),
                              cudaGetErrorString(status), call, file, line));
}

void throw_cublas_error(int status, const char* call, const char* file, int line) {
  throw CudaError(fmt::format("cuBLAS error {} ({}) in {} at {}:{}", status,
                              cublasGetStatusString(cublasStatus_t(status)), call, file, line));
}

}  // namespace servesim::cuda
