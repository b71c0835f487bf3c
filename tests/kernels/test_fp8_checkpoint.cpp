// FP8 checkpoints: the e4m3 conversions, F8_E4M3 linear weights with their
// weight_scale tensors loaded (dequantized) as vLLM and Hugging Face write
// them, and the errors that name file and tensor for a bad one.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>


#include "kernels/decoder/fp8_e4m3.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/safetensors.h"
#include "sim/errors.h"
#include "sim/model_spec.h"
#include "support/test_support.h"

using namespace servesim;
using Catch::Matchers::Contains;
using servesim::test::input_error_of;
namespace fs = std::filesystem;

TEST_CASE("e4m3: every code decodes to its value and encodes back", "[fp8]") {
  CHECK(e4m3_to_f32(0x00) == 0.0f);
  CHECK(e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  CHECK(e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  CHECK(e4m3_to_f32(0x38) == 1.0f);
  CHECK(e4m3_to_f32(0x7E) == 448.0f);                // largest finite
  CHECK(e4m3_to_f32(0xFE) == -448.0f);
  CHECK(std::isnan(e4m3_to_f32(0x7F)));
  CHECK(std::isnan(e4m3_to_f32(0xFF)));
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    INFO("code " << code);
    REQUIRE(f32_to_e4m3(e4m3_to_f32(uint8_t(code))) == (code == 0x80 ? 0x80 : code));
  }
  CHECK(f32_to_e4m3(1000.0f) == 0x7E);   // saturates
  CHECK(f32_to_e4m3(-1000.0f) == 0xFE);
  CHECK(f32_to_e4m3(1.0625f) == 0x38);   // halfway between 1 and 1.125: to the even code
  CHECK(f32_to_e4m3(1.1875f) == 0x3A);   // halfway between 1.125 and 1.25: to the even code
  CHECK(f32_to_e4m3(1.07f) == 0x39);
}

namespace {

ModelSpec fp8_spec() { return test::small_model("test-fp8", 32, 64, 2, 4, 2, 8, 97, 256, "bfloat16"); }

bool is_linear(const std::string& name) {
  for (const char* part : {"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "gate_proj.weight",
                           "up_proj.weight", "down_proj.weight"})
    if (name.ends_with(part)) return true;
  return false;
}

// An FP8 checkpoint of `w` as llm-compressor writes one: each linear weight
// in F8_E4M3 with an F32 weight_scale per output channel ([N, 1]; per
// tensor ([]) when `per_tensor`), everything else in BF16. `edit` may change
// the tensors before they are written. Returns the dequantized weights the
// loader must produce.
HostWeights write_fp8_checkpoint(const HostWeights& w, const fs::path& dir, bool per_tensor,
                                 const std::function<void(std::vector<TensorToWrite>&)>& edit = {}) {
  save_safetensors_weights(w, dir.string(), "BF16");  // config.json and the BF16 tensors
  const SafetensorsFile bf16((dir / "model.safetensors").string());
  std::vector<TensorToWrite> out;
  for (const std::string& name : bf16.names()) {
    const auto& shape = bf16.info(name).shape;
    std::vector<float> values = bf16.read_f32(name, shape);
    if (!is_linear(name)) {
      out.emplace_back(name, shape, values, SafetensorsDtype::BF16);
      continue;
    }
    const int64_t N = shape[0], K = shape[1];
    std::vector<float> scales(per_tensor ? 1 : size_t(N), 0.0f);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) {
        float& s = scales[per_tensor ? 0 : size_t(n)];
        s = std::max(s, std::abs(values[size_t(n * K + k)]) / 448.0f);
      }
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k) values[size_t(n * K + k)] /= scales[per_tensor ? 0 : size_t(n)];
    const std::string scale_name = name.substr(0, name.size() - 6) + "weight_scale";
    out.emplace_back(name, shape, values, SafetensorsDtype::F8_E4M3);
    out.emplace_back(scale_name, per_tensor ? std::vector<int64_t>{} : std::vector<int64_t>{N, 1}, scales,
                     SafetensorsDtype::F32);
  }
  if (edit) edit(out);
  write_safetensors((dir / "model.safetensors").string(), out, SafetensorsDtype::F32);
  // What loading must give: each F8 value as written, times its scale.
  HostWeights want = load_safetensors_weights(w.spec, dir.string());
  return want;
}

}  // namespace

TEST_CASE("an FP8 checkpoint loads: F8_E4M3 linear weights times their weight_scale", "[fp8][weights]") {
  const ModelSpec spec = fp8_spec();
  const HostWeights w = random_weights(spec, 3);
  for (const bool per_tensor : {false, true}) {
    INFO((per_tensor ? "per-tensor scales" : "per-channel scales"));
    test::TempDir dir(per_tensor ? "fp8_tensor" : "fp8_channel");
    const HostWeights loaded = write_fp8_checkpoint(w, dir.path(), per_tensor);
    // e4m3 keeps 4 significant bits: within 2^-4 relative of the value, or
    // half the smallest subnormal step (2^-10 of the scale) near zero.
    auto check = [&](const std::vector<float>& got, const std::vector<float>& want, int64_t N, const char* what) {
      REQUIRE(got.size() == want.size());
      const int64_t K = int64_t(want.size()) / N;
      double max_err = 0;
      for (int64_t n = 0; n < N; ++n) {
        double row_max = 0;
        for (int64_t k = 0; k < K; ++k) row_max = std::max(row_max, double(std::abs(want[size_t(n * K + k)])));
        for (int64_t k = 0; k < K; ++k) {
          const double g = got[size_t(n * K + k)], x = want[size_t(n * K + k)];
          const double err = std::abs(g - x);
          max_err = std::max(max_err, err / row_max);
          // bf16 of the original, then e4m3: 2^-4 relative plus bf16's 2^-8.
          REQUIRE(err <= std::abs(x) * (0.0625 + 0.004) + row_max * 0.01);
        }
      }
      INFO(what << ": max error / row max " << max_err);
      CHECK(max_err > 0);  // really went through FP8
    };
    const HostLayerWeights &a = loaded.layers[1], &b = w.layers[1];
    check(a.wq, b.wq, spec.num_attention_heads * spec.head_dim, "q_proj");
    check(a.w_down, b.w_down, spec.hidden_size, "down_proj");
    // The rest is BF16, exactly as a BF16 checkpoint loads.
    for (size_t i = 0; i < w.embedding.size(); ++i) REQUIRE(loaded.embedding[i] == bf16_to_f32(f32_to_bf16(w.embedding[i])));
  }
}

TEST_CASE("a bad FP8 checkpoint is refused naming the file and the tensor", "[fp8][weights]") {
  const ModelSpec spec = fp8_spec();
  const HostWeights w = random_weights(spec, 3);
  const std::string down = layer_tensor_name(0, "mlp.down_proj.weight"), scale = layer_tensor_name(0, "mlp.down_proj.weight_scale");
  auto error_with = [&](const char* tag, const std::function<void(std::vector<TensorToWrite>&)>& edit) {
    test::TempDir dir(std::string("fp8_") + tag);
    return input_error_of([&] { write_fp8_checkpoint(w, dir.path(), false, edit); });
  };
  SECTION("a missing weight_scale") {
    const std::string msg = error_with("missing", [&](std::vector<TensorToWrite>& t) {
      std::erase_if(t, [&](const TensorToWrite& x) { return x.name == scale; });
    });
    CHECK_THAT(msg, Contains("model.safetensors") && Contains(down) && Contains(scale) && Contains("missing"));
  }
  SECTION("a weight_scale of the wrong shape") {
    const std::string msg = error_with("shape", [&](std::vector<TensorToWrite>& t) {
      for (TensorToWrite& x : t)
        if (x.name == scale) x = TensorToWrite(scale, {2, 16}, std::vector<float>(32, 0.01f), SafetensorsDtype::F32);
    });
    CHECK_THAT(msg, Contains(scale) && Contains("[2, 16]") && Contains("[32, 1]"));
  }
  SECTION("a zero scale") {
    const std::string msg = error_with("zero", [&](std::vector<TensorToWrite>& t) {
      for (TensorToWrite& x : t)
        if (x.name == scale) x.values[3] = 0.0f;
    });
    CHECK_THAT(msg, Contains(scale) && Contains("row 3") && Contains("> 0"));
  }
  SECTION("an FP8 norm") {
    const std::string norm = layer_tensor_name(1, "input_layernorm.weight");
    const std::string msg = error_with("norm", [&](std::vector<TensorToWrite>& t) {
      for (TensorToWrite& x : t)
        if (x.name == norm) x.dtype = SafetensorsDtype::F8_E4M3;
    });
    CHECK_THAT(msg, Contains(norm) && Contains("only the linear layers"));
  }
}
