// The cost file `servesim fit` writes and `simulate --cost-file` reads: the
// roofline's efficiencies and per-iteration overhead fitted to measured runs
// of an engine whose kernels servesim cannot time (docs/validation.md).
//
//   {"servesim_cost_file": 1, "cost_model": "roofline",
//    "roofline": {"compute_efficiency": 0.52, "memory_efficiency": 0.81,
//                 "iteration_overhead_s": 0.00041,
//                 "sequence_overhead_s": 0.00002},      // when fitted
//    "model": "llama-3.1-8b", "hardware": "H200",   // what it was fitted for
//    "fit": {...}}                                   // how (informative only)
//
// Each roofline value is optional; those given replace the roofline's
// defaults.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/cost/roofline_model.h"

namespace servesim {

struct CostFile {
  std::string path;
  std::optional<double> compute_efficiency, memory_efficiency, iteration_overhead_s, sequence_overhead_s;
  std::string model, hardware;  // empty when the file does not say
  nlohmann::json fit;           // null when absent
};

// InputError naming the file and the field: not JSON, not a cost file, an
// unknown roofline field (a typo would otherwise be ignored), a value out of
// range ((0, 1] efficiencies, overheads >= 0 s), or no value at all.
CostFile read_cost_file(const std::string& path);
// `options` with the file's values in place of its own.
RooflineOptions apply_cost_file(const CostFile& file, RooflineOptions options);
nlohmann::json cost_file_json(const RooflineOptions& fitted, const std::string& model, const std::string& hardware,
                              const nlohmann::json& fit);
void write_cost_file(const std::string& path, const nlohmann::json& cost_file);  // InputError when it cannot

}  // namespace servesim
