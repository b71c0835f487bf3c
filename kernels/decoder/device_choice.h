// Which device a real run, a calibration or a validation uses: the flag
// value "cpu", "cuda" (device 0) or "cuda:N".
#pragma once

#include <string>

namespace servesim {

struct DeviceChoice {
  bool cuda = false;
  int index = 0;  // the CUDA device ordinal
  // "cpu" or "cuda" (what a device profile's device_kind records).
  std::string kind() const { return cuda ? "cuda" : "cpu"; }
  std::string name() const;  // "cpu", "cuda:0", ...
};

// InputError naming --device for anything else.
DeviceChoice parse_device(const std::string& value);

// "" when CUDA device `index` can run the decoder; otherwise why not (this
// build has no CUDA backend, no GPU is visible, the index is out of range,
// or the GPU is older than the build's architecture, the backend's module
// cannot be loaded). Defined by kernels/cuda_plugin/cuda_loader.cpp.
std::string cuda_device_unavailable(int index);

// --threads: 0 (every core) .. kMaxCpuThreads, else InputError. The bound
// allows oversubscribing any host this runs on; far above it OpenMP fails
// to create its threads (or the process runs out of stack) instead of
// saying what is wrong.
inline constexpr int kMaxCpuThreads = 1024;
void check_cpu_threads(int threads);

// InputError (exit 2 at the CLI) with cuda_device_unavailable's reason when
// `device` is a CUDA device that cannot be used.
void require_device(const DeviceChoice& device);

}  // namespace servesim
