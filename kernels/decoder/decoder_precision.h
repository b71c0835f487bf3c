// What --dtype, --quantization and --kv-cache-dtype ask of a built-in
// decoder, and what each decoder builds (docs/quantization.md, "The
// built-in decoders"):
//   cpu:  --dtype float32 (auto) or bfloat16; --quantization none or w8a16
//         (int8 weights, per-output-channel scales); --kv-cache-dtype auto
//         (the --dtype) or int8 (a scale per token and head). The kernels
//         compute in fp32 and convert what they load.
//   cuda: bf16 throughout (--dtype auto or bfloat16, the defaults of the
//         other two).
#pragma once

#include <string>

#include "kernels/cpu/storage.h"
#include "kernels/decoder/device_choice.h"
#include "sim/quantization.h"

namespace servesim {

struct ModelSpec;

struct DecoderPrecision {
  std::string dtype = "auto";  // auto (the device's: fp32 on cpu, bf16 on cuda), fp32, bf16
  Quantization quantization;

  // This precision on `device`, dtype made concrete; InputError naming the
  // flags for what that device's decoder does not build.
  DecoderPrecision on(const DeviceChoice& device) const;
  // "bf16, w8a16 weights, int8 KV cache" (dtype concrete).
  std::string describe() const;
};

// --dtype: auto, float32 (float, fp32), bfloat16 (bf16); InputError naming
// --dtype otherwise (float16 included: no decoder builds it).
std::string parse_decoder_dtype(const std::string& text);

// The CPU backend's storage for a concrete precision (on(cpu)).
cpu::Precision cpu_precision(const DecoderPrecision& precision);

// K and V of one token in every layer as the decoder on `device` stores
// them at `precision` (fp32 on the CPU and bf16 on CUDA by default; int8
// with a 4-byte scale per token, head and tensor).
double decoder_kv_bytes_per_token(const ModelSpec& model, const DeviceChoice& device,
                                  const DecoderPrecision& precision = {});

}  // namespace servesim
