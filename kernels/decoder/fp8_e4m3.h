// FP8 e4m3 ("e4m3fn", as PyTorch's float8_e4m3fn and safetensors' F8_E4M3):
// 1 sign bit, 4 exponent bits (bias 7), 3 mantissa bits; no infinities,
// S.1111.111 is NaN, the largest finite value is 448 and the smallest
// subnormal 2^-9 (OCP 8-bit floating point specification, 2023).
#pragma once

#include <cstdint>

namespace servesim {

float e4m3_to_f32(uint8_t v);
// Round to nearest (ties to even); beyond +-448 saturates to +-448, NaN stays NaN.
uint8_t f32_to_e4m3(float v);

}  // namespace servesim
