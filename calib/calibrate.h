// Calibration: times the decoder's own kernels on this device with Google
// Benchmark and turns the medians into a DeviceProfile.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "calib/profile.h"
#include "sim/model_spec.h"

namespace servesim {

struct CalibrationOptions {
  std::string device = "cpu";
  ModelSpec model;
  int threads = 0;                       // 0: every core
  bool quick = false;                    // coarse grids, few repeats: tests and first looks
  int32_t block_size = 16;               // KV block size to time attention with
  int32_t max_batched_tokens = 2048;     // largest token count M on the GEMM grid
  int64_t max_context = 0;               // largest context on the attention grids (0: model's max)
  uint64_t weights_seed = 0;             // random weights of the model's shape
  std::string raw_benchmarks_path;       // Google Benchmark JSON written here ("" = not kept)
};

// Runs every microbenchmark (warm-up, repeats, medians) and the ceilings
// (STREAM copy/triad on arrays >= 4x the last-level cache, a large GEMM).
// `progress` receives one line per benchmark family.
DeviceProfile calibrate(const CalibrationOptions& options,
                        std::function<void(const std::string&)> progress = {});

}  // namespace servesim
