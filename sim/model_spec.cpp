#include "sim/model_spec.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "sim/errors.h"

namespace servesim {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return std::tolower(c); });
  return s;
}

// Builds a preset; head_dim 0 means hidden / heads.
ModelSpec preset(std::string name, std::string arch, int64_t d, int64_t inter, int64_t layers,
                 int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t vocab, bool tied,
                 bool qkv_bias, int64_t max_pos, double rope_theta, double eps, int64_t eos) {
  ModelSpec m;
  m.name = std::move(name);
  m.architecture = std::move(arch);
  m.hidden_size = d;
  m.intermediate_size = inter;
  m.num_hidden_layers = layers;
  m.num_attention_heads = heads;
  m.num_key_value_heads = kv_heads;
  m.head_dim = head_dim ? head_dim : d / heads;
  m.vocab_size = vocab;
  m.tie_word_embeddings = tied;
  m.attention_bias = qkv_bias;
  m.max_position_embeddings = max_pos;
  m.rope_theta = rope_theta;
  m.rms_norm_eps = eps;
  m.eos_token_id = eos;
  return m;
}

int64_t required_int(const nlohmann::json& j, const std::string& key, const std::string& file) {
  if (!j.contains(key)) throw InputError(fmt::format("{}: missing required field '{}'", file, key));
  const auto& v = j.at(key);
  if (!v.is_number_integer())
    throw InputError(fmt::format("{}: field '{}' must be an integer (got {})", file, key, v.dump()));
  return v.get<int64_t>();
}

int64_t optional_int(const nlohmann::json& j, const std::string& key, int64_t fallback,
                     const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  return required_int(j, key, file);
}

bool optional_bool(const nlohmann::json& j, const std::string& key, bool fallback,
                   const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_boolean())
    throw InputError(fmt::format("{}: field '{}' must be true or false (got {})", file, key,
                                 j.at(key).dump()));
  return j.at(key).get<bool>();
}

double optional_number(const nlohmann::json& j, const std::string& key, double fallback,
                       const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_number())
    throw InputError(fmt::format("{}: field '{}' must be a number (got {})", file, key,
                                 j.at(key).dump()));
  return j.at(key).get<double>();
}

std::string optional_string(const nlohmann::json& j, const std::string& key,
                            const std::string& fallback, const std::string& file) {
  if (!j.contains(key) || j.at(key).is_null()) return fallback;
  if (!j.at(key).is_string())
    throw InputError(fmt::format("{}: field '{}' must be a string (got {})", file, key,
                                 j.at(key).dump()));
  return j.at(key).get<std::string>();
}

}  // namespace

int ModelSpec::dtype_bytes() const {
  if (torch_dtype == "bfloat16" || torch_dtype == "float16") return 2;
  if (torch_dtype == "float32") return 4;
  throw InputError(fmt::format("model {}: torch_dtype '{}' is not one of bfloat16, float16, float32",
                               name, torch_dtype));
}

int64_t ModelSpec::parameter_count() const {
  const int64_t d = hidden_size, dh = head_dim, H = num_attention_heads,
                Hkv = num_key_value_heads, I = intermediate_size, V = vocab_size;
  const int64_t qkv_out = (H + 2 * Hkv) * dh;
  int64_t per_layer = d * qkv_out            // q, k, v projections
                      + H * dh * d           // o projection
                      + 3 * d * I            // gate, up, down
                      + 2 * d;               // input and post-attention RMSNorm
  if (attention_bias) per_layer += qkv_out;  // q, k, v biases
  int64_t total = V * d + num_hidden_layers * per_layer + d;  // embedding, layers, final norm
  if (!tie_word_embeddings) total += V * d;                    // separate LM head
  return total;
}

double ModelSpec::weight_bytes() const {
  // Unquantized: the product it always was (the quantized sum below would
  // differ in the last bits, and KV capacities are floors of these bytes).
  if (quantization.weights == WeightQuantization::None) return double(parameter_count()) * dtype_bytes();
  const double d = double(hidden_size), dh = double(head_dim), H = double(num_attention_heads),
               Hkv = double(num_key_value_heads), I = double(intermediate_size);
  const int b = dtype_bytes();
  const double qkv_out = (H + 2 * Hkv) * dh;
  const Quantization& q = quantization;
  const double linears = q.linear_bytes(d, qkv_out, b) + q.linear_bytes(H * dh, d, b) +
                         q.linear_bytes(d, 2 * I, b) + q.linear_bytes(I, d, b);
  const double linear_parameters = d * qkv_out + H * dh * d + 3 * d * I;
  const double others = double(parameter_count()) - double(num_hidden_layers) * linear_parameters;
  return double(num_hidden_layers) * linears + others * b;
}

double ModelSpec::kv_bytes_per_token() const {
  if (quantization.kv_cache == KvCacheDtype::Auto)
    return 2.0 * double(num_hidden_layers) * double(num_key_value_heads) * double(head_dim) * dtype_bytes();
  return double(num_hidden_layers) *
         quantization.kv_bytes_per_token_layer(double(num_key_value_heads), double(head_dim), dtype_bytes());
}

void ModelSpec::validate(const std::string& source) const {
  auto positive = [&](int64_t v, const char* field) {
    if (v <= 0) throw InputError(fmt::format("{}: '{}' must be > 0 (got {})", source, field, v));
  };
  positive(hidden_size, "hidden_size");
  positive(intermediate_size, "intermediate_size");
  positive(num_hidden_layers, "num_hidden_layers");
  positive(num_attention_heads, "num_attention_heads");
  positive(num_key_value_heads, "num_key_value_heads");
  positive(head_dim, "head_dim");
  positive(vocab_size, "vocab_size");
  positive(max_position_embeddings, "max_position_embeddings");
  if (num_attention_heads % num_key_value_heads != 0)
    throw InputError(fmt::format(
        "{}: num_attention_heads ({}) must be a multiple of num_key_value_heads ({})", source,
        num_attention_heads, num_key_value_heads));
  if (architecture != "llama" && architecture != "mistral" && architecture != "qwen2")
    throw InputError(fmt::format("{}: model_type '{}' is not supported (llama, mistral, qwen2)",
                                 source, architecture));
  if (eos_token_id < 0 || eos_token_id >= vocab_size)
    throw InputError(fmt::format("{}: 'eos_token_id' {} is outside the vocabulary [0, {})", source,
                                 eos_token_id, vocab_size));
  if (!(rope_theta > 0)) throw InputError(fmt::format("{}: 'rope_theta' must be > 0", source));
  if (!(rms_norm_eps > 0)) throw InputError(fmt::format("{}: 'rms_norm_eps' must be > 0", source));
  (void)dtype_bytes();  // throws for an unknown dtype
}

ModelSpec model_from_config_json(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path file = path;
  if (fs::is_directory(file)) file /= "config.json";
  const std::string f = file.string();
  std::ifstream in(file);
  if (!in) throw InputError(fmt::format("{}: cannot open model config", f));
  nlohmann::json j;
  try {
    in >> j;
  } catch (const nlohmann::json::exception& e) {
    throw InputError(fmt::format("{}: not valid JSON ({})", f, e.what()));
  }
  if (!j.is_object()) throw InputError(fmt::format("{}: expected a JSON object", f));

  ModelSpec m;
  m.name = f;
  m.architecture = optional_string(j, "model_type", m.architecture, f);
  m.hidden_size = required_int(j, "hidden_size", f);
  m.intermediate_size = required_int(j, "intermediate_size", f);
  m.num_hidden_layers = required_int(j, "num_hidden_layers", f);
  m.num_attention_heads = required_int(j, "num_attention_heads", f);
  m.num_key_value_heads = optional_int(j, "num_key_value_heads", m.num_attention_heads, f);
  if (m.num_attention_heads <= 0)
    throw InputError(fmt::format("{}: 'num_attention_heads' must be > 0", f));
  m.head_dim = optional_int(j, "head_dim", m.hidden_size / m.num_attention_heads, f);
  m.vocab_size = required_int(j, "vocab_size", f);
  m.max_position_embeddings = required_int(j, "max_position_embeddings", f);
  m.tie_word_embeddings = optional_bool(j, "tie_word_embeddings", false, f);
  // Qwen2 always has q/k/v biases and its config has no attention_bias field.
  m.attention_bias = optional_bool(j, "attention_bias", m.architecture == "qwen2", f);
  m.torch_dtype = optional_string(j, "torch_dtype", m.torch_dtype, f);
  m.rope_theta = optional_number(j, "rope_theta", 10000.0, f);
  m.rms_norm_eps = optional_number(j, "rms_norm_eps", 1e-6, f);  // transformers' LlamaConfig default
  if (j.contains("eos_token_id") && !j["eos_token_id"].is_null()) {
    const auto& eos = j["eos_token_id"];
    const auto& first = eos.is_array() && !eos.empty() ? eos[0] : eos;
    if (!first.is_number_integer() || first.get<int64_t>() < 0)
      throw InputError(fmt::format("{}: field 'eos_token_id' must be a token id or a list of them (got {})",
                                   f, eos.dump()));
    m.eos_token_id = first.get<int64_t>();
  }
  m.validate(f);
  return m;
}

const std::vector<ModelSpec>& model_presets() {
  // Fields copied from each model's Hugging Face config.json.
  //                 name              arch       d     I      L   H   Hkv dh   V       tied  bias  max_pos  theta   eps  eos
  static const std::vector<ModelSpec> presets = {
      preset("llama-3.1-8b", "llama", 4096, 14336, 32, 32, 8, 128, 128256, false, false, 131072, 500000, 1e-5, 128001),
      preset("llama-3.1-70b", "llama", 8192, 28672, 80, 64, 8, 128, 128256, false, false, 131072, 500000, 1e-5, 128001),
      preset("llama-3.2-1b", "llama", 2048, 8192, 16, 32, 8, 64, 128256, true, false, 131072, 500000, 1e-5, 128001),
      preset("llama-3.2-3b", "llama", 3072, 8192, 28, 24, 8, 128, 128256, true, false, 131072, 500000, 1e-5, 128001),
      preset("qwen2.5-7b", "qwen2", 3584, 18944, 28, 28, 4, 128, 152064, false, true, 131072, 1000000, 1e-6, 151643),
      preset("mistral-7b", "mistral", 4096, 14336, 32, 32, 8, 128, 32768, false, false, 32768, 1000000, 1e-5, 2),
      preset("tinyllama-1.1b", "llama", 2048, 5632, 22, 32, 4, 64, 32000, false, false, 2048, 10000, 1e-5, 2),
      // CPU-sized models for the built-in decoder (llama2.c's stories15M and
      // stories110M shapes; they share the classifier with the embedding).
      preset("tiny-15m", "llama", 288, 768, 6, 6, 6, 48, 32000, true, false, 256, 10000, 1e-5, 2),
      preset("small-110m", "llama", 768, 2048, 12, 12, 12, 64, 32000, true, false, 1024, 10000, 1e-5, 2),
  };
  return presets;
}

ModelSpec resolve_model(const std::string& name_or_path) {
  const std::string key = lower(name_or_path);
  for (const auto& m : model_presets())
    if (m.name == key) return m;
  if (std::filesystem::exists(name_or_path)) return model_from_config_json(name_or_path);
  std::string names;
  for (const auto& m : model_presets()) names += (names.empty() ? "" : ", ") + m.name;
  throw InputError(fmt::format(
      "--model: '{}' is neither a preset ({}) nor a path to a config.json", name_or_path, names));
}

}  // namespace servesim
