#include "sim/quantization.h"

#include <algorithm>
#include <cctype>
#include <cmath>

#include <fmt/format.h>

#include "sim/errors.h"

namespace servesim {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

constexpr double kScaleBytes = 4.0;       // fp32 per-channel and per-token scales
constexpr double kGroupScaleBytes = 2.0;  // fp16 group scales of int4 weights

}  // namespace

double Quantization::linear_bytes(double K, double N, int checkpoint_bytes) const {
  switch (weights) {
    case WeightQuantization::None: return K * N * checkpoint_bytes;
    case WeightQuantization::Fp8:
    case WeightQuantization::Int8:
    case WeightQuantization::W8A16: return K * N + kScaleBytes * N;
    case WeightQuantization::W4A16: return K * N / 2 + kGroupScaleBytes * N * std::ceil(K / double(group_size));
  }
  return K * N * checkpoint_bytes;
}

double Quantization::kv_bytes_per_token_layer(double Hkv, double dh, int checkpoint_bytes) const {
  switch (kv_cache) {
    case KvCacheDtype::Auto: return 2 * Hkv * dh * checkpoint_bytes;
    case KvCacheDtype::Fp8E4M3:
    case KvCacheDtype::Fp8E5M2: return 2 * Hkv * dh;  // per-layer scales: nothing per token
    case KvCacheDtype::Int8: return 2 * Hkv * (dh + kScaleBytes);
  }
  return 2 * Hkv * dh * checkpoint_bytes;
}

nlohmann::json Quantization::to_json() const {
  nlohmann::json j = {{"quantization", to_string(weights)}, {"kv_cache_dtype", to_string(kv_cache)}};
  if (weights == WeightQuantization::W4A16) j["group_size"] = group_size;
  return j;
}

std::string describe_precision(const std::string& dtype, const Quantization& q) {
  std::string s = dtype;
  if (q.weights != WeightQuantization::None) s += ", " + to_string(q.weights) + " weights";
  if (q.kv_cache != KvCacheDtype::Auto) s += ", " + to_string(q.kv_cache) + " KV cache";
  return s;
}

WeightQuantization parse_weight_quantization(const std::string& text) {
  const std::string t = lower(text);
  if (t == "none" || t.empty()) return WeightQuantization::None;
  if (t == "fp8") return WeightQuantization::Fp8;
  if (t == "int8") return WeightQuantization::Int8;
  if (t == "w8a16") return WeightQuantization::W8A16;
  if (t == "w4a16") return WeightQuantization::W4A16;
  throw InputError(fmt::format("--quantization '{}': expected none, fp8 (W8A8 on FP8 tensor cores), int8 (W8A8 on "
                               "INT8 tensor cores), w8a16 (int8 weight-only) or w4a16 (int4 weight-only, "
                               "groups of 128, as GPTQ/AWQ)",
                               text));
}

KvCacheDtype parse_kv_cache_dtype(const std::string& text) {
  const std::string t = lower(text);
  if (t == "auto") return KvCacheDtype::Auto;
  if (t == "fp8" || t == "fp8_e4m3") return KvCacheDtype::Fp8E4M3;
  if (t == "fp8_e5m2") return KvCacheDtype::Fp8E5M2;
  if (t == "int8") return KvCacheDtype::Int8;
  if (t == "int4" || t == "fp4" || t == "nvfp4")
    throw InputError(fmt::format("--kv-cache-dtype '{}': a 4-bit KV cache is not modelled; expected auto, fp8, "
                                 "fp8_e4m3, fp8_e5m2 or int8",
                                 text));
  throw InputError(fmt::format("--kv-cache-dtype '{}': expected auto (the model's dtype), fp8 (= fp8_e4m3), "
                               "fp8_e4m3, fp8_e5m2 or int8",
                               text));
}

std::string to_string(WeightQuantization q) {
  switch (q) {
    case WeightQuantization::None: return "none";
    case WeightQuantization::Fp8: return "fp8";
    case WeightQuantization::Int8: return "int8";
    case WeightQuantization::W8A16: return "w8a16";
    case WeightQuantization::W4A16: return "w4a16";
  }
  return "none";
}

std::string to_string(KvCacheDtype d) {
  switch (d) {
    case KvCacheDtype::Auto: return "auto";
    case KvCacheDtype::Fp8E4M3: return "fp8_e4m3";
    case KvCacheDtype::Fp8E5M2: return "fp8_e5m2";
    case KvCacheDtype::Int8: return "int8";
  }
  return "auto";
}

}  // namespace servesim
