// The GPU's ceilings for the CUDA calibration (calib/calibrate_cuda.h),
// timed with a cuda_calib::Timer (warm, eager batches: each operation is
// long enough that the host's launches never starve the GPU):
//   copy   device-to-device cudaMemcpyAsync of `array_bytes`; bytes = read +
//          written = 2 x array_bytes;
//   triad  cuBLAS saxpy y = a x + y over two fp32 arrays of `array_bytes`:
//          STREAM triad's traffic, 3 x 4 bytes per element;
//   GEMM   cuBLAS bf16 GEMM n x n x n through cuda::Gemm (bf16 out, fp32
//          accumulation, as the decoder's projections); 2 n^3 FLOPs.
// Needs the CUDA backend.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "calib/cuda_timer.h"

namespace servesim::cuda_calib {

struct CeilingSizes {
  size_t array_bytes = 0;
  int64_t gemm_n = 0;
};

struct Ceilings {
  double copy_bytes_per_s = 0;
  double triad_bytes_per_s = 0;
  double gemm_flops_per_s = 0;
};

// GPU memory the ceilings hold at once (their largest buffers, a cuBLAS workspace).
double ceilings_bytes(const CeilingSizes& sizes);

// Benchmarks "copy/bytes:B", "triad/bytes:B" and "gemm_peak/n:N" on the
// current device; buffers are freed before it returns.
Ceilings measure_ceilings(Timer& timer, cudaStream_t stream, const CeilingSizes& sizes, uint64_t seed);

}  // namespace servesim::cuda_calib
