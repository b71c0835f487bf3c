// Host weights: random initialisation (determinism, scale), the safetensors
// round trip through the decoder, and load errors that name file and tensor.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/safetensors.h"
#include "sim/errors.h"
#include "sim/model_spec.h"
#include "support/test_support.h"

using namespace servesim;
using servesim::test::input_error_of;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() / fmt::format("servesim_weights_{}_{}", long(::getpid()), tag)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string str() const { return path.string(); }
};

ModelSpec test_spec(bool attention_bias = true, bool tied = false) {
  ModelSpec m = test::small_model("test-weights", 48, 96, 2, 4, 2, 16, 131, 512, "float32", tied,
                                  attention_bias, attention_bias ? "qwen2" : "llama");
  m.rope_theta = 50000.0;
  m.rms_norm_eps = 1e-6;
  m.eos_token_id = 7;
  return m;
}

// Every tensor of `w` by its Hugging Face name (empty ones left out).
std::vector<std::pair<std::string, const std::vector<float>*>> tensors_of(const HostWeights& w) {
  std::vector<std::pair<std::string, const std::vector<float>*>> t = {
      {"model.embed_tokens.weight", &w.embedding}, {"model.norm.weight", &w.final_norm}};
  if (!w.lm_head.empty()) t.push_back({"lm_head.weight", &w.lm_head});
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const HostLayerWeights& L = w.layers[l];
    const std::pair<const char*, const std::vector<float>*> parts[] = {
        {"input_layernorm.weight", &L.attn_norm},      {"self_attn.q_proj.weight", &L.wq},
        {"self_attn.k_proj.weight", &L.wk},            {"self_attn.v_proj.weight", &L.wv},
        {"self_attn.q_proj.bias", &L.bq},              {"self_attn.k_proj.bias", &L.bk},
        {"self_attn.v_proj.bias", &L.bv},              {"self_attn.o_proj.weight", &L.wo},
        {"post_attention_layernorm.weight", &L.mlp_norm}, {"mlp.gate_proj.weight", &L.w_gate},
        {"mlp.up_proj.weight", &L.w_up},               {"mlp.down_proj.weight", &L.w_down}};
    for (const auto& [suffix, v] : parts)
      if (!v->empty()) t.push_back({layer_tensor_name(int64_t(l), suffix), v});
  }
  return t;
}

// Logits of one fixed batch (a 21-token prefill and, after it, a decode) for
// the given weights: what the decoder computes from them.
std::vector<float> logits_of(HostWeights&& w) {
  const int64_t V = w.spec.vocab_size;
  auto model = make_cpu_decoder(std::move(w), 8, 4, CpuDecoderOptions{1});
  std::vector<int32_t> tokens(21);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = int32_t((i * 37 + 5) % size_t(V));
  const std::vector<int32_t> table = {5, 2, 7, 0, 3, 6};
  BatchLayout layout;
  layout.add_sequence(std::span<const int32_t>(tokens).first(20), 0, table, true);
  std::vector<float> out = model->forward(layout);
  layout.clear();
  layout.add_sequence(std::span<const int32_t>(tokens).last(1), 20, table, true);
  const auto& decode = model->forward(layout);
  out.insert(out.end(), decode.begin(), decode.end());
  return out;
}

}  // namespace

TEST_CASE("random weights are deterministic per seed and differ across seeds", "[weights]") {
  const ModelSpec spec = test_spec();
  const HostWeights a = random_weights(spec, 7), b = random_weights(spec, 7), c = random_weights(spec, 8);
  REQUIRE(a.source == "random (seed 7)");
  const auto ta = tensors_of(a), tb = tensors_of(b), tc = tensors_of(c);
  REQUIRE(ta.size() == size_t(3 + 2 * 12));  // embedding, final norm, head; 12 per layer with biases
  REQUIRE(tb.size() == ta.size());
  REQUIRE(tc.size() == ta.size());
  for (size_t i = 0; i < ta.size(); ++i) {
    INFO(ta[i].first);
    REQUIRE(*ta[i].second == *tb[i].second);  // bit for bit
    // Another seed changes (nearly) every value of every tensor.
    size_t same = 0;
    for (size_t k = 0; k < ta[i].second->size(); ++k) same += (*ta[i].second)[k] == (*tc[i].second)[k];
    REQUIRE(same * 100 < ta[i].second->size());
  }
  // Two tensors of the same shape are not copies of one stream.
  REQUIRE(a.layers[0].wk != a.layers[0].wv);
  REQUIRE(a.layers[0].wq != a.layers[1].wq);
  // Each tensor has its own stream: changing the MLP width leaves the
  // embedding and the attention weights as they were.
  ModelSpec wider = spec;
  wider.intermediate_size = 64;
  const HostWeights d = random_weights(wider, 7);
  REQUIRE(d.embedding == a.embedding);
  REQUIRE(d.layers[1].wq == a.layers[1].wq);
  REQUIRE(d.layers[1].w_gate.size() == size_t(64 * 48));
}

TEST_CASE("random weights have the documented ranges and variances", "[weights]") {
  ModelSpec spec = test_spec();
  spec.hidden_size = 128;
  spec.intermediate_size = 256;
  spec.head_dim = 32;
  spec.vocab_size = 300;
  const HostWeights w = random_weights(spec, 3);
  const double L = double(spec.num_hidden_layers);
  auto moments = [](const std::vector<float>& v, double& mean, double& var) {
    mean = std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
    var = 0;
    for (float x : v) var += (x - mean) * (x - mean);
    var /= double(v.size());
  };
  // Uniform values: the sample variance of n draws has relative standard
  // error sqrt(0.8 / n) (kurtosis 1.8), under 1% for n >= 8192 here; 6%
  // relative is > 6 standard errors, and a wrong fan-in or a missing
  // residual factor is off by >= 2x.
  auto check_variance = [&](const char* what, const std::vector<float>& v, double want) {
    double mean, var;
    moments(v, mean, var);
    INFO(what << ": mean " << mean << ", variance " << var << ", want " << want);
    REQUIRE(std::abs(mean) < 4 * std::sqrt(want / double(v.size())) + 1e-12);
    REQUIRE(var == Approx(want).epsilon(0.06));
  };
  check_variance("embedding", w.embedding, 1.0);
  check_variance("lm_head", w.lm_head, 1.0 / 128);
  for (const HostLayerWeights& layer : w.layers) {
    check_variance("q_proj", layer.wq, 1.0 / 128);
    check_variance("k_proj", layer.wk, 1.0 / 128);
    check_variance("gate_proj", layer.w_gate, 1.0 / 128);
    check_variance("up_proj", layer.w_up, 1.0 / 128);
    check_variance("o_proj", layer.wo, 1.0 / (4 * 32) / (2 * L));
    check_variance("down_proj", layer.w_down, 1.0 / 256 / (2 * L));
    for (const auto* norm : {&layer.attn_norm, &layer.mlp_norm})
      for (float x : *norm) {
        REQUIRE(x >= 0.5f);
        REQUIRE(x <= 1.5f);
      }
    for (const auto* bias : {&layer.bq, &layer.bk, &layer.bv}) {
      REQUIRE(!bias->empty());
      for (float x : *bias) REQUIRE(std::abs(x) <= 0.1f);
    }
  }
}

TEST_CASE("safetensors weights round trip through the decoder", "[weights]") {
  for (const bool tied : {false, true}) {
    const ModelSpec spec = test_spec(/*bias=*/!tied, tied);
    INFO((tied ? "tied, no bias" : "untied, with bias"));
    const std::vector<float> want = logits_of(random_weights(spec, 21));
    REQUIRE(want.size() == size_t(2 * spec.vocab_size));

    {  // F32: the same weights bit for bit, so the same logits bit for bit
      TempDir dir(tied ? "f32_tied" : "f32");
      const HostWeights original = random_weights(spec, 21);
      save_safetensors_weights(original, dir.str(), "F32");
      REQUIRE(fs::exists(dir.path / "model.safetensors"));
      // config.json describes the same model.
      const ModelSpec read = model_from_config_json(dir.str());
      REQUIRE(read.hidden_size == spec.hidden_size);
      REQUIRE(read.intermediate_size == spec.intermediate_size);
      REQUIRE(read.num_hidden_layers == spec.num_hidden_layers);
      REQUIRE(read.num_attention_heads == spec.num_attention_heads);
      REQUIRE(read.num_key_value_heads == spec.num_key_value_heads);
      REQUIRE(read.head_dim == spec.head_dim);
      REQUIRE(read.vocab_size == spec.vocab_size);
      REQUIRE(read.tie_word_embeddings == spec.tie_word_embeddings);
      REQUIRE(read.attention_bias == spec.attention_bias);
      REQUIRE(read.architecture == spec.architecture);
      REQUIRE(read.rope_theta == spec.rope_theta);
      REQUIRE(read.rms_norm_eps == spec.rms_norm_eps);
      REQUIRE(read.eos_token_id == spec.eos_token_id);
      REQUIRE(read.max_position_embeddings == spec.max_position_embeddings);

      HostWeights loaded = load_safetensors_weights(read, dir.str());
      REQUIRE(loaded.source == dir.str());
      const auto tl = tensors_of(loaded), to = tensors_of(original);
      REQUIRE(tl.size() == to.size());
      for (size_t i = 0; i < tl.size(); ++i) {
        INFO(to[i].first);
        REQUIRE(tl[i].first == to[i].first);
        REQUIRE(*tl[i].second == *to[i].second);
      }
      REQUIRE(logits_of(std::move(loaded)) == want);
    }

    for (const char* dtype : {"BF16", "F16"}) {
      {  // 16-bit: weights rounded to the dtype, logits close to fp32
        INFO(dtype);
        TempDir dir(std::string(dtype) + (tied ? "_tied" : ""));
        const HostWeights original = random_weights(spec, 21);
        save_safetensors_weights(original, dir.str(), dtype);
        HostWeights loaded = load_safetensors_weights(spec, dir.str());
        // Each value is exactly the fp32 one rounded to the dtype.
        const bool bf16 = std::string(dtype) == "BF16";
        const auto tl = tensors_of(loaded), to = tensors_of(original);
        REQUIRE(tl.size() == to.size());
        size_t changed = 0;
        for (size_t i = 0; i < tl.size(); ++i)
          for (size_t k = 0; k < to[i].second->size(); ++k) {
            const float x = (*to[i].second)[k];
            const float r = bf16 ? bf16_to_f32(f32_to_bf16(x)) : f16_to_f32(f32_to_f16(x));
            REQUIRE((*tl[i].second)[k] == r);
            changed += r != x;
          }
        REQUIRE(changed > 1000);  // the file really holds 16-bit values

        // A relative rounding error of at most 2^-9 (bf16) or 2^-12 (f16)
        // per weight, random in sign, moves the logits by about that much
        // relative to their scale, times a small factor from the two layers
        // (measured: 3.4e-3 bf16, 5.6e-4 f16 of max |logit|). Bounds of
        // 2e-2 and 3e-3 of the largest logit hold that with a 5x margin; a
        // wrong conversion (byte order, exponent bias) is off by O(1).
        const std::vector<float> got = logits_of(std::move(loaded));
        REQUIRE(got.size() == want.size());
        double scale = 0, diff = 0;
        for (size_t i = 0; i < got.size(); ++i) {
          scale = std::max(scale, double(std::abs(want[i])));
          diff = std::max(diff, std::abs(double(got[i]) - double(want[i])));
        }
        INFO(dtype << ": max |diff| " << diff << ", max |logit| " << scale);
        REQUIRE(scale > 0.1);
        REQUIRE(diff > 0);
        REQUIRE(diff <= (bf16 ? 2e-2 : 3e-3) * scale);
      }
    }
  }
}

TEST_CASE("loading weights names the file and the tensor that is wrong", "[weights]") {
  const ModelSpec spec = test_spec();
  const HostWeights original = random_weights(spec, 4);
  const std::string file_name = "model.safetensors";

  SECTION("a missing tensor") {
    TempDir dir("missing");
    save_safetensors_weights(original, dir.str(), "F32");
    // Rewrite the file without one layer's v_proj.
    std::vector<TensorToWrite> kept;
    const SafetensorsFile full((dir.path / file_name).string());
    const std::string dropped = layer_tensor_name(1, "self_attn.v_proj.weight");
    for (const std::string& name : full.names())
      if (name != dropped) kept.push_back({name, full.info(name).shape, full.read_f32(name, full.info(name).shape)});
    REQUIRE(kept.size() + 1 == full.names().size());
    write_safetensors((dir.path / file_name).string(), kept, SafetensorsDtype::F32);
    const std::string msg = input_error_of([&] { load_safetensors_weights(spec, dir.str()); });
    REQUIRE_THAT(msg, Contains(file_name));
    REQUIRE_THAT(msg, Contains(dropped));
    REQUIRE_THAT(msg, Contains("missing"));
  }

  SECTION("a file for a model with another intermediate_size") {
    TempDir dir("shape");
    ModelSpec other = spec;
    other.intermediate_size = 80;
    save_safetensors_weights(random_weights(other, 4), dir.str(), "F32");
    const std::string msg = input_error_of([&] { load_safetensors_weights(spec, dir.str()); });
    REQUIRE_THAT(msg, Contains(file_name));
    REQUIRE_THAT(msg, Contains(layer_tensor_name(0, "mlp.gate_proj.weight")));
    REQUIRE_THAT(msg, Contains("[80, 48]"));  // the shape in the file
    REQUIRE_THAT(msg, Contains("[96, 48]"));  // the shape the config implies
  }

  SECTION("an untied config reading a tied model's file lacks lm_head") {
    TempDir dir("tied");
    ModelSpec tied = spec;
    tied.tie_word_embeddings = true;
    save_safetensors_weights(random_weights(tied, 4), dir.str(), "F32");
    const std::string msg = input_error_of([&] { load_safetensors_weights(spec, dir.str()); });
    REQUIRE_THAT(msg, Contains(file_name));
    REQUIRE_THAT(msg, Contains("lm_head.weight"));
    // The other way round is fine: a tied config ignores nothing it needs.
    const HostWeights w = load_safetensors_weights(tied, dir.str());
    REQUIRE(w.lm_head.empty());
  }

  SECTION("a config with attention_bias reading a file without biases") {
    TempDir dir("bias");
    ModelSpec no_bias = spec;
    no_bias.attention_bias = false;
    no_bias.architecture = "llama";
    save_safetensors_weights(random_weights(no_bias, 4), dir.str(), "F32");
    const std::string msg = input_error_of([&] { load_safetensors_weights(spec, dir.str()); });
    REQUIRE_THAT(msg, Contains(file_name));
    REQUIRE_THAT(msg, Contains(layer_tensor_name(0, "self_attn.q_proj.bias")));
  }

  SECTION("a folder without weights, and an unknown dtype to save") {
    TempDir dir("empty");
    REQUIRE_THAT(input_error_of([&] { load_safetensors_weights(spec, dir.str()); }), Contains(dir.str()));
    REQUIRE_THAT(input_error_of([&] { save_safetensors_weights(original, dir.str(), "F64"); }), Contains("F64"));
  }
}
