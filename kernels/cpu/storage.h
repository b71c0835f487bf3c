// How the CPU backend stores a weight matrix or the KV cache, and the
// conversions to and from the fp32 it computes in.
//   fp32: as computed.
//   bf16: the upper 16 bits of the fp32 (round to nearest even on store),
//         so loading is a shift; half the bytes.
//   int8: symmetric, one fp32 scale per row (a weight matrix's output
//         channel; a cached token's K or V of one head): q = round(x / s),
//         s = max |x| / 127, x ~ q s. A quarter of fp32's bytes, plus scales.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>
#include <string>

namespace servesim::cpu {

enum class Storage { Fp32, Bf16, Int8 };

std::string to_string(Storage s);

// How the CPU backend stores what it holds (docs/quantization.md, "The CPU decoder").
struct Precision {
  Storage linear = Storage::Fp32;     // q/k/v/o, gate/up/down (int8: --quantization w8a16)
  Storage embedding = Storage::Fp32;  // the embedding and the LM head (the model's dtype)
  Storage kv = Storage::Fp32;         // the KV cache (int8: --kv-cache-dtype int8)
  bool operator==(const Precision&) const = default;
};
// "linear bf16, embedding bf16, kv int8".
std::string to_string(const Precision& p);
// Bytes of one element (scales not counted).
inline int storage_bytes(Storage s) { return s == Storage::Fp32 ? 4 : s == Storage::Bf16 ? 2 : 1; }

inline uint16_t to_bf16(float x) {
  const uint32_t u = std::bit_cast<uint32_t>(x);
  if (std::isnan(x)) return uint16_t((u >> 16) | 0x40);  // stays a NaN
  return uint16_t((u + 0x7FFF + ((u >> 16) & 1)) >> 16);  // round to nearest even
}
inline float from_bf16(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// Scale of a row for int8: max |x| / 127, 1 for an all-zero row (so that
// dequantizing gives 0 without a division by 0).
float int8_scale(const float* x, int64_t n);
// q[i] = clamp(round(x[i] / scale), -127, 127).
void quantize_int8(const float* x, int64_t n, float scale, int8_t* q);

// dst[i] = float(src[i]) (* scale): the loops the kernels call on each row.
void load_bf16(const uint16_t* src, int64_t n, float* dst);
void load_int8(const int8_t* src, int64_t n, float scale, float* dst);
// sum_i x[i] * w[i] (* scale) without materialising w in fp32.
float dot_bf16(const float* x, const uint16_t* w, int64_t n);
float dot_int8(const float* x, const int8_t* w, int64_t n);  // times the row's scale by the caller

}  // namespace servesim::cpu
