// main() of the [cuda] tests. Listing the tests (ctest's discovery) works
// anywhere; running them needs a GPU: without one every test run prints why
// and exits 3, which ctest reports as skipped.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string_view>

#include <cuda_runtime_api.h>

int main(int argc, char* argv[]) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::string_view(argv[i]).starts_with("--list")) listing = true;
  if (!listing) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess || count == 0) {
      std::printf("skipped: no CUDA device (%s); the [cuda] tests need a GPU\n",
                  status == cudaSuccess ? "none found" : cudaGetErrorString(status));
      return 3;
    }
  }
  return Catch::Session().run(argc, argv);
}
