// Helpers of the [cuda] tests: bf16 conversion on the host, random host
// data, device buffers filled from host vectors, and poisoning (outputs are
// filled with NaN before a kernel runs, so an element it fails to write
// fails the comparison).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_buffer.h"

namespace servesim::cuda::test {

inline bf16 to_bf16(float x) { return __float2bfloat16(x); }
inline float to_float(bf16 x) { return __bfloat162float(x); }

// Rounds every value to bf16 precision (what the device sees after upload).
inline std::vector<float> round_to_bf16(std::vector<float> v) {
  for (float& x : v) x = to_float(to_bf16(x));
  return v;
}
inline std::vector<bf16> to_bf16(std::span<const float> v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_bf16(v[i]);
  return out;
}
inline std::vector<float> to_float(std::span<const bf16> v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = to_float(v[i]);
  return out;
}

// Uniform on [lo, hi), never all zeros.
inline std::vector<float> random_floats(size_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

template <class T>
DeviceBuffer<T> device_copy(std::span<const T> host) {
  DeviceBuffer<T> d(host.size());
  d.upload(host);
  return d;
}
template <class T>
DeviceBuffer<T> device_copy(const std::vector<T>& host) {
  return device_copy(std::span<const T>(host));
}

// Every byte 0xFF: a NaN in bf16 and fp32, -1 in int32.
template <class T>
void poison(DeviceBuffer<T>& d) {
  if (d.size()) CUDA_CHECK(cudaMemset(d.data(), 0xFF, d.bytes()));
}
template <class T>
DeviceBuffer<T> poisoned(size_t n) {
  DeviceBuffer<T> d(n);
  poison(d);
  return d;
}

inline void synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

// max |a - b| over all elements (NaN anywhere gives +inf).
inline double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (!(d == d)) return INFINITY;
    m = std::max(m, d);
  }
  return a.size() == b.size() ? m : INFINITY;
}

}  // namespace servesim::cuda::test
