// Checked CUDA and cuBLAS calls: every call's status is tested, and an error
// becomes a CudaError naming the call, the file and the line.
#pragma once

#include <cuda_runtime_api.h>

#include <stdexcept>
#include <string>

namespace servesim::cuda {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(int status, const char* call, const char* file, int line);

}  // namespace servesim::cuda

// CUDA_CHECK(cudaMalloc(&p, n));  CUBLAS_CHECK(cublasLtMatmul(...));
#define CUDA_CHECK(call)                                                            \
  do {                                                                              \
    const cudaError_t servesim_status_ = (call);                                    \
    if (servesim_status_ != cudaSuccess)                                            \
      ::servesim::cuda::throw_cuda_error(servesim_status_, #call, __FILE__, __LINE__); \
  } while (0)

#define CUBLAS_CHECK(call)                                                          \
  do {                                                                              \
    const int servesim_status_ = int(call);                                         \
    if (servesim_status_ != 0)                                                      \
      ::servesim::cuda::throw_cublas_error(servesim_status_, #call, __FILE__, __LINE__); \
  } while (0)

// After a kernel launch: the launch's own error (bad configuration, too much
// shared memory), named after the kernel.
#define CUDA_CHECK_LAUNCH(kernel_name)                                              \
  ::servesim::cuda::check_launch(kernel_name, __FILE__, __LINE__)

namespace servesim::cuda {
inline void check_launch(const char* kernel, const char* file, int line) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) throw_cuda_error(status, (std::string("launch of ") + kernel).c_str(), file, line);
}
}  // namespace servesim::cuda
