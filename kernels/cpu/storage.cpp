#include "kernels/cpu/storage.h"

#include <algorithm>

namespace servesim::cpu {

std::string to_string(Storage s) {
  switch (s) {
    case Storage::Fp32: return "fp32";
    case Storage::Bf16: return "bf16";
    case Storage::Int8: return "int8";
  }
  return "?";
}

std::string to_string(const Precision& p) {
  return "linear " + to_string(p.linear) + ", embedding " + to_string(p.embedding) + ", kv " + to_string(p.kv);
}

float int8_scale(const float* x, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(x[i]));
  return m > 0 ? m / 127.0f : 1.0f;
}

void quantize_int8(const float* x, int64_t n, float scale, int8_t* q) {
  const float inv = 1.0f / scale;
  for (int64_t i = 0; i < n; ++i) q[i] = int8_t(std::clamp(std::nearbyint(x[i] * inv), -127.0f, 127.0f));
}

// The loops below are written for GCC's vectoriser (-O3 -march=native):
// plain counted loops over restrict pointers, reductions marked as such.
void load_bf16(const uint16_t* __restrict src, int64_t n, float* __restrict dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = std::bit_cast<float>(uint32_t(src[i]) << 16);
}

void load_int8(const int8_t* __restrict src, int64_t n, float scale, float* __restrict dst) {
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]) * scale;
}

// The dot products keep kLanes independent partial sums (four AVX-512
// registers' worth): one running sum would wait on the latency of each
// fused multiply-add, which caps a core below its share of the memory
// bandwidth; four in flight hide it.
constexpr int64_t kLanes = 64;

float dot_bf16(const float* __restrict x, const uint16_t* __restrict w, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * std::bit_cast<float>(uint32_t(w[i + j]) << 16);
  float sum = 0;
  for (; i < n; ++i) sum += x[i] * std::bit_cast<float>(uint32_t(w[i]) << 16);
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < kLanes; ++j) sum += acc[j];
  return sum;
}

float dot_int8(const float* __restrict x, const int8_t* __restrict w, int64_t n) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
#pragma omp simd
    for (int64_t j = 0; j < kLanes; ++j) acc[j] += x[i + j] * float(w[i + j]);
  float sum = 0;
  for (; i < n; ++i) sum += x[i] * float(w[i]);
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < kLanes; ++j) sum += acc[j];
  return sum;
}

}  // namespace servesim::cpu
