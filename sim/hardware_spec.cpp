#include "sim/hardware_spec.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/errors.h"
#include "sim/interconnect.h"
#include "sim/json_fields.h"

namespace servesim {
namespace {

constexpr double kTera = 1e12;
constexpr double kGiga = 1e9;

HardwareSpec gpu(std::string name, std::string description, double bf16_tflops, double bandwidth_gbps,
                 double memory_gb, std::string source, double fp8_tflops = 0, double int8_tops = 0) {
  return HardwareSpec{std::move(name), std::move(description), bf16_tflops * kTera, bandwidth_gbps * kGiga,
                      memory_gb * kGiga, std::move(source), fp8_tflops * kTera, int8_tops * kTera, std::string()};
}

// An optional rate: absent or null is 0 (none); otherwise a number >= 0.
double optional_rate(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return 0;
  if (!j[key].is_number())
    throw InputError(fmt::format("{}: field '{}' must be a number (got {})", file, key, j[key].dump()));
  const double v = j[key].get<double>();
  if (!(v >= 0) || !std::isfinite(v))
    throw InputError(fmt::format("{}: field '{}' must be >= 0 (got {}; 0 or absent: none)", file, key, v));
  return v;
}

double positive_field(const nlohmann::json& j, const char* key, const std::string& file) {
  if (!j.contains(key)) throw InputError(fmt::format("{}: missing required field '{}'", file, key));
  if (!j[key].is_number())
    throw InputError(fmt::format("{}: field '{}' must be a number (got {})", file, key, j[key].dump()));
  double v = j[key].get<double>();
  if (!(v > 0) || !std::isfinite(v))
    throw InputError(fmt::format("{}: field '{}' must be > 0 (got {})", file, key, v));
  return v;
}

std::string optional_string(const nlohmann::json& j, const char* key, const std::string& fallback,
                            const std::string& file) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  if (!j[key].is_string())
    throw InputError(fmt::format("{}: field '{}' must be a string (got {})", file, key, j[key].dump()));
  return j[key].get<std::string>();
}

}  // namespace

double HardwareSpec::gemm_flops(WeightQuantization q) const {
  if (q == WeightQuantization::Fp8) {
    if (!(fp8_flops > 0))
      throw InputError(fmt::format("--quantization fp8: {} has no FP8 tensor cores (FP8 needs Ada or Hopper and "
                                   "later); use int8, w8a16 or w4a16, or give fp8_tflops in a hardware JSON",
                                   name));
    return fp8_flops;
  }
  if (q == WeightQuantization::Int8) {
    if (!(int8_ops > 0))
      throw InputError(fmt::format("--quantization int8: {} has no INT8 tensor-core rate; give int8_tops in a "
                                   "hardware JSON",
                                   name));
    return int8_ops;
  }
  return bf16_flops;
}

void HardwareSpec::validate(const std::string& source_name) const {
  if (!(bf16_flops > 0) || !(memory_bandwidth > 0) || !(memory_bytes > 0))
    throw InputError(fmt::format("{}: FLOP/s, bandwidth and memory must all be > 0", source_name));
}

const std::vector<HardwareSpec>& hardware_presets() {
  // Dense bf16 figures: NVIDIA's datasheets quote tensor-core FLOP/s "with
  // sparsity"; the dense figure used here is half of that.
  // FP8 and INT8 likewise: half the sparse figure.
  static const std::vector<HardwareSpec> presets = {
      gpu("h100-sxm", "NVIDIA H100 SXM5 80GB HBM3", 989.4, 3350, 80,
          "NVIDIA H100 Tensor Core GPU datasheet (2023): BF16 1,979 TFLOPS, FP8 3,958 TFLOPS, INT8 3,958 TOPS "
          "with sparsity, 3.35 TB/s, 80 GB",
          1979, 1979),
      gpu("h200", "NVIDIA H200 SXM 141GB HBM3e", 989.4, 4800, 141,
          "NVIDIA H200 Tensor Core GPU datasheet (2024): BF16 1,979 TFLOPS, FP8 3,958 TFLOPS, INT8 3,958 TOPS "
          "with sparsity, 4.8 TB/s, 141 GB",
          1979, 1979),
      gpu("a100-80gb", "NVIDIA A100 SXM4 80GB HBM2e", 312, 2039, 80,
          "NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS (624 with sparsity), INT8 624 TOPS "
          "(1,248 with sparsity), no FP8, 2,039 GB/s, 80 GB",
          0, 624),
      gpu("l40s", "NVIDIA L40S 48GB GDDR6", 362.05, 864, 48,
          "NVIDIA L40S datasheet (2023): BF16 362.05 TFLOPS (733 with sparsity), FP8 733 TFLOPS (1,466 with "
          "sparsity), INT8 733 TOPS (1,466 with sparsity), 864 GB/s, 48 GB",
          733, 733),
      gpu("b200", "NVIDIA B200 (HGX B200) 180GB HBM3e", 2250, 8000, 180,
          "NVIDIA HGX B200 datasheet (2024): FP16/BF16 4.5 PFLOPS, FP8 9 PFLOPS, INT8 9 POPS with sparsity per "
          "GPU, 8 TB/s, 180 GB per GPU (1.44 TB per 8-GPU board)",
          4500, 4500),
      gpu("rtx-4090", "NVIDIA GeForce RTX 4090 24GB GDDR6X", 165.2, 1008, 24,
          "NVIDIA Ada Lovelace architecture whitepaper (2022), RTX 4090: BF16 and FP8 tensor with FP32 "
          "accumulate 165.2 and 330.3 TFLOPS (330.4 and 660.6 with sparsity), INT8 660.6 TOPS (1,321.2 with "
          "sparsity), 1,008 GB/s, 24 GB",
          330.3, 660.6),
  };
  return presets;
}

HardwareSpec resolve_hardware(const std::string& name_or_path) {
  std::string key = name_or_path;
  std::transform(key.begin(), key.end(), key.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const auto& h : hardware_presets())
    if (h.name == key) return h;

  if (std::filesystem::is_regular_file(name_or_path)) {
    std::ifstream in(name_or_path);
    nlohmann::json j;
    try {
      in >> j;
    } catch (const nlohmann::json::exception& e) {
      throw InputError(fmt::format("{}: not valid JSON ({})", name_or_path, e.what()));
    }
    if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", name_or_path));
    require_known_fields(j,
                         {"name", "description", "bf16_tflops", "memory_bandwidth_gbps", "memory_gb", "fp8_tflops",
                          "int8_tops", "interconnect"},
                         name_or_path);
    HardwareSpec h = gpu(optional_string(j, "name", name_or_path, name_or_path),
                         optional_string(j, "description", std::string(), name_or_path),
                         positive_field(j, "bf16_tflops", name_or_path),
                         positive_field(j, "memory_bandwidth_gbps", name_or_path),
                         positive_field(j, "memory_gb", name_or_path), "user file " + name_or_path,
                         optional_rate(j, "fp8_tflops", name_or_path), optional_rate(j, "int8_tops", name_or_path));
    h.interconnect = optional_string(j, "interconnect", std::string(), name_or_path);
    if (!h.interconnect.empty()) {
      bool known = false;
      std::string names;
      for (const Interconnect& ic : interconnect_presets()) {
        known = known || ic.name == h.interconnect;
        names += (names.empty() ? "" : ", ") + ic.name;
      }
      if (!known)
        throw InputError(fmt::format("{}: field 'interconnect' is '{}', not a preset ({}); a measured table goes "
                                     "to --interconnect FILE",
                                     name_or_path, h.interconnect, names));
    }
    return h;
  }
  std::string names;
  for (const auto& h : hardware_presets()) names += (names.empty() ? "" : ", ") + h.name;
  throw InputError(fmt::format(
      "--hardware: '{}' is neither a preset ({}) nor a JSON file with bf16_tflops, "
      "memory_bandwidth_gbps and memory_gb",
      name_or_path, names));
}

}  // namespace servesim
