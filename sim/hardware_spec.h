// A GPU's datasheet figures: what the roofline cost model needs.
#pragma once

#include <string>
#include <vector>

namespace servesim {

struct HardwareSpec {
  std::string name;
  std::string description;
  double bf16_flops = 0;         // dense (no sparsity) bf16 tensor-core FLOP/s
  double memory_bandwidth = 0;   // bytes/s
  double memory_bytes = 0;       // device memory capacity, bytes
  std::string source;            // where the figures come from

  // Throws InputError naming `source_name` when a figure is not > 0.
  void validate(const std::string& source_name) const;
};

const std::vector<HardwareSpec>& hardware_presets();

// A preset name (case-insensitive) or a JSON file with the fields
// {"name", "bf16_tflops", "memory_bandwidth_gbps" (GB/s), "memory_gb"}.
HardwareSpec resolve_hardware(const std::string& name_or_path);

}  // namespace servesim
