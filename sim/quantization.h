// Quantized weights and KV cache as a deployment runs them: what vLLM's
// --quantization and --kv-cache-dtype say, the bytes they store, and the
// compute dtype of the GEMMs. docs/quantization.md has the rules and their
// sources.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

namespace servesim {

// --quantization.
enum class WeightQuantization {
  None,   // the checkpoint's dtype
  Fp8,    // W8A8 on FP8 (e4m3) tensor cores, per-output-channel fp32 scales
  Int8,   // W8A8 on INT8 tensor cores, per-output-channel fp32 scales
  W8A16,  // int8 weights, per-output-channel fp32 scales, bf16 activations
  W4A16,  // int4 weights in groups of group_size along K with fp16 scales (GPTQ/AWQ on Marlin-style kernels)
};

// --kv-cache-dtype.
enum class KvCacheDtype {
  Auto,     // the model's dtype
  Fp8E4M3,  // one per-layer scale for K and one for V (vLLM's k_scale, v_scale)
  Fp8E5M2,  // no scales
  Int8,     // an fp32 scale per token and KV head, for K and for V
};

struct Quantization {
  WeightQuantization weights = WeightQuantization::None;
  KvCacheDtype kv_cache = KvCacheDtype::Auto;
  int32_t group_size = 128;  // w4a16's scale groups along K

  bool is_default() const { return weights == WeightQuantization::None && kv_cache == KvCacheDtype::Auto; }
  // W8A8: the GEMMs run on 8-bit tensor cores and their inputs are quantized first.
  bool w8a8() const { return weights == WeightQuantization::Fp8 || weights == WeightQuantization::Int8; }
  bool weight_only() const { return weights == WeightQuantization::W8A16 || weights == WeightQuantization::W4A16; }

  // Bytes of one [K, N] linear layer (q/k/v/o, gate/up/down) with its scales;
  // `checkpoint_bytes` per element when not quantized. The embedding, the
  // norms, the biases and the LM head stay in the checkpoint's dtype.
  //   none: K N c;  fp8, int8, w8a16: K N + 4 N;  w4a16: K N / 2 + 2 N ceil(K / group_size).
  double linear_bytes(double K, double N, int checkpoint_bytes) const;
  // K and V of one token in one layer with Hkv heads of dh:
  //   auto: 2 Hkv dh c;  fp8: 2 Hkv dh;  int8: 2 Hkv (dh + 4).
  double kv_bytes_per_token_layer(double Hkv, double dh, int checkpoint_bytes) const;
  // Bytes of one GEMM input element: 1 for W8A8, the checkpoint's otherwise.
  double activation_bytes(int checkpoint_bytes) const { return w8a8() ? 1.0 : double(checkpoint_bytes); }

  // {"quantization": "fp8", "kv_cache_dtype": "fp8_e4m3", "group_size": 128 (w4a16 only)}.
  nlohmann::json to_json() const;
};

// vLLM's names: none (also absent), fp8, int8, w8a16, w4a16; InputError naming
// --quantization otherwise.
WeightQuantization parse_weight_quantization(const std::string& text);
// auto, fp8 (= fp8_e4m3), fp8_e4m3, fp8_e5m2, int8; InputError naming
// --kv-cache-dtype otherwise (an int4 KV cache included).
KvCacheDtype parse_kv_cache_dtype(const std::string& text);
// "bf16", "fp32, w8a16 weights, int8 KV cache": a dtype and the
// quantization of a decoder or a profile.
std::string describe_precision(const std::string& dtype, const Quantization& q);
std::string to_string(WeightQuantization q);
std::string to_string(KvCacheDtype d);

}  // namespace servesim
