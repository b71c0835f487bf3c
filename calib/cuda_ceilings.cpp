#include "calib/cuda_ceilings.h"

#include <cublas_v2.h>

#include <algorithm>
#include <climits>

#include <fmt/format.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"

namespace servesim::cuda_calib {
namespace {

constexpr double kCublasWorkspaceBytes = 32.0 * (1 << 20);  // cuda::Gemm's

// A cuBLAS handle on `stream` (for saxpy; the GEMM goes through cuda::Gemm).
class Cublas {
 public:
  explicit Cublas(cudaStream_t stream) {
    CUBLAS_CHECK(cublasCreate(&handle_));
    CUBLAS_CHECK(cublasSetStream(handle_, stream));
  }
  ~Cublas() { cublasDestroy(handle_); }
  Cublas(const Cublas&) = delete;
  Cublas& operator=(const Cublas&) = delete;
  cublasHandle_t get() const { return handle_; }

 private:
  cublasHandle_t handle_ = nullptr;
};

}  // namespace

double ceilings_bytes(const CeilingSizes& s) {
  const double gemm = 3.0 * double(s.gemm_n) * double(s.gemm_n) * sizeof(cuda::bf16);
  return std::max(2.0 * double(s.array_bytes), gemm) + kCublasWorkspaceBytes;
}

Ceilings measure_ceilings(Timer& timer, cudaStream_t stream, const CeilingSizes& sizes, uint64_t seed) {
  Ceilings c;
  {
    // Both arrays as fp32 for saxpy; the copy moves the same bytes.
    const size_t floats = std::min(sizes.array_bytes / sizeof(float), size_t(INT_MAX));
    const size_t bytes = floats * sizeof(float);
    cuda::DeviceBuffer<float> x(floats), y(floats);
    cuda::launch_fill_uniform(x.data(), int64_t(floats), seed + 1, 1.0f, 0.0f, stream);
    cuda::launch_fill_uniform(y.data(), int64_t(floats), seed + 2, 1.0f, 0.0f, stream);
    const double copy_bytes = 2.0 * double(bytes);
    const double copy_s = timer.warm(
        fmt::format("copy/bytes:{}", bytes),
        [&] { CUDA_CHECK(cudaMemcpyAsync(y.data(), x.data(), bytes, cudaMemcpyDeviceToDevice, stream)); }, 0,
        copy_bytes, Timer::Graph::No);
    c.copy_bytes_per_s = copy_bytes / copy_s;

    Cublas cublas(stream);
    const float alpha = 0.5f;
    const double triad_bytes = 3.0 * double(bytes);
    const double triad_s = timer.warm(
        fmt::format("triad/bytes:{}", bytes),
        [&] { CUBLAS_CHECK(cublasSaxpy(cublas.get(), int(floats), &alpha, x.data(), 1, y.data(), 1)); }, 0,
        triad_bytes, Timer::Graph::No);
    c.triad_bytes_per_s = triad_bytes / triad_s;
  }
  {
    const int64_t n = sizes.gemm_n;
    const size_t elements = size_t(n * n);
    cuda::DeviceBuffer<cuda::bf16> a(elements), b(elements), out(elements);
    cuda::launch_fill_uniform(a.data(), int64_t(elements), seed + 3, 1.0f, 0.0f, stream);
    cuda::launch_fill_uniform(b.data(), int64_t(elements), seed + 4, 1.0f, 0.0f, stream);
    cuda::Gemm gemm(stream);
    const double flops = 2.0 * double(n) * double(n) * double(n);
    const double gemm_s = timer.warm(
        fmt::format("gemm_peak/n:{}", n), [&] { gemm.bf16_out(a.data(), b.data(), n, n, n, out.data()); }, flops, 0,
        Timer::Graph::No);
    c.gemm_flops_per_s = flops / gemm_s;
  }
  return c;
}

}  // namespace servesim::cuda_calib
