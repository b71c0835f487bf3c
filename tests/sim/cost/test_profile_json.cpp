// A profile's JSON (sim/cost/profile.h): every field the writer emits reads
// back, a field nobody knows -- a misspelled key at any level the loader
// reads -- is refused naming the field and where it sits, every profile
// committed under experiments/results/ still loads, and a calibration whose
// whole decode steps ran in two states of the host is named.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "support/synthetic_profile.h"

using namespace servesim;
using namespace servesim::test::synthetic;

namespace {

// The synthetic profile with every optional field set, so that its JSON
// holds every key the writer knows.
DeviceProfile every_field_profile() {
  DeviceProfile p = synthetic_profile(tiny_model());
  p.tensor_parallel_size = 2;
  p.decode_padding = DecodePadding::cuda_graphs(64);
  p.attention_launches = DeviceProfile::AttentionLaunches::TwoLaunches;
  p.gemm_factor = {{1, 8, 64}, {1.0, 1.1, 0.95}};
  p.decode_step_factor = {{1, 2, 8}, {1.02, 0.98, 1.0}};
  p.prefill_fit = AttentionFit{{1e-5, 2e-9, 3e-8}, 0.04, 0.02};
  p.decode_fit = AttentionFit{{2e-5, 1e-6, 4e-9}, 0.05, 0.03};
  p.anchor = {{"decode_step_s", 0.0125}};
  p.placement_ratios = {{"decode", {{"1", 0.75}}}};
  p.metadata = {{"seconds", 12.5}};
  return p;
}

std::string message_of(const nlohmann::json& j) {
  try {
    DeviceProfile::from_json(j, "p.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "(accepted)";
}

}  // namespace

TEST_CASE("profile JSON: every field the writer emits reads back unchanged") {
  const nlohmann::json j = every_field_profile().to_json();
  for (const char* key : {"tensor_parallel_size", "decode_padding", "attention_launches", "anchor",
                          "placement_ratios", "metadata"})
    CHECK(j.contains(key));
  CHECK(j["tables"].contains("attention_fits"));
  CHECK(DeviceProfile::from_json(j, "p.json").to_json() == j);
}

TEST_CASE("profile JSON: an unknown field is refused with its name and place, at every level read") {
  const nlohmann::json good = every_field_profile().to_json();
  struct Case {
    std::vector<std::string> path;  // the object the stray key goes into
    std::string key;
    std::string place;  // what the message names before the field
  };
  const Case cases[] = {
      {{}, "atention_launches", "p.json: unknown field 'atention_launches'"},
      {{"device"}, "thread", "p.json: device: unknown field 'thread'"},
      {{"tables"}, "gemm_qkv_", "p.json: tables: unknown field 'gemm_qkv_'"},
      {{"tables", "attention_fits"}, "mixed", "tables.attention_fits: unknown field 'mixed'"},
      {{"ceilings"}, "gemm_flop_per_s", "p.json: ceilings: unknown field 'gemm_flop_per_s'"},
      {{"decode_padding"}, "multiples", "decode_padding: unknown field 'multiples'"},
  };
  for (const Case& c : cases) {
    INFO(c.key);
    nlohmann::json j = good;
    nlohmann::json* target = &j;
    for (const auto& p : c.path) target = &(*target)[p];
    (*target)[c.key] = 1;
    const std::string msg = message_of(j);
    CHECK_THAT(msg, Catch::Contains(c.place) && Catch::Contains("allowed:"));
  }
  // The model block is a description of the model, with derived fields
  // (parameters, weight_bytes) that have changed over versions: extra
  // fields there are read past, a missing one is still refused.
  nlohmann::json j = good;
  j["model"]["some_future_note"] = 1;
  CHECK(message_of(j) == "(accepted)");
  j["model"].erase("head_dim");
  CHECK_THAT(message_of(j), Catch::Contains("head_dim"));
}

TEST_CASE("profile JSON: a device the decoder does not have is refused by name") {
  nlohmann::json j = every_field_profile().to_json();
  j["device"]["kind"] = "tpu";
  CHECK_THAT(message_of(j), Catch::Contains("device.kind 'tpu': expected cpu or cuda"));
  j = every_field_profile().to_json();
  j["device"]["threads"] = -1;
  CHECK_THAT(message_of(j), Catch::Contains("device.threads must be >= 0 (got -1)"));
}

TEST_CASE("profile JSON: every profile committed under experiments/results loads") {
  namespace fs = std::filesystem;
  int loaded = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(SERVESIM_SOURCE_DIR) / "experiments" / "results")) {
    if (!e.is_regular_file() || e.path().extension() != ".json") continue;
    std::ifstream in(e.path());
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || j.value("format", "") != DeviceProfile::kFormat) continue;
    INFO(e.path().string());
    CHECK_NOTHROW(DeviceProfile::from_json(j, e.path().string()));
    ++loaded;
  }
  CHECK(loaded >= 20);  // 29 when this test was written
}

TEST_CASE("profile: a calibration whose decode steps ran in two states of the host is named") {
  DeviceProfile p = synthetic_profile(tiny_model());
  CHECK(p.unsteadiness_warning().empty());  // no decode_in_situ recorded
  p.metadata["decode_in_situ"] = {{"sequences", {1, 8, 16}}, {"moment_spread", {1.12, 1.54, 1.20}}};
  const std::string w = p.unsteadiness_warning();
  CHECK_THAT(w, Catch::Contains("of 8 sequences") && Catch::Contains("1.54x apart") &&
                    Catch::Contains("1 sequence(s): 1.12x"));
  CHECK(ProfileModel(p, tiny_model()).describe()["calibration_warning"] == w);
  p.metadata["decode_in_situ"]["moment_spread"] = {1.12, 1.29, 1.30};  // at the limit: steady
  CHECK(p.unsteadiness_warning().empty());
  CHECK(ProfileModel(p, tiny_model()).describe()["calibration_warning"].is_null());
  // Metadata in another shape is provenance, not an input: no warning, no error.
  for (const nlohmann::json& odd : {nlohmann::json{{"sequences", "1,8"}, {"moment_spread", {2.0, 2.0}}},
                                    nlohmann::json{{"sequences", {1, 8}}, {"moment_spread", {2.0}}},
                                    nlohmann::json{{"sequences", nlohmann::json::array()}, {"moment_spread", nlohmann::json::array()}},
                                    nlohmann::json("text")}) {
    p.metadata["decode_in_situ"] = odd;
    CHECK(p.unsteadiness_warning().empty());
  }
}
