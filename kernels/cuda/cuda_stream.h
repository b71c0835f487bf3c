// An owning non-blocking CUDA stream (cudaStreamCreateWithFlags /
// cudaStreamDestroy), not copyable.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"

namespace servesim::cuda {

class CudaStream {
 public:
  CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~CudaStream() { cudaStreamDestroy(stream_); }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

}  // namespace servesim::cuda
