// A GPU's datasheet figures: what the roofline cost model needs.
#pragma once

#include <string>
#include <vector>

#include "sim/quantization.h"

namespace servesim {

struct HardwareSpec {
  std::string name;
  std::string description;
  double bf16_flops = 0;         // dense (no sparsity) bf16 tensor-core FLOP/s
  double memory_bandwidth = 0;   // bytes/s
  double memory_bytes = 0;       // device memory capacity, bytes
  std::string source;            // where the figures come from
  double fp8_flops = 0;          // dense FP8 tensor-core FLOP/s; 0: no FP8 tensor cores (before Ada/Hopper)
  double int8_ops = 0;           // dense INT8 tensor-core OP/s; 0: none
  // The link between GPUs of a TP/PP group: an interconnect preset's name
  // (sim/interconnect.h). Empty: the preset's by hardware name, pcie4 for
  // any other.
  std::string interconnect;

  // The dense tensor-core rate of the GEMMs' compute dtype: fp8 and int8
  // for W8A8, bf16 otherwise (weight-only kernels dequantize to bf16).
  // InputError naming --quantization and the device when it has none.
  double gemm_flops(WeightQuantization q) const;

  // Throws InputError naming `source_name` when a figure is not > 0.
  void validate(const std::string& source_name) const;
};

const std::vector<HardwareSpec>& hardware_presets();

// A preset name (case-insensitive) or a JSON file with the fields
// {"name", "bf16_tflops", "memory_bandwidth_gbps" (GB/s), "memory_gb"} and,
// optionally, "fp8_tflops" and "int8_tops" (dense; absent: none) and
// "interconnect" (an interconnect preset's name).
HardwareSpec resolve_hardware(const std::string& name_or_path);

}  // namespace servesim
