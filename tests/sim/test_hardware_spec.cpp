// HardwareSpec: the presets' datasheet figures and the JSON hardware file.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>
#include <string>

#include "sim/errors.h"
#include "sim/hardware_spec.h"

#include "support/test_support.h"

using servesim::hardware_presets;
using servesim::HardwareSpec;
using servesim::InputError;
using servesim::resolve_hardware;
using servesim::test::input_error_of;
using servesim::test::TempFile;

TEST_CASE("Every hardware preset has positive figures and a sensible ridge point",
          "[hardware_spec]") {
  std::set<std::string> names;
  REQUIRE(hardware_presets().size() >= 4);
  for (const HardwareSpec& h : hardware_presets()) {
    INFO(h.name);
    CHECK(names.insert(h.name).second);
    CHECK(h.bf16_flops > 0);
    CHECK(std::isfinite(h.bf16_flops));
    CHECK(h.memory_bandwidth > 0);
    CHECK(std::isfinite(h.memory_bandwidth));
    CHECK(h.memory_bytes > 0);
    CHECK_FALSE(h.source.empty());
    CHECK_FALSE(h.description.empty());
    CHECK_NOTHROW(h.validate(h.name));
    // Units: tens to thousands of dense TFLOP/s, 0.5-10 TB/s, 16-200 GB.
    CHECK(h.bf16_flops >= 50e12);
    CHECK(h.bf16_flops <= 5e15);
    CHECK(h.memory_bandwidth >= 500e9);
    CHECK(h.memory_bandwidth <= 10e12);
    CHECK(h.memory_bytes >= 16e9);
    CHECK(h.memory_bytes <= 200e9);
    // Ridge point (FLOP per byte) of datacenter and gaming GPUs since Ampere:
    // roughly 100-500.
    const double ridge = h.bf16_flops / h.memory_bandwidth;
    CHECK(ridge > 50);
    CHECK(ridge < 1000);
  }
}

TEST_CASE("Preset figures match the datasheets (dense bf16)", "[hardware_spec]") {
  // H100 SXM: 1,979 TFLOP/s with sparsity -> 989.5 dense; 3.35 TB/s; 80 GB.
  const HardwareSpec h100 = resolve_hardware("h100-sxm");
  CHECK(h100.bf16_flops == Approx(989.5e12).epsilon(0.001));
  CHECK(h100.memory_bandwidth == Approx(3.35e12));
  CHECK(h100.memory_bytes == Approx(80e9));
  CHECK(h100.bf16_flops / h100.memory_bandwidth == Approx(295.3).epsilon(0.002));
  // H200: same compute as H100, 4.8 TB/s, 141 GB.
  const HardwareSpec h200 = resolve_hardware("h200");
  CHECK(h200.bf16_flops == Approx(h100.bf16_flops));
  CHECK(h200.memory_bandwidth == Approx(4.8e12));
  CHECK(h200.memory_bytes == Approx(141e9));
  // A100 80GB SXM: 312 TFLOP/s dense, 2,039 GB/s.
  const HardwareSpec a100 = resolve_hardware("a100-80gb");
  CHECK(a100.bf16_flops == Approx(312e12));
  CHECK(a100.memory_bandwidth == Approx(2.039e12));
  CHECK(a100.memory_bytes == Approx(80e9));
}

TEST_CASE("resolve_hardware: presets case-insensitively, unknown names list them",
          "[hardware_spec]") {
  CHECK(resolve_hardware("H200").name == "h200");
  CHECK(resolve_hardware("H100-SXM").name == "h100-sxm");
  const std::string msg = input_error_of([] { resolve_hardware("tpu-v9"); });
  CHECK_THAT(msg, Catch::Contains("tpu-v9"));
  for (const HardwareSpec& h : hardware_presets()) CHECK_THAT(msg, Catch::Contains(h.name));
}

TEST_CASE("JSON hardware file: units converted, name defaults to the path", "[hardware_spec]") {
  SECTION("all fields") {
    TempFile f("full", R"({"name": "my-gpu", "description": "a test GPU", "bf16_tflops": 100,
                          "memory_bandwidth_gbps": 2000, "memory_gb": 40})",
               ".json");
    const HardwareSpec h = resolve_hardware(f.path());
    CHECK(h.name == "my-gpu");
    CHECK(h.description == "a test GPU");
    CHECK(h.bf16_flops == Approx(100e12));        // TFLOP/s -> FLOP/s
    CHECK(h.memory_bandwidth == Approx(2000e9));  // GB/s -> B/s
    CHECK(h.memory_bytes == Approx(40e9));        // GB -> bytes
    CHECK(h.bf16_flops / h.memory_bandwidth == Approx(50.0));
    CHECK_NOTHROW(h.validate(h.name));
  }
  SECTION("no name: the path names it; fractional figures are fine") {
    TempFile f("noname", R"({"bf16_tflops": 0.5, "memory_bandwidth_gbps": 12.5, "memory_gb": 1.5})",
               ".json");
    const HardwareSpec h = resolve_hardware(f.path());
    CHECK(h.name == f.path());
    CHECK(h.bf16_flops == Approx(0.5e12));
    CHECK(h.memory_bandwidth == Approx(12.5e9));
    CHECK(h.memory_bytes == Approx(1.5e9));
  }
}

TEST_CASE("JSON hardware file errors name the file and the field", "[hardware_spec]") {
  struct Case {
    const char* tag;
    const char* text;
    const char* must_mention;
  };
  const Case cases[] = {
      {"missing", R"({"bf16_tflops": 100, "memory_gb": 40})", "memory_bandwidth_gbps"},
      {"string", R"({"bf16_tflops": "100", "memory_bandwidth_gbps": 2000, "memory_gb": 40})",
       "bf16_tflops"},
      {"zero", R"({"bf16_tflops": 100, "memory_bandwidth_gbps": 2000, "memory_gb": 0})",
       "memory_gb"},
      {"negative", R"({"bf16_tflops": -1, "memory_bandwidth_gbps": 2000, "memory_gb": 40})",
       "bf16_tflops"},
      {"badname", R"({"name": 5, "bf16_tflops": 1, "memory_bandwidth_gbps": 2, "memory_gb": 3})",
       "name"},
      {"invalid", R"({"bf16_tflops": 100, )", "JSON"},
      {"array", R"([100, 2000, 40])", "object"},
      {"misspelled", R"({"bf16_tflops": 1, "memory_bandwidth_gbps": 2, "memory_gb": 3, "fp8_tflop": 4})",
       "unknown field 'fp8_tflop'"},
  };
  for (const Case& c : cases) {
    INFO(c.tag);
    TempFile f(c.tag, c.text, ".json");
    const std::string msg = input_error_of([&] { resolve_hardware(f.path()); });
    CHECK_THAT(msg, Catch::Contains(f.path()));
    CHECK_THAT(msg, Catch::Contains(c.must_mention));
  }
}

TEST_CASE("HardwareSpec::validate rejects non-positive figures", "[hardware_spec]") {
  HardwareSpec h = resolve_hardware("h200");
  h.memory_bandwidth = 0;
  const std::string msg = input_error_of([&] { h.validate("custom"); });
  CHECK_THAT(msg, Catch::Contains("custom"));
  h = resolve_hardware("h200");
  h.bf16_flops = std::nan("");
  CHECK_THROWS_AS(h.validate("custom"), InputError);
  h = resolve_hardware("h200");
  h.memory_bytes = -1;
  CHECK_THROWS_AS(h.validate("custom"), InputError);
}
