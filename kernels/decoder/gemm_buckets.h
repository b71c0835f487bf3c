// The token-count buckets the CUDA backend chooses its cuBLASLt algorithms
// for (kernels/cuda/gemm.h): every product of T rows runs with the
// algorithm chosen for its bucket, T rounded up to 1, 2, 4, a multiple of 8
// up to 256, then one of four steps per octave (320, 384, 448, 512, 640,
// ...). So a GEMM's time is a staircase in T with a step at every bucket's
// edge, not a smooth curve: the CUDA calibration times both edges of each
// wide bucket (calib/calibration_grids.cpp), and needs the rule without a
// CUDA build, hence here rather than in kernels/cuda/. Header-only: the
// CUDA module resolves nothing of it from the servesim executable.
#pragma once

#include <cstdint>
#include <vector>

namespace servesim {

// The T a product of T rows is run with the algorithm of.
inline int64_t gemm_algorithm_bucket(int64_t T) {
  if (T <= 1) return 1;
  if (T <= 2) return 2;
  if (T <= 4) return 4;
  if (T <= 256) return (T + 7) / 8 * 8;  // the decode graphs' batch buckets (sim/cost/decode_padding.h)
  // Four steps per octave: 320, 384, 448, 512, 640, ...
  int64_t octave = 256;
  while (octave * 2 < T) octave *= 2;
  const int64_t step = octave / 4;
  return (T + step - 1) / step * step;
}

// Every bucket a T in 1 .. max_T falls in, ascending (the last may exceed
// max_T); none for max_T < 1.
inline std::vector<int64_t> gemm_algorithm_buckets(int64_t max_T) {
  std::vector<int64_t> buckets;
  for (int64_t T = 1; T <= max_T; T = buckets.back() + 1) buckets.push_back(gemm_algorithm_bucket(T));
  return buckets;
}

}  // namespace servesim
