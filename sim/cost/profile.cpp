#include "sim/cost/profile.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <fstream>

#include <fmt/format.h>

#include "sim/errors.h"
#include "sim/config_json.h"
#include "sim/input_file.h"
#include "sim/json_fields.h"

namespace servesim {
namespace {

nlohmann::json curve_json(const Curve& c) { return {{"x", c.x}, {"seconds", c.seconds}}; }
nlohmann::json grid_json(const Grid2D& g) { return {{"x", g.x}, {"y", g.y}, {"seconds", g.seconds}}; }
nlohmann::json fit_json(const AttentionFit& f) {
  return {{"coefficients", f.coefficients},
          {"max_rel_residual", f.max_rel_residual},
          {"rms_rel_residual", f.rms_rel_residual}};
}

// Reads a field, turning any type error into one message naming file and field.
template <class T>
T field(const nlohmann::json& j, const std::string& key, const std::string& where) {
  if (!j.is_object() || !j.contains(key)) throw InputError(fmt::format("{}: missing field '{}'", where, key));
  try {
    return j.at(key).get<T>();
  } catch (const nlohmann::json::exception&) {
    throw InputError(fmt::format("{}: field '{}' has the wrong type ({})", where, key, j.at(key).type_name()));
  }
}

void check_axis(const std::vector<double>& v, const std::string& where) {
  if (v.empty()) throw InputError(fmt::format("{}: empty axis", where));
  for (size_t i = 0; i < v.size(); ++i) {
    if (!(v[i] > 0) || !std::isfinite(v[i])) throw InputError(fmt::format("{}: axis values must be > 0", where));
    if (i > 0 && !(v[i] > v[i - 1])) throw InputError(fmt::format("{}: axis values must ascend", where));
  }
}

void check_seconds(double s, const std::string& where) {
  if (!(s > 0) || !std::isfinite(s)) throw InputError(fmt::format("{}: times must be > 0 (got {})", where, s));
}

Curve read_curve(const nlohmann::json& tables, const std::string& key, const std::string& source) {
  const std::string where = source + ": tables." + key;
  const auto j = field<nlohmann::json>(tables, key, source + ": tables");
  Curve c{field<std::vector<double>>(j, "x", where), field<std::vector<double>>(j, "seconds", where)};
  check_axis(c.x, where + ".x");
  if (c.seconds.size() != c.x.size()) throw InputError(fmt::format("{}: x and seconds differ in length", where));
  for (double s : c.seconds) check_seconds(s, where);
  return c;
}

Grid2D read_grid(const nlohmann::json& tables, const std::string& key, const std::string& source) {
  const std::string where = source + ": tables." + key;
  const auto j = field<nlohmann::json>(tables, key, source + ": tables");
  Grid2D g{field<std::vector<double>>(j, "x", where), field<std::vector<double>>(j, "y", where),
           field<std::vector<std::vector<double>>>(j, "seconds", where)};
  check_axis(g.x, where + ".x");
  check_axis(g.y, where + ".y");
  if (g.seconds.size() != g.x.size()) throw InputError(fmt::format("{}: seconds must have one row per x", where));
  for (const auto& row : g.seconds) {
    if (row.size() != g.y.size()) throw InputError(fmt::format("{}: seconds must have one column per y", where));
    for (double s : row) check_seconds(s, where);
  }
  return g;
}

}  // namespace

nlohmann::json DeviceProfile::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["device"] = {{"kind", device_kind}, {"description", device_description}, {"threads", threads}};
  j["dtype"] = dtype;
  if (!quantization.is_default()) j["quantization"] = quantization.to_json();
  j["block_size"] = block_size;
  if (tensor_parallel_size != 1) j["tensor_parallel_size"] = tensor_parallel_size;
  j["model"] = model_to_json(model);
  j["model"]["rope_theta"] = model.rope_theta;
  j["model"]["rms_norm_eps"] = model.rms_norm_eps;
  j["tables"] = {{"gemm_qkv", curve_json(gemm_qkv)},
                 {"gemm_o", curve_json(gemm_o)},
                 {"gemm_gate_up", curve_json(gemm_gate_up)},
                 {"gemm_down", curve_json(gemm_down)},
                 {"elementwise", curve_json(elementwise)},
                 {"lm_head", curve_json(lm_head)},
                 {"sampling", curve_json(sampling)},
                 {"prefill_attention", grid_json(prefill_attention)},
                 {"decode_attention", grid_json(decode_attention)},
                 {"iteration_overhead_s", iteration_overhead_s},
                 {"gemm_in_situ", {{"x", gemm_factor.x}, {"factor", gemm_factor.factor}}},
                 {"decode_in_situ", {{"x", decode_step_factor.x}, {"factor", decode_step_factor.factor}}}};
  if (decode_padding.enabled()) j["decode_padding"] = decode_padding.to_json();
  if (attention_launches == AttentionLaunches::TwoLaunches) j["attention_launches"] = "two_launches";
  if (prefill_fit && decode_fit)
    j["tables"]["attention_fits"] = {{"prefill", fit_json(*prefill_fit)}, {"decode", fit_json(*decode_fit)}};
  j["ceilings"] = {{"stream_copy_bytes_per_s", stream_copy_bytes_per_s},
                   {"stream_triad_bytes_per_s", stream_triad_bytes_per_s},
                   {"gemm_flops_per_s", gemm_flops_per_s}};
  if (!anchor.is_null()) j["anchor"] = anchor;
  if (!placement_ratios.is_null()) j["placement_ratios"] = placement_ratios;
  j["metadata"] = metadata;
  j["raw_benchmarks_file"] = raw_benchmarks_file;
  return j;
}

namespace {

// An optional whole-model factor curve of the tables (absent: empty).
DeviceProfile::FactorCurve read_factor_curve(const nlohmann::json& tables, const std::string& name,
                                             const std::string& source) {
  DeviceProfile::FactorCurve c;
  if (!tables.contains(name)) return c;
  const std::string where = source + ": tables." + name;
  const auto g = field<nlohmann::json>(tables, name, source + ": tables");
  c.x = field<std::vector<double>>(g, "x", where);
  c.factor = field<std::vector<double>>(g, "factor", where);
  if (!c.x.empty()) check_axis(c.x, where + ".x");
  if (c.factor.size() != c.x.size()) throw InputError(fmt::format("{}: x and factor differ in length", where));
  for (double f : c.factor)
    if (!(f > 0) || !std::isfinite(f)) throw InputError(fmt::format("{}: factors must be > 0", where));
  return c;
}

// The optional stored fit of one attention table.
std::optional<AttentionFit> read_fit(const nlohmann::json& tables, const std::string& name,
                                     const std::string& source) {
  if (!tables.contains("attention_fits")) return std::nullopt;
  const std::string where = source + ": tables.attention_fits";
  const auto fits = field<nlohmann::json>(tables, "attention_fits", source + ": tables");
  require_known_fields(fits, {"prefill", "decode"}, where);
  const auto j = field<nlohmann::json>(fits, name, where);
  AttentionFit f;
  const auto c = field<std::vector<double>>(j, "coefficients", where + "." + name);
  if (c.size() != 3) throw InputError(fmt::format("{}.{}: coefficients must be 3 numbers", where, name));
  for (size_t i = 0; i < 3; ++i) {
    if (!(c[i] >= 0) || !std::isfinite(c[i]))
      throw InputError(fmt::format("{}.{}: coefficients must be >= 0", where, name));
    f.coefficients[i] = c[i];
  }
  f.max_rel_residual = field<double>(j, "max_rel_residual", where + "." + name);
  f.rms_rel_residual = field<double>(j, "rms_rel_residual", where + "." + name);
  return f;
}

}  // namespace

DeviceProfile DeviceProfile::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw InputError(fmt::format("{}: a profile is a JSON object", source));
  const auto format = field<std::string>(j, "format", source);
  if (format != kFormat)
    throw InputError(fmt::format("{}: format '{}' is not {}", source, format, kFormat));
  require_known_fields(j,
                       {"format", "device", "dtype", "quantization", "block_size", "tensor_parallel_size", "model",
                        "tables", "decode_padding", "attention_launches", "ceilings", "anchor", "placement_ratios",
                        "metadata", "raw_benchmarks_file"},
                       source);
  DeviceProfile p;
  const auto device = field<nlohmann::json>(j, "device", source);
  require_known_fields(device, {"kind", "description", "threads"}, source + ": device");
  p.device_kind = field<std::string>(device, "kind", source + ": device");
  p.device_description = field<std::string>(device, "description", source + ": device");
  p.threads = field<int>(device, "threads", source + ": device");
  if (p.device_kind != "cpu" && p.device_kind != "cuda")
    throw InputError(fmt::format("{}: device.kind '{}': expected cpu or cuda", source, p.device_kind));
  if (p.threads < 0) throw InputError(fmt::format("{}: device.threads must be >= 0 (got {})", source, p.threads));
  p.dtype = field<std::string>(j, "dtype", source);
  if (j.contains("quantization")) {
    const auto q = field<nlohmann::json>(j, "quantization", source);
    try {
      p.quantization.weights = parse_weight_quantization(field<std::string>(q, "quantization", source + ": quantization"));
      p.quantization.kv_cache = parse_kv_cache_dtype(field<std::string>(q, "kv_cache_dtype", source + ": quantization"));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}: quantization: {}", source, e.what()));
    }
  }
  p.block_size = field<int32_t>(j, "block_size", source);
  if (j.contains("tensor_parallel_size")) {
    p.tensor_parallel_size = field<int32_t>(j, "tensor_parallel_size", source);
    if (p.tensor_parallel_size < 1 || p.tensor_parallel_size > 64)
      throw InputError(fmt::format("{}: tensor_parallel_size must be in 1 .. 64 (got {})", source,
                                   p.tensor_parallel_size));
  }
  const auto m = field<nlohmann::json>(j, "model", source);
  const std::string mw = source + ": model";
  p.model.name = field<std::string>(m, "name", mw);
  p.model.architecture = field<std::string>(m, "architecture", mw);
  p.model.hidden_size = field<int64_t>(m, "hidden_size", mw);
  p.model.intermediate_size = field<int64_t>(m, "intermediate_size", mw);
  p.model.num_hidden_layers = field<int64_t>(m, "num_hidden_layers", mw);
  p.model.num_attention_heads = field<int64_t>(m, "num_attention_heads", mw);
  p.model.num_key_value_heads = field<int64_t>(m, "num_key_value_heads", mw);
  p.model.head_dim = field<int64_t>(m, "head_dim", mw);
  p.model.vocab_size = field<int64_t>(m, "vocab_size", mw);
  p.model.tie_word_embeddings = field<bool>(m, "tie_word_embeddings", mw);
  p.model.attention_bias = field<bool>(m, "attention_bias", mw);
  p.model.max_position_embeddings = field<int64_t>(m, "max_position_embeddings", mw);
  p.model.torch_dtype = field<std::string>(m, "torch_dtype", mw);
  p.model.rope_theta = field<double>(m, "rope_theta", mw);
  p.model.rms_norm_eps = field<double>(m, "rms_norm_eps", mw);
  p.model.validate(mw);

  const auto tables = field<nlohmann::json>(j, "tables", source);
  require_known_fields(tables,
                       {"gemm_qkv", "gemm_o", "gemm_gate_up", "gemm_down", "elementwise", "lm_head", "sampling",
                        "prefill_attention", "decode_attention", "iteration_overhead_s", "gemm_in_situ",
                        "decode_in_situ", "attention_fits"},
                       source + ": tables");
  p.gemm_qkv = read_curve(tables, "gemm_qkv", source);
  p.gemm_o = read_curve(tables, "gemm_o", source);
  p.gemm_gate_up = read_curve(tables, "gemm_gate_up", source);
  p.gemm_down = read_curve(tables, "gemm_down", source);
  p.elementwise = read_curve(tables, "elementwise", source);
  p.lm_head = read_curve(tables, "lm_head", source);
  p.sampling = read_curve(tables, "sampling", source);
  p.prefill_attention = read_grid(tables, "prefill_attention", source);
  p.decode_attention = read_grid(tables, "decode_attention", source);
  p.iteration_overhead_s = field<double>(tables, "iteration_overhead_s", source + ": tables");
  if (!(p.iteration_overhead_s >= 0))
    throw InputError(fmt::format("{}: tables.iteration_overhead_s must be >= 0", source));
  p.gemm_factor = read_factor_curve(tables, "gemm_in_situ", source);
  p.decode_step_factor = read_factor_curve(tables, "decode_in_situ", source);
  if (j.contains("decode_padding"))
    p.decode_padding = DecodePadding::from_json(j["decode_padding"], source + ": decode_padding");
  if (j.contains("attention_launches")) {
    const nlohmann::json& launches = j["attention_launches"];
    if (launches == "two_launches")
      p.attention_launches = AttentionLaunches::TwoLaunches;
    else if (launches != "per_chunk")
      throw InputError(fmt::format("{}: attention_launches must be \"per_chunk\" or \"two_launches\" (got {})",
                                   source, launches.dump()));
  }
  p.prefill_fit = read_fit(tables, "prefill", source);
  p.decode_fit = read_fit(tables, "decode", source);

  const auto ceilings = field<nlohmann::json>(j, "ceilings", source);
  require_known_fields(ceilings, {"stream_copy_bytes_per_s", "stream_triad_bytes_per_s", "gemm_flops_per_s"},
                       source + ": ceilings");
  p.stream_copy_bytes_per_s = field<double>(ceilings, "stream_copy_bytes_per_s", source + ": ceilings");
  p.stream_triad_bytes_per_s = field<double>(ceilings, "stream_triad_bytes_per_s", source + ": ceilings");
  p.gemm_flops_per_s = field<double>(ceilings, "gemm_flops_per_s", source + ": ceilings");
  if (!(p.stream_copy_bytes_per_s > 0) || !(p.stream_triad_bytes_per_s > 0) || !(p.gemm_flops_per_s > 0))
    throw InputError(fmt::format("{}: ceilings must be > 0", source));
  if (j.contains("anchor")) p.anchor = j["anchor"];
  if (j.contains("placement_ratios")) p.placement_ratios = j["placement_ratios"];
  if (j.contains("metadata")) p.metadata = j["metadata"];
  if (j.contains("raw_benchmarks_file") && j["raw_benchmarks_file"].is_string())
    p.raw_benchmarks_file = j["raw_benchmarks_file"].get<std::string>();
  return p;
}

DeviceProfile DeviceProfile::load(const std::string& path) {
  refuse_folder(path, path, "a device profile (JSON)");
  std::ifstream in(path);
  if (!in) throw InputError(fmt::format("{}: cannot open the profile", path));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", path, e.what()));
  }
  return from_json(j, path);
}

void DeviceProfile::save(const std::string& path) const {
  std::ofstream out(path);
  if (!out) throw InputError(fmt::format("{}: cannot open for writing", path));
  out << to_json().dump(2) << "\n";
  if (!out) throw InputError(fmt::format("{}: write failed", path));
}

std::string unsteady_decode_steps_warning(const std::vector<int64_t>& batches, const std::vector<double>& spread,
                                          double limit) {
  if (spread.size() != batches.size())
    throw std::logic_error("unsteady_decode_steps_warning: one spread per batch size");
  std::string wide;
  double widest = 0;
  for (size_t i = 0; i < spread.size(); ++i)
    if (spread[i] > limit) {
      wide += fmt::format("{}{}", wide.empty() ? "" : ", ", batches[i]);
      widest = std::max(widest, spread[i]);
    }
  if (wide.empty()) return "";
  return fmt::format(
      "whole-model decode steps of {} sequences ran at different speeds at different moments of the "
      "calibration (up to {:.2f}x apart; {} sequence(s): {:.2f}x): the host changed speed for these shapes, and "
      "the profile predicts the speed it ran at most; a run in the other state misses by as much "
      "(docs/noisy-hosts.md; `validate --host-drift interleave` follows the host during a run)",
      wide, widest, batches.front(), spread.front());
}

std::string DeviceProfile::unsteadiness_warning() const {
  // Written by the calibration, read here only to warn: a profile without
  // them, or with them in another shape, gets no warning rather than an error.
  const nlohmann::json* steps = metadata.is_object() && metadata.contains("decode_in_situ")
                                    ? &metadata["decode_in_situ"]
                                    : nullptr;
  if (!steps || !steps->is_object() || !steps->contains("sequences") || !steps->contains("moment_spread"))
    return "";
  try {
    const auto batches = (*steps)["sequences"].get<std::vector<int64_t>>();
    const auto spread = (*steps)["moment_spread"].get<std::vector<double>>();
    if (batches.empty() || batches.size() != spread.size()) return "";
    return unsteady_decode_steps_warning(batches, spread);
  } catch (const nlohmann::json::exception&) {
    return "";
  }
}

std::string DeviceProfile::precision() const { return describe_precision(dtype, quantization); }

bool DeviceProfile::matches(const ModelSpec& m) const {
  return m.hidden_size == model.hidden_size && m.intermediate_size == model.intermediate_size &&
         m.num_hidden_layers == model.num_hidden_layers &&
         m.num_attention_heads == model.num_attention_heads &&
         m.num_key_value_heads == model.num_key_value_heads && m.head_dim == model.head_dim &&
         m.vocab_size == model.vocab_size && m.tie_word_embeddings == model.tie_word_embeddings &&
         m.attention_bias == model.attention_bias;
}

void DeviceProfile::require_matches(const ModelSpec& m, const std::string& source) const {
  std::string diffs;
  auto cmp = [&](const char* name, auto a, auto b) {
    if (a != b) diffs += fmt::format("{}{} {} (profile) vs {} (model)", diffs.empty() ? "" : ", ", name, a, b);
  };
  cmp("hidden_size", model.hidden_size, m.hidden_size);
  cmp("intermediate_size", model.intermediate_size, m.intermediate_size);
  cmp("num_hidden_layers", model.num_hidden_layers, m.num_hidden_layers);
  cmp("num_attention_heads", model.num_attention_heads, m.num_attention_heads);
  cmp("num_key_value_heads", model.num_key_value_heads, m.num_key_value_heads);
  cmp("head_dim", model.head_dim, m.head_dim);
  cmp("vocab_size", model.vocab_size, m.vocab_size);
  cmp("tie_word_embeddings", model.tie_word_embeddings, m.tie_word_embeddings);
  cmp("attention_bias", model.attention_bias, m.attention_bias);
  if (!diffs.empty())
    throw InputError(fmt::format("{}: the profile was measured for {} and does not match {}: {}", source,
                                 model.name, m.name, diffs));
}

}  // namespace servesim
