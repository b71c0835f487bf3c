#include "kernels/decoder/decoder_precision.h"

#include <algorithm>
#include <cctype>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/model_spec.h"

namespace servesim {

std::string parse_decoder_dtype(const std::string& text) {
  std::string t = text;
  std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  if (t == "auto") return "auto";
  if (t == "float32" || t == "float" || t == "fp32") return "fp32";
  if (t == "bfloat16" || t == "bf16") return "bf16";
  throw InputError(fmt::format("--dtype '{}': expected auto, float32 or bfloat16 (the built-in decoders build "
                               "no float16)",
                               text));
}

DecoderPrecision DecoderPrecision::on(const DeviceChoice& device) const {
  DecoderPrecision p = *this;
  if (!device.cuda) {
    if (p.dtype == "auto") p.dtype = "fp32";
    const WeightQuantization w = p.quantization.weights;
    if (w != WeightQuantization::None && w != WeightQuantization::W8A16)
      throw InputError(fmt::format("--quantization {}: the CPU decoder builds none and w8a16 (int8 weights); "
                                   "`servesim simulate --quantization {}` predicts it with the roofline",
                                   to_string(w), to_string(w)));
    const KvCacheDtype kv = p.quantization.kv_cache;
    if (kv != KvCacheDtype::Auto && kv != KvCacheDtype::Int8)
      throw InputError(fmt::format("--kv-cache-dtype {}: the CPU decoder builds auto (the --dtype) and int8; "
                                   "`servesim simulate --kv-cache-dtype {}` predicts it with the roofline",
                                   to_string(kv), to_string(kv)));
    return p;
  }
  if (p.dtype == "auto") p.dtype = "bf16";
  if (p.dtype != "bf16" || !p.quantization.is_default())
    throw InputError(fmt::format("--dtype {} --quantization {} --kv-cache-dtype {}: the CUDA decoder builds bf16 "
                                 "weights and KV cache only (quantized CUDA kernels are not built yet); `servesim "
                                 "simulate` predicts quantized serving with the roofline",
                                 p.dtype, to_string(p.quantization.weights), to_string(p.quantization.kv_cache)));
  return p;
}

std::string DecoderPrecision::describe() const { return describe_precision(dtype, quantization); }

cpu::Precision cpu_precision(const DecoderPrecision& p) {
  const cpu::Storage base = p.dtype == "bf16" ? cpu::Storage::Bf16 : cpu::Storage::Fp32;
  cpu::Precision out;
  out.embedding = base;
  out.linear = p.quantization.weights == WeightQuantization::W8A16 ? cpu::Storage::Int8 : base;
  out.kv = p.quantization.kv_cache == KvCacheDtype::Int8 ? cpu::Storage::Int8 : base;
  return out;
}

double decoder_kv_bytes_per_token(const ModelSpec& m, const DeviceChoice& device, const DecoderPrecision& precision) {
  const DecoderPrecision p = precision.on(device);
  const int element = p.dtype == "fp32" ? 4 : 2;
  return double(m.num_hidden_layers) *
         p.quantization.kv_bytes_per_token_layer(double(m.num_key_value_heads), double(m.head_dim), element);
}

}  // namespace servesim
