#include "validate/fit_cost_file.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/input_file.h"

namespace servesim {

CostFile read_cost_file(const std::string& path) {
  refuse_folder(path, "--cost-file " + path, "a cost file (fit.json)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(fmt::format("--cost-file {}: cannot open", path));
  std::ostringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not JSON: {}", path, e.what()));
  }
  if (!j.is_object() || !j.contains("servesim_cost_file"))
    throw InputError(fmt::format("{}: not a servesim cost file (no 'servesim_cost_file'; `servesim fit` writes one)", path));
  if (!j["servesim_cost_file"].is_number_integer() || j["servesim_cost_file"].get<int64_t>() != 1)
    throw InputError(fmt::format("{}: servesim_cost_file: version 1 is the one this servesim reads", path));
  if (j.contains("cost_model") && j["cost_model"] != "roofline")
    throw InputError(fmt::format("{}: cost_model: only \"roofline\" is fitted and read", path));
  if (!j.contains("roofline") || !j["roofline"].is_object())
    throw InputError(fmt::format("{}: no 'roofline' object", path));
  CostFile f;
  f.path = path;
  for (const auto& [key, value] : j["roofline"].items()) {
    if (!value.is_number() || !std::isfinite(value.get<double>()))
      throw InputError(fmt::format("{}: roofline.{} is not a number", path, key));
    const double v = value.get<double>();
    if (key == "compute_efficiency" || key == "memory_efficiency") {
      if (!(v > 0 && v <= 1)) throw InputError(fmt::format("{}: roofline.{} must be in (0, 1] (got {})", path, key, v));
      (key == "compute_efficiency" ? f.compute_efficiency : f.memory_efficiency) = v;
    } else if (key == "iteration_overhead_s" || key == "sequence_overhead_s") {
      if (!(v >= 0)) throw InputError(fmt::format("{}: roofline.{} must be >= 0 (got {})", path, key, v));
      (key == "iteration_overhead_s" ? f.iteration_overhead_s : f.sequence_overhead_s) = v;
    } else {
      throw InputError(fmt::format("{}: roofline.{}: unknown field (compute_efficiency, memory_efficiency, "
                                   "iteration_overhead_s, sequence_overhead_s)",
                                   path, key));
    }
  }
  if (!f.compute_efficiency && !f.memory_efficiency && !f.iteration_overhead_s && !f.sequence_overhead_s)
    throw InputError(fmt::format("{}: roofline holds no value", path));
  if (j.contains("model") && j["model"].is_string()) f.model = j["model"].get<std::string>();
  if (j.contains("hardware") && j["hardware"].is_string()) f.hardware = j["hardware"].get<std::string>();
  if (j.contains("fit")) f.fit = j["fit"];
  return f;
}

RooflineOptions apply_cost_file(const CostFile& file, RooflineOptions options) {
  if (file.compute_efficiency) options.compute_efficiency = *file.compute_efficiency;
  if (file.memory_efficiency) options.memory_efficiency = *file.memory_efficiency;
  if (file.iteration_overhead_s) options.iteration_overhead_s = *file.iteration_overhead_s;
  if (file.sequence_overhead_s) options.sequence_overhead_s = *file.sequence_overhead_s;
  return options;
}

nlohmann::json cost_file_json(const RooflineOptions& fitted, const std::string& model, const std::string& hardware,
                              const nlohmann::json& fit) {
  nlohmann::json j;
  j["servesim_cost_file"] = 1;
  j["cost_model"] = "roofline";
  j["roofline"] = {{"compute_efficiency", fitted.compute_efficiency},
                   {"memory_efficiency", fitted.memory_efficiency},
                   {"iteration_overhead_s", fitted.iteration_overhead_s}};
  if (fitted.sequence_overhead_s > 0) j["roofline"]["sequence_overhead_s"] = fitted.sequence_overhead_s;
  j["model"] = model;
  j["hardware"] = hardware;
  if (!fit.is_null()) j["fit"] = fit;
  return j;
}

void write_cost_file(const std::string& path, const nlohmann::json& cost_file) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("{}: cannot open for writing", path));
  f << cost_file.dump(2) << "\n";
  f.flush();
  if (!f) throw InputError(fmt::format("{}: write failed", path));
}

}  // namespace servesim
