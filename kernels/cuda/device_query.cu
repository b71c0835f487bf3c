// Lists the CUDA devices this process can see: proves the CUDA toolchain
// builds, and reports "no GPU" cleanly where there is none.
// Exit status: 0 with at least one device, 3 without (ctest reads 3 as
// "skipped"), 1 on any other CUDA error.
#include <cstdio>

#include <cuda_runtime.h>

int main() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver ||
      (status == cudaSuccess && count == 0)) {
    std::printf("no GPU: %s\n", status == cudaSuccess ? "no CUDA devices" : cudaGetErrorString(status));
    return 3;
  }
  if (status != cudaSuccess) {
    std::fprintf(stderr, "cudaGetDeviceCount failed: %s (%s:%d)\n", cudaGetErrorString(status),
                 __FILE__, __LINE__);
    return 1;
  }
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp p{};
    const cudaError_t e = cudaGetDeviceProperties(&p, i);
    if (e != cudaSuccess) {
      std::fprintf(stderr, "cudaGetDeviceProperties(%d) failed: %s (%s:%d)\n", i,
                   cudaGetErrorString(e), __FILE__, __LINE__);
      return 1;
    }
    std::printf("cuda:%d %s sm_%d%d, %d SMs, %.1f GiB, %d-bit memory bus, L2 %.0f MiB\n", i, p.name,
                p.major, p.minor, p.multiProcessorCount, double(p.totalGlobalMem) / (1 << 30),
                p.memoryBusWidth, double(p.l2CacheSize) / (1 << 20));
  }
  return 0;
}
