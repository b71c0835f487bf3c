// This machine's own limits, measured the way the decoder meets them:
// STREAM-style memory bandwidth (copy and triad) and the throughput of the
// decoder's GEMM (cpu::matmul) on a large square product. Shared by the
// calibration (calib/calibrate.cpp) and the decoder benchmark
// (bench/decoder_bench.cpp).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "kernels/cpu/cpu_backend.h"

namespace servesim::ceilings {

// The last-level cache: the larger of what sysconf and /sys report (under a
// VM they can disagree: sysconf may give the whole package's L3, /sys one
// core complex's); 0 when neither knows. STREAM sizes its arrays from this,
// the conservative figure.
size_t last_level_cache_bytes();

// The last-level cache one core actually sees: /sys's cpu0 index3 (one core
// complex's L3 on a chiplet CPU), else sysconf's, else 0.
size_t local_last_level_cache_bytes();

// Each STREAM array: 4x the last-level cache (STREAM's rule), or 256 MiB
// when the cache size is unknown.
size_t stream_array_bytes();

// Three arrays of doubles (`bytes_per_array` each), first touched by the
// threads that stream them.
struct StreamArrays {
  struct Free {
    void operator()(double* p) const;
  };
  using Array = std::unique_ptr<double[], Free>;
  size_t n = 0;
  Array a, b, c;
  // Each array on transparent huge pages where the kernel offers them
  // (madvise): a VM's first touch of gigabytes of 4 KiB pages can take
  // longer than the benchmarks (docs/calibration.md#ceilings).
  explicit StreamArrays(size_t bytes_per_array);
};

// One pass of STREAM's copy, c[i] = a[i]; returns its seconds.
// Bytes = 2 x n x 8 (read a, write c; as STREAM counts them, without the
// write-allocate read of c).
double copy_pass(StreamArrays& s);
double copy_bytes(const StreamArrays& s);

// One pass of STREAM's triad, a[i] = b[i] + q c[i]; returns its seconds.
// Bytes = 3 x n x 8 (read b and c, write a).
double triad_pass(StreamArrays& s);
double triad_bytes(const StreamArrays& s);

// A [rows, cols] matrix of uniform values in [-1, 1) from `seed`.
cpu::Matrix random_matrix(int64_t rows, int64_t cols, uint64_t seed);

// The decoder's GEMM, out = in W^T with in [n, n] and W [n, n], split
// across the OpenMP threads by cpu::matmul.
struct Gemm {
  int64_t n;
  cpu::Matrix in, w, out;
  explicit Gemm(int64_t size);  // also runs one product (warm-up, sizes out)
  double pass();                // one product; returns its seconds
  // FLOPs = 2 x n^3 (one multiply-add per term).
  double flops() const { return 2.0 * double(n) * double(n) * double(n); }
};

// CPU seconds that other processes (and the hypervisor, as steal time) took
// from this machine: every CPU's busy time from /proc/stat minus this
// process's own user + system time. On a shared machine this says whether
// timings can be trusted.
struct CpuUse {
  double machine_busy_s = 0, self_s = 0;
  std::chrono::steady_clock::time_point when = std::chrono::steady_clock::now();

  static CpuUse now();
  // The share of all CPUs' time since `start` that went to others.
  double others_share_since(const CpuUse& start) const;
};

}  // namespace servesim::ceilings
