// ModelSpec: preset parameter counts against the published figures, KV bytes
// per token by hand, and config.json parsing with its defaults and errors.
#include <catch2/catch.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "sim/errors.h"
#include "sim/model_spec.h"

#include "support/test_support.h"

using servesim::InputError;
using servesim::ModelSpec;
using servesim::model_from_config_json;
using servesim::model_presets;
using servesim::resolve_model;
using servesim::test::input_error_of;

namespace {

const std::string kModels = std::string(SERVESIM_TEST_DATA_DIR) + "/models";

const ModelSpec& preset(const std::string& name) {
  for (const ModelSpec& m : model_presets())
    if (m.name == name) return m;
  static const ModelSpec none;
  FAIL("no preset named " << name);
  return none;
}

}  // namespace

TEST_CASE("Preset parameter counts match the published figures within 0.5%", "[model_spec]") {
  // Figures from each model card / safetensors index on Hugging Face.
  struct Published {
    const char* name;
    double params;
  };
  const Published published[] = {
      {"llama-3.1-8b", 8.03e9},  {"llama-3.1-70b", 70.55e9}, {"llama-3.2-1b", 1.24e9},
      {"llama-3.2-3b", 3.21e9},  {"qwen2.5-7b", 7.62e9},     {"mistral-7b", 7.25e9},
      {"tinyllama-1.1b", 1.10e9},
  };
  for (const Published& p : published) {
    INFO(p.name);
    const double count = double(preset(p.name).parameter_count());
    CHECK(count == Approx(p.params).epsilon(0.005));
  }
}

TEST_CASE("Exact parameter counts by hand: untied Llama and Qwen2 with q/k/v biases",
          "[model_spec]") {
  // Llama-3.1-8B: embedding and LM head 2 * 128256 * 4096 = 1,050,673,152;
  // per layer q 4096^2 + k,v 2 * 4096 * 1024 + o 4096^2 + MLP 3 * 4096 * 14336
  // + norms 2 * 4096 = 218,112,000, times 32 = 6,979,584,000; final norm 4096.
  // Sum 8,030,261,248: the count Hugging Face lists for the checkpoint.
  CHECK(preset("llama-3.1-8b").parameter_count() == 8030261248LL);
  // Qwen2.5-7B: 2 * 152064 * 3584 = 1,089,994,752; per layer q 3584^2 + k,v
  // 2 * 3584 * 512 + o 3584^2 + MLP 3 * 3584 * 18944 + biases 3584 + 2 * 512
  // + norms 2 * 3584 = 233,057,792, times 28 = 6,525,618,176; final norm 3584.
  // Sum 7,615,616,512 (the published count; without the biases it would be
  // 129,024 fewer).
  CHECK(preset("qwen2.5-7b").parameter_count() == 7615616512LL);
  // Llama-3.2-1B ties the LM head to the embedding: 128256 * 2048 counted once.
  // Per layer q 2048^2 + k,v 2 * 2048 * 512 + o 2048^2 + MLP 3 * 2048 * 8192
  // + norms 2 * 2048 = 60,821,504, times 16 = 973,144,064; embedding
  // 262,668,288; final norm 2048. Sum 1,235,814,400.
  CHECK(preset("llama-3.2-1b").parameter_count() == 1235814400LL);
}

TEST_CASE("Weight bytes are parameters times the dtype size", "[model_spec]") {
  const ModelSpec& m = preset("llama-3.1-8b");
  CHECK(m.dtype_bytes() == 2);
  CHECK(m.weight_bytes() == Approx(2.0 * 8030261248.0).epsilon(1e-12));
  ModelSpec f = m;
  f.torch_dtype = "float16";
  CHECK(f.dtype_bytes() == 2);
  f.torch_dtype = "float32";
  CHECK(f.dtype_bytes() == 4);
  CHECK(f.weight_bytes() == Approx(4.0 * 8030261248.0).epsilon(1e-12));
  f.torch_dtype = "int8";
  CHECK_THROWS_AS(f.dtype_bytes(), InputError);
}

TEST_CASE("KV bytes per token by hand: 2 * L * Hkv * dh * bytes", "[model_spec]") {
  CHECK(preset("llama-3.1-8b").kv_bytes_per_token() == 2.0 * 32 * 8 * 128 * 2);  // 131072
  CHECK(preset("llama-3.1-8b").kv_bytes_per_token() == 131072.0);
  CHECK(preset("llama-3.1-70b").kv_bytes_per_token() == 327680.0);  // 2*80*8*128*2
  CHECK(preset("llama-3.2-1b").kv_bytes_per_token() == 32768.0);    // 2*16*8*64*2
  CHECK(preset("qwen2.5-7b").kv_bytes_per_token() == 57344.0);      // 2*28*4*128*2
  CHECK(preset("tinyllama-1.1b").kv_bytes_per_token() == 22528.0);  // 2*22*4*64*2
}

TEST_CASE("Every preset validates and has a unique lower-case name", "[model_spec]") {
  std::set<std::string> names;
  for (const ModelSpec& m : model_presets()) {
    INFO(m.name);
    CHECK_NOTHROW(m.validate(m.name));
    CHECK(names.insert(m.name).second);
    for (char c : m.name) CHECK(!(c >= 'A' && c <= 'Z'));
    CHECK(m.num_attention_heads % m.num_key_value_heads == 0);
    CHECK(m.parameter_count() > 0);
    CHECK(m.kv_bytes_per_token() > 0);
  }
  CHECK(names.size() >= 7);
}

TEST_CASE("config.json: Llama-3.1-8B from the file and from its folder", "[model_spec]") {
  const std::string folder = kModels + "/llama-3.1-8b";
  for (const std::string& path : {folder + "/config.json", folder}) {
    INFO(path);
    const ModelSpec m = model_from_config_json(path);
    CHECK(m.architecture == "llama");
    CHECK(m.hidden_size == 4096);
    CHECK(m.intermediate_size == 14336);
    CHECK(m.num_hidden_layers == 32);
    CHECK(m.num_attention_heads == 32);
    CHECK(m.num_key_value_heads == 8);
    CHECK(m.head_dim == 128);  // not in the file: 4096 / 32
    CHECK(m.vocab_size == 128256);
    CHECK(m.max_position_embeddings == 131072);
    CHECK_FALSE(m.tie_word_embeddings);
    CHECK_FALSE(m.attention_bias);
    CHECK(m.torch_dtype == "bfloat16");
    CHECK(m.rope_theta == 500000.0);
    CHECK(m.rms_norm_eps == 1e-5);
    CHECK(m.parameter_count() == 8030261248LL);
    CHECK(m.kv_bytes_per_token() == 131072.0);
    // The name says where the model came from.
    CHECK(m.name.find("config.json") != std::string::npos);
  }
  // resolve_model takes the same paths.
  CHECK(resolve_model(folder).parameter_count() == 8030261248LL);
}

TEST_CASE("config.json: Qwen2 without attention_bias gets the q/k/v biases", "[model_spec]") {
  const ModelSpec m = model_from_config_json(kModels + "/qwen2.5-7b");
  CHECK(m.architecture == "qwen2");
  CHECK(m.attention_bias);
  CHECK(m.num_key_value_heads == 4);
  CHECK(m.head_dim == 128);  // 3584 / 28
  CHECK(m.rms_norm_eps == 1e-6);
  CHECK(m.rope_theta == 1e6);
  CHECK(m.parameter_count() == 7615616512LL);  // as worked out above, biases included
}

TEST_CASE("config.json: defaults of the optional fields", "[model_spec]") {
  const ModelSpec m = model_from_config_json(kModels + "/minimal/config.json");
  CHECK(m.architecture == "llama");
  CHECK(m.num_key_value_heads == 8);  // = num_attention_heads
  CHECK(m.head_dim == 32);            // = 256 / 8
  CHECK_FALSE(m.tie_word_embeddings);
  CHECK_FALSE(m.attention_bias);
  CHECK(m.torch_dtype == "bfloat16");
  CHECK(m.rope_theta == 10000.0);
  // Embedding + LM head 2 * 1000 * 256 = 512,000; per layer q,k,v 256 * 768
  // + o 256 * 256 + MLP 3 * 256 * 512 + norms 512 = 655,872, times 2; final
  // norm 256. Sum 1,824,000.
  CHECK(m.parameter_count() == 1824000);
  CHECK(m.kv_bytes_per_token() == 2.0 * 2 * 8 * 32 * 2);  // 2048
}

TEST_CASE("config.json: explicit head_dim, tied embeddings, float32, mistral", "[model_spec]") {
  const ModelSpec m = model_from_config_json(kModels + "/float32");
  CHECK(m.architecture == "mistral");
  CHECK(m.head_dim == 64);  // given, not 256 / 8
  CHECK(m.tie_word_embeddings);
  CHECK(m.dtype_bytes() == 4);
  // Per layer q,k,v 256 * (8 + 2*2) * 64 = 196,608, o 8 * 64 * 256 = 131,072,
  // MLP 393,216, norms 512: 721,408, times 2 = 1,442,816; one tied embedding
  // 256,000; final norm 256. Sum 1,699,072; 4 bytes each.
  CHECK(m.parameter_count() == 1699072);
  CHECK(m.weight_bytes() == 4.0 * 1699072);
  CHECK(m.kv_bytes_per_token() == 2.0 * 2 * 2 * 64 * 4);  // 2048
}

TEST_CASE("config.json errors name the file and the field", "[model_spec]") {
  SECTION("folder without a config.json") {
    const std::string msg = input_error_of([&] { model_from_config_json(kModels); });
    CHECK_THAT(msg, Catch::Contains(kModels + "/config.json"));
  }
  // Each folder's config.json is bad in one way; the message names the file
  // and mentions every word given.
  struct Case {
    const char* what;
    const char* folder;
    std::vector<std::string> mentions;
  };
  const Case cases[] = {
      {"missing file", "does_not_exist", {}},
      {"invalid JSON", "invalid_json", {"JSON"}},
      {"missing required field", "missing_vocab_size", {"vocab_size", "missing"}},
      {"integer field given as a string", "wrong_type_int", {"num_hidden_layers"}},
      {"integer field given as a fraction", "wrong_type_float", {"hidden_size"}},
      {"boolean field given as a string", "wrong_type_bool", {"tie_word_embeddings"}},
      {"model_type that is not a string", "wrong_type_model_type", {"model_type"}},
      {"heads not divisible by KV heads", "bad_gqa", {"num_key_value_heads"}},
      {"unknown model_type", "unknown_model_type", {"gpt2", "model_type"}},
      {"unknown torch_dtype", "unknown_dtype", {"int4", "torch_dtype"}},
  };
  for (const Case& c : cases) {
    DYNAMIC_SECTION(c.what) {
      const std::string path = kModels + "/" + c.folder + "/config.json";
      const std::string msg = input_error_of([&] { model_from_config_json(path); });
      CHECK_THAT(msg, Catch::Contains(path));
      for (const std::string& word : c.mentions) CHECK_THAT(msg, Catch::Contains(word));
    }
  }
}

TEST_CASE("validate rejects non-positive shapes", "[model_spec]") {
  ModelSpec m = preset("llama-3.2-1b");
  m.num_hidden_layers = 0;
  const std::string msg = input_error_of([&] { m.validate("here"); });
  CHECK_THAT(msg, Catch::Contains("here"));
  CHECK_THAT(msg, Catch::Contains("num_hidden_layers"));
  m = preset("llama-3.2-1b");
  m.vocab_size = -1;
  CHECK_THROWS_AS(m.validate("here"), InputError);
}

TEST_CASE("resolve_model: presets case-insensitively, and an unknown name lists them",
          "[model_spec]") {
  CHECK(resolve_model("llama-3.1-8b").parameter_count() == 8030261248LL);
  CHECK(resolve_model("Llama-3.1-8B").name == "llama-3.1-8b");
  CHECK(resolve_model("QWEN2.5-7B").architecture == "qwen2");

  const std::string msg = input_error_of([] { resolve_model("gpt-5-turbo"); });
  CHECK_THAT(msg, Catch::Contains("gpt-5-turbo"));
  for (const ModelSpec& m : model_presets()) CHECK_THAT(msg, Catch::Contains(m.name));
}
