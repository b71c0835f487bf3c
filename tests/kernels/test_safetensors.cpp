// Safetensors reading, writing and the fp16/bf16 conversions.
#include <bit>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include <catch2/catch.hpp>

#include "support/test_support.h"
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/decoder/safetensors.h"
#include "sim/errors.h"

using namespace servesim;
using servesim::test::input_error_of;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// A fresh folder under the system temp dir, unique per process and tag,
// removed (with everything in it) when the test ends.
struct TempDir {
  fs::path path;
  explicit TempDir(const std::string& tag)
      : path(fs::temp_directory_path() /
             fmt::format("servesim_safetensors_{}_{}", static_cast<long>(::getpid()), tag)) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

// Writes a safetensors file byte by byte: an explicit header-length field,
// the header text and the data.
void write_raw(const std::string& path, uint64_t header_len_field, const std::string& header,
               const std::vector<uint8_t>& data) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((header_len_field >> (8 * i)) & 0xFF));
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

void write_raw(const std::string& path, const std::string& header,
               const std::vector<uint8_t>& data) {
  write_raw(path, header.size(), header, data);
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> out;
  for (float f : v) {
    const auto u = std::bit_cast<uint32_t>(f);
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>((u >> (8 * i)) & 0xFF));
  }
  return out;
}

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }

bool is_f16_nan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x3FF) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0; }

const std::vector<float> kExactValues = {1.0f, -2.5f, 3.0f, -7.0f, 0.5f, 100.0f, -0.125f, 42.0f};

}  // namespace

// ---------------------------------------------------------------------------
// Scalar conversions

TEST_CASE("bf16 conversions of specific values", "[safetensors]") {
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(f32_to_bf16(-2.5f) == 0xC020);
  CHECK(bf16_to_f32(0xC020) == -2.5f);
  CHECK(f32_to_bf16(-0.0f) == 0x8000);
  CHECK(bits(bf16_to_f32(0x8000)) == 0x80000000u);
  CHECK(f32_to_bf16(std::numeric_limits<float>::infinity()) == 0x7F80);
  CHECK(f32_to_bf16(-std::numeric_limits<float>::infinity()) == 0xFF80);
  CHECK(bf16_to_f32(0x7F80) == std::numeric_limits<float>::infinity());
  // FLT_MAX lies past the midpoint of bf16's largest finite value and 2^128.
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(f32_to_bf16(bf16_to_f32(0x7F7F)) == 0x7F7F);
  // bf16 keeps fp32's exponent range, so it has the same subnormals.
  CHECK(bf16_to_f32(0x0001) == std::ldexp(1.0f, -133));
  CHECK(f32_to_bf16(std::ldexp(1.0f, -133)) == 0x0001);

  SECTION("NaN stays NaN, even one whose payload lives only in the low 16 bits") {
    CHECK(is_bf16_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
    CHECK(is_bf16_nan(f32_to_bf16(std::bit_cast<float>(0x7F800001u))));  // truncation gives inf
    CHECK(is_bf16_nan(f32_to_bf16(std::bit_cast<float>(0xFF800001u))));
    CHECK((f32_to_bf16(std::bit_cast<float>(0xFF800001u)) & 0x8000) != 0);
    CHECK(std::isnan(bf16_to_f32(0x7FC0)));
  }
  SECTION("rounding is to nearest, ties to even") {
    // 1 + 2^-8 lies exactly halfway between 0x3F80 (1.0) and 0x3F81: even is 0x3F80.
    CHECK(bits(1.0f + std::ldexp(1.0f, -8)) == 0x3F808000u);
    CHECK(f32_to_bf16(std::bit_cast<float>(0x3F808000u)) == 0x3F80);
    // Halfway between 0x3F81 and 0x3F82: even is 0x3F82 (rounds up).
    CHECK(f32_to_bf16(std::bit_cast<float>(0x3F818000u)) == 0x3F82);
    // Just either side of a midpoint goes to the nearer value.
    CHECK(f32_to_bf16(std::bit_cast<float>(0x3F808001u)) == 0x3F81);
    CHECK(f32_to_bf16(std::bit_cast<float>(0x3F807FFFu)) == 0x3F80);
    CHECK(f32_to_bf16(std::bit_cast<float>(0xBF818000u)) == 0xBF82);  // symmetric for negatives
  }
}

TEST_CASE("f16 conversions of specific values", "[safetensors]") {
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f16_to_f32(0x3C00) == 1.0f);
  CHECK(f32_to_f16(-2.5f) == 0xC100);
  CHECK(f16_to_f32(0xC100) == -2.5f);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);  // smallest normal
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(bits(f16_to_f32(0x8000)) == 0x80000000u);

  SECTION("overflow goes to infinity") {
    CHECK(f32_to_f16(65519.0f) == 0x7BFF);  // below the midpoint 65520
    CHECK(f32_to_f16(65520.0f) == 0x7C00);  // the tie goes to even: 2^16, i.e. inf
    CHECK(f32_to_f16(1e6f) == 0x7C00);
    CHECK(f32_to_f16(-1e6f) == 0xFC00);
    CHECK(f32_to_f16(std::numeric_limits<float>::infinity()) == 0x7C00);
    CHECK(f32_to_f16(-std::numeric_limits<float>::infinity()) == 0xFC00);
    CHECK(f16_to_f32(0x7C00) == std::numeric_limits<float>::infinity());
    CHECK(f16_to_f32(0xFC00) == -std::numeric_limits<float>::infinity());
  }
  SECTION("subnormals") {
    // 1e-7 / 2^-24 = 1.68 -> 2 units of the smallest subnormal.
    CHECK(f32_to_f16(1e-7f) == 0x0002);
    CHECK(f16_to_f32(0x0002) == std::ldexp(1.0f, -23));
    CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
    CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));  // largest subnormal
    CHECK(f16_to_f32(0x8001) == -std::ldexp(1.0f, -24));
    CHECK(f32_to_f16(std::ldexp(1023.0f, -24)) == 0x03FF);
    CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0x0000);  // tie between 0 and 2^-24: even is 0
    CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 0x0001);
    CHECK(f32_to_f16(std::ldexp(3.0f, -25)) == 0x0002);  // tie between 1 and 2 units: even is 2
    CHECK(f32_to_f16(1e-9f) == 0x0000);
    CHECK(f32_to_f16(-1e-9f) == 0x8000);
    // Rounding up out of the subnormal range lands on the smallest normal.
    CHECK(f32_to_f16(std::ldexp(1023.75f, -24)) == 0x0400);
  }
  SECTION("NaN stays NaN") {
    CHECK(is_f16_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN())));
    CHECK(is_f16_nan(f32_to_f16(std::bit_cast<float>(0x7F800001u))));  // low-bit payload only
    CHECK(std::isnan(f16_to_f32(0x7E00)));
    CHECK(std::isnan(f16_to_f32(0x7C01)));
    CHECK(std::isnan(f16_to_f32(0xFE00)));
  }
  SECTION("rounding is to nearest, ties to even") {
    CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);         // halfway, even is down
    CHECK(f32_to_f16(1.0f + 3.0f * std::ldexp(1.0f, -11)) == 0x3C02);  // halfway, even is up
    CHECK(f32_to_f16(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3C01);
    CHECK(f32_to_f16(2047.5f) == 0x6800);  // ties between 2047 (0x67FF) and 2048: even is 2048
    CHECK(f16_to_f32(0x6800) == 2048.0f);
  }
}

// Every finite half and bf16 survives the trip through fp32, values increase
// with their bit patterns, and every midpoint between neighbours rounds to
// the even one (nudged either way, to the nearer one).
TEST_CASE("f16 and bf16 conversions are exact and round to nearest even everywhere",
          "[safetensors]") {
  struct Format {
    const char* name;
    float (*to_f32)(uint16_t);
    uint16_t (*from_f32)(float);
    uint16_t max_finite;
  };
  for (const Format& f : {Format{"f16", f16_to_f32, f32_to_f16, 0x7BFF},
                          Format{"bf16", bf16_to_f32, f32_to_bf16, 0x7F7F}}) {
    INFO(f.name);
    int failures = 0;
    for (uint32_t h = 0; h <= f.max_finite && failures < 5; ++h) {
      for (uint16_t sign : {uint16_t{0}, uint16_t{0x8000}}) {
        const auto v = static_cast<uint16_t>(h | sign);
        if (f.from_f32(f.to_f32(v)) != v) {
          ++failures;
          FAIL_CHECK(fmt::format("{:#06x} does not round-trip", v));
        }
      }
      if (h == f.max_finite) break;
      const float a = f.to_f32(static_cast<uint16_t>(h));
      const float b = f.to_f32(static_cast<uint16_t>(h + 1));
      if (!(a < b)) {
        ++failures;
        FAIL_CHECK(fmt::format("{:#06x} -> {} is not below the next value {}", h, a, b));
      }
      // The midpoint of two neighbours needs one more bit than they do: exact in fp32.
      const auto mid = static_cast<float>((static_cast<double>(a) + b) / 2);
      const auto even = static_cast<uint16_t>((h & 1) ? h + 1 : h);
      if (f.from_f32(mid) != even || f.from_f32(std::nextafter(mid, 0.0f)) != h ||
          f.from_f32(std::nextafter(mid, b)) != h + 1 || f.from_f32(-mid) != (even | 0x8000)) {
        ++failures;
        FAIL_CHECK(fmt::format("midpoint of {:#06x} and {:#06x} rounds wrongly", h, h + 1));
      }
    }
    CHECK(failures == 0);
  }
}

// ---------------------------------------------------------------------------
// Writing and reading back

TEST_CASE("safetensors round trip in every dtype", "[safetensors]") {
  TempDir dir("roundtrip");
  const std::vector<float> general = {0.1f, -3.14159f, 1234.567f, 1e-3f, -0.7071f, 2.71828f};
  const std::vector<float> nonfinite = {std::numeric_limits<float>::infinity(),
                                        -std::numeric_limits<float>::infinity(),
                                        std::numeric_limits<float>::quiet_NaN()};
  const std::vector<TensorToWrite> tensors = {
      {"model.layers.0.mlp.up_proj.weight", {2, 4}, kExactValues},
      {"general", {3, 2}, general},
      {"nonfinite", {3}, nonfinite},
      {"scalar", {}, {-6.0f}},
      {"empty", {0, 5}, {}},
  };
  struct Case {
    SafetensorsDtype dtype;
    double rel_tol;
    const char* name;
  };
  for (const Case& c : {Case{SafetensorsDtype::F32, 0.0, "F32"},
                        Case{SafetensorsDtype::BF16, std::ldexp(1.0, -8), "BF16"},
                        Case{SafetensorsDtype::F16, std::ldexp(1.0, -11), "F16"}}) {
    INFO(c.name);
    const std::string path = dir.file(std::string("w_") + c.name + ".safetensors");
    write_safetensors(path, tensors, c.dtype);

    // The header length is a multiple of 8 and the header is JSON listing the
    // tensors in the order given.
    {
      std::ifstream in(path, std::ios::binary);
      unsigned char len[8];
      in.read(reinterpret_cast<char*>(len), 8);
      uint64_t n = 0;
      for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
      CHECK(n % 8 == 0);
      std::string header(n, '\0');
      in.read(header.data(), static_cast<std::streamsize>(n));
      CHECK(header.find("model.layers.0") < header.find("general"));
      CHECK(header.find("general") < header.find("nonfinite"));
      const auto j = nlohmann::json::parse(header);
      CHECK(j.at("general").at("dtype") == c.name);
      CHECK(fs::file_size(path) == 8 + n + (8 + 6 + 3 + 1) * (c.dtype == SafetensorsDtype::F32 ? 4 : 2));
    }

    SafetensorsFile file(path);
    CHECK(file.path() == path);
    CHECK(file.names() == std::vector<std::string>{"empty", "general",
                                                    "model.layers.0.mlp.up_proj.weight",
                                                    "nonfinite", "scalar"});
    CHECK(file.has("general"));
    CHECK_FALSE(file.has("nope"));
    CHECK(file.info("general").dtype == c.dtype);
    CHECK(file.info("general").numel() == 6);
    CHECK(file.info("scalar").numel() == 1);
    CHECK(file.info("empty").numel() == 0);

    CHECK(file.read_f32("model.layers.0.mlp.up_proj.weight", {2, 4}) == kExactValues);
    CHECK(file.read_f32("scalar", {}) == std::vector<float>{-6.0f});
    CHECK(file.read_f32("empty", {0, 5}).empty());

    const auto g = file.read_f32("general", {3, 2});
    REQUIRE(g.size() == general.size());
    for (size_t i = 0; i < g.size(); ++i) {
      INFO("value " << general[i] << " read back as " << g[i]);
      CHECK(std::fabs(static_cast<double>(g[i]) - general[i]) <= c.rel_tol * std::fabs(general[i]));
      if (c.dtype != SafetensorsDtype::F32) CHECK(g[i] != general[i]);  // really was converted
    }

    const auto nf = file.read_f32("nonfinite", {3});
    CHECK(nf[0] == std::numeric_limits<float>::infinity());
    CHECK(nf[1] == -std::numeric_limits<float>::infinity());
    CHECK(std::isnan(nf[2]));
  }
}

TEST_CASE("safetensors reader parses a hand-built file", "[safetensors]") {
  // Independent of the writer: a header as another writer might lay it out
  // (metadata, extra spaces, tensors out of offset order), f16 and bf16 data.
  TempDir dir("handbuilt");
  const std::string path = dir.file("hand.safetensors");
  const std::string header =
      R"({"__metadata__": {"format": "pt"}, "b": {"dtype": "BF16", "shape": [2],)"
      R"( "data_offsets": [4, 8]}, "a": {"dtype": "F16", "shape": [2], "data_offsets": [0, 4]}}   )";
  // a = [1.0, -2.5] as f16 (0x3C00, 0xC100); b = [1.0, -2.5] as bf16 (0x3F80, 0xC020).
  write_raw(path, header, {0x00, 0x3C, 0x00, 0xC1, 0x80, 0x3F, 0x20, 0xC0});
  SafetensorsFile file(path);
  CHECK(file.names() == std::vector<std::string>{"a", "b"});
  CHECK(file.info("a").dtype == SafetensorsDtype::F16);
  CHECK(file.info("b").begin == 4);
  CHECK(file.info("b").end == 8);
  CHECK(file.read_f32("a", {2}) == std::vector<float>{1.0f, -2.5f});
  CHECK(file.read_f32("b", {2}) == std::vector<float>{1.0f, -2.5f});
}

TEST_CASE("safetensors model: a single file", "[safetensors]") {
  TempDir dir("single");
  write_safetensors(dir.file("model.safetensors"), {{"w", {2, 4}, kExactValues}},
                    SafetensorsDtype::BF16);
  SafetensorsModel model(dir.path.string());
  CHECK(model.has("w"));
  CHECK_FALSE(model.has("v"));
  CHECK(model.read_f32("w", {2, 4}) == kExactValues);
  const std::string msg = input_error_of([&] { model.read_f32("v", {1}); });
  CHECK_THAT(msg, Contains(dir.file("model.safetensors")) && Contains("missing tensor 'v'"));
}

TEST_CASE("safetensors model: two shards named by an index", "[safetensors]") {
  TempDir dir("sharded");
  const std::vector<float> a = {1, 2, 3, 4, 5, 6};
  const std::vector<float> b = {-1.5f, 2.25f};
  const std::vector<float> c = {7, -8, 9};
  write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                    {{"model.a", {2, 3}, a}, {"model.b", {2}, b}}, SafetensorsDtype::F16);
  write_safetensors(dir.file("model-00002-of-00002.safetensors"), {{"model.c", {3}, c}},
                    SafetensorsDtype::F32);
  const std::string index_path = dir.file("model.safetensors.index.json");
  const std::string index = R"({"metadata": {"total_size": 24}, "weight_map": {
      "model.a": "model-00001-of-00002.safetensors",
      "model.c": "model-00002-of-00002.safetensors",
      "model.b": "model-00001-of-00002.safetensors"}})";
  write_text(index_path, index);
  // An index takes precedence over a stray single file.
  write_safetensors(dir.file("model.safetensors"), {{"model.a", {1}, {99}}},
                    SafetensorsDtype::F32);

  {
    SafetensorsModel model(dir.path.string());
    CHECK(model.has("model.a"));
    CHECK(model.has("model.b"));
    CHECK(model.has("model.c"));
    CHECK(model.read_f32("model.a", {2, 3}) == a);
    CHECK(model.read_f32("model.b", {2}) == b);
    CHECK(model.read_f32("model.c", {3}) == c);

    const std::string missing = input_error_of([&] { model.read_f32("model.d", {3}); });
    CHECK_THAT(missing, Contains(index_path) && Contains("missing tensor 'model.d'"));

    const std::string shape = input_error_of([&] { model.read_f32("model.c", {4}); });
    CHECK_THAT(shape, Contains("model-00002-of-00002.safetensors") && Contains("'model.c'") &&
                          Contains("[3]") && Contains("[4]"));
  }

  SECTION("a shard named by the index is missing") {
    write_text(index_path, R"({"weight_map": {"model.a": "model-00001-of-00002.safetensors",
        "model.z": "model-00003-of-00003.safetensors"}})");
    const std::string msg = input_error_of([&] { SafetensorsModel m(dir.path.string()); });
    CHECK_THAT(msg, Contains(index_path) && Contains("model-00003-of-00003.safetensors") &&
                        Contains("model.z"));
  }
  SECTION("a tensor named by the index is not in its shard") {
    write_text(index_path, R"({"weight_map": {"model.a": "model-00001-of-00002.safetensors",
        "model.c": "model-00001-of-00002.safetensors"}})");
    const std::string msg = input_error_of([&] { SafetensorsModel m(dir.path.string()); });
    CHECK_THAT(msg, Contains(index_path) && Contains("model.c") &&
                        Contains("model-00001-of-00002.safetensors"));
  }
  SECTION("a malformed index") {
    for (const std::string bad :
         {"{not json", "[1, 2]", R"({"metadata": {}})", R"({"weight_map": [1]})",
          R"({"weight_map": {}})", R"({"weight_map": {"model.a": 3}})",
          R"({"weight_map": {"model.a": ""}})"}) {
      INFO(bad);
      write_text(index_path, bad);
      CHECK_THAT(input_error_of([&] { SafetensorsModel m(dir.path.string()); }), Contains(index_path));
    }
  }
  SECTION("a shard that is itself broken is named") {
    const std::string shard = dir.file("model-00002-of-00002.safetensors");
    write_text(shard, "abc");
    CHECK_THAT(input_error_of([&] { SafetensorsModel m(dir.path.string()); }), Contains(shard));
  }
}

TEST_CASE("safetensors model: a folder without weights", "[safetensors]") {
  TempDir dir("noweights");
  write_text(dir.file("config.json"), "{}");
  const std::string msg = input_error_of([&] { SafetensorsModel m(dir.path.string()); });
  CHECK_THAT(msg, Contains(dir.path.string()) &&
                      Contains("no model.safetensors or model.safetensors.index.json"));
  const std::string absent = dir.file("does_not_exist");
  CHECK_THAT(input_error_of([&] { SafetensorsModel m(absent); }), Contains(absent));
}

// ---------------------------------------------------------------------------
// Malformed files

TEST_CASE("safetensors reader rejects malformed files with a clear message", "[safetensors]") {
  TempDir dir("malformed");
  const std::string path = dir.file("bad.safetensors");
  const std::string tensor = "model.layers.0.mlp.up_proj.weight";
  auto open = [&] { SafetensorsFile f(path); };

  SECTION("missing file") {
    const std::string missing = dir.file("absent.safetensors");
    CHECK_THAT(input_error_of([&] { SafetensorsFile f(missing); }),
               Contains(missing) && Contains("does not exist"));
  }
  SECTION("a directory") {
    CHECK_THAT(input_error_of([&] { SafetensorsFile f(dir.path.string()); }),
               Contains(dir.path.string()));
  }
  SECTION("file shorter than 8 bytes") {
    write_text(path, std::string("\x05\x00\x00", 3));
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("3 bytes"));
    write_text(path, "");
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("0 bytes"));
  }
  SECTION("header length past the end") {
    write_raw(path, 1000, "{}", {});
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("header of 1000 bytes runs past the end "
                                                          "of the file (10 bytes)"));
    write_raw(path, 3, "{}", {});  // one byte past the end: the header-length field counts too
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("header of 3 bytes runs past the end "
                                                          "of the file (10 bytes)"));
    write_raw(path, std::numeric_limits<uint64_t>::max(), "{}", {});  // no overflow either
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("runs past the end"));
  }
  SECTION("invalid JSON header") {
    write_raw(path, R"({"a": {"dtype": "F32", )", {});
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("not valid JSON"));
    write_raw(path, std::string("{\"a\xff\": 1}"), {});  // invalid UTF-8
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("not valid JSON"));
  }
  SECTION("unsupported dtype") {
    write_raw(path, fmt::format(R"({{"{}": {{"dtype": "I64", "shape": [2], "data_offsets": [0, 16]}}}})", tensor),
              std::vector<uint8_t>(16, 1));
    CHECK_THAT(input_error_of(open), Contains(path) && Contains(tensor) && Contains("I64") &&
                                   Contains("F32, F16, BF16"));
  }
  SECTION("data_offsets past the end: a truncated file") {
    write_safetensors(path, {{"first", {4}, {1, 2, 3, 4}}, {tensor, {2, 4}, kExactValues}},
                      SafetensorsDtype::F32);
    const auto size = fs::file_size(path);
    fs::resize_file(path, size - 4);
    CHECK_THAT(input_error_of(open), Contains(path) && Contains(tensor) &&
                                   Contains("data_offsets [16, 48] point past the end of the "
                                            "data (44 bytes)") &&
                                   Contains("truncated"));
  }
  SECTION("byte length disagreeing with the shape") {
    write_raw(path, fmt::format(R"({{"{}": {{"dtype": "F32", "shape": [3], "data_offsets": [0, 16]}}}})", tensor),
              f32_bytes({1, 2, 3, 4}));
    CHECK_THAT(input_error_of(open), Contains(path) && Contains(tensor) && Contains("[3]") &&
                                   Contains("12 bytes") && Contains("16 bytes"));
    // The same bytes are right for 8 halves, not for 4.
    write_raw(path, fmt::format(R"({{"{}": {{"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]}}}})", tensor),
              f32_bytes({1, 2, 3, 4}));
    CHECK_THAT(input_error_of(open), Contains(path) && Contains(tensor) && Contains("BF16"));
  }
  SECTION("a shape whose element count overflows") {
    write_raw(path, R"({"huge": {"dtype": "F32", "shape": [4294967296, 4294967296, 4], "data_offsets": [0, 0]}})",
              {});
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("huge"));
  }
  SECTION("overlapping tensors") {
    write_raw(path, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                    R"( "b": {"dtype": "F32", "shape": [4], "data_offsets": [8, 24]}})",
              f32_bytes({1, 2, 3, 4, 5, 6}));
    CHECK_THAT(input_error_of(open), Contains(path) && Contains("'a'") && Contains("'b'") &&
                                   Contains("overlaps"));
    // Empty tensors hold no bytes and may sit anywhere.
    write_raw(path, R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]},)"
                    R"( "e": {"dtype": "F16", "shape": [0], "data_offsets": [8, 8]}})",
              f32_bytes({1, 2, 3, 4}));
    CHECK_NOTHROW(open());
  }
  SECTION("missing tensor") {
    write_safetensors(path, {{"present", {2}, {1, 2}}}, SafetensorsDtype::F32);
    SafetensorsFile f(path);
    CHECK_THAT(input_error_of([&] { f.read_f32(tensor, {2}); }),
               Contains(path) && Contains(fmt::format("missing tensor '{}'", tensor)));
    CHECK_THAT(input_error_of([&] { f.info(tensor); }), Contains(path) && Contains(tensor));
  }
  SECTION("shape mismatch with the expected shape") {
    write_safetensors(path, {{tensor, {2, 4}, kExactValues}}, SafetensorsDtype::BF16);
    SafetensorsFile f(path);
    CHECK_THAT(input_error_of([&] { f.read_f32(tensor, {4, 2}); }),
               Contains(fmt::format("{}: tensor '{}' has shape [2, 4] but config.json implies "
                                    "[4, 2]",
                                    path, tensor)));
    CHECK_THAT(input_error_of([&] { f.read_f32(tensor, {8}); }), Contains(path) && Contains(tensor));
    CHECK_THAT(input_error_of([&] { f.read_f32(tensor, {2, 4, 1}); }), Contains(tensor));
  }
}

TEST_CASE("safetensors reader survives fuzzed headers", "[safetensors]") {
  TempDir dir("fuzz");
  const std::string path = dir.file("fuzz.safetensors");
  const std::vector<uint8_t> data = f32_bytes({1, 2, 3, 4});
  const std::vector<std::string> headers = {
      // JSON, but not an object.
      "[]", "42", "\"text\"", "null", "true", "[{\"a\": 1}]",
      // A tensor entry that is not an object.
      R"({"t": 5})", R"({"t": [1, 2]})", R"({"t": null})", R"({"t": "F32"})",
      // Missing fields.
      R"({"t": {"shape": [4], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": [4]}})",
      R"({"t": {}})",
      // Wrong types.
      R"({"t": {"dtype": 7, "shape": [4], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": ["F32"], "shape": [4], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "f32", "shape": [4], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": 4, "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": ["4"], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": [4.0], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": [-4], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": [[4]], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 16]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": "0-16"}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16, 32]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [-16, 0]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0.0, 16.0]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 1e300]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 18446744073709551615]}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": {"begin": 0, "end": 16}}})",
      R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [[[[[[[[0]]]]]]], 16]}})",
  };
  for (const auto& h : headers) {
    INFO(h);
    write_raw(path, h, data);
    CHECK_THAT(input_error_of([&] { SafetensorsFile f(path); }), Contains(path));
  }
  // Offsets the wrong way round are named as such.
  write_raw(path, R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [16, 0]}})", data);
  CHECK_THAT(input_error_of([&] { SafetensorsFile f(path); }),
             Contains("tensor 't'") && Contains("[16, 0]") && Contains("begin <= end"));
  // Every entry that names a tensor is reported with it.
  write_raw(path, R"({"t": {"dtype": "F32", "shape": [4]}})", data);
  CHECK_THAT(input_error_of([&] { SafetensorsFile f(path); }),
             Contains("tensor 't'") && Contains("data_offsets"));
  // Deep nesting neither crashes the parser nor the error message.
  write_raw(path, "{\"t\": " + std::string(100000, '[') + std::string(100000, ']') + "}", data);
  CHECK_THAT(input_error_of([&] { SafetensorsFile f(path); }), Contains(path) && Contains("tensor 't'"));
  // The control: the same data with a good header reads.
  write_raw(path, R"({"t": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", data);
  CHECK(SafetensorsFile(path).read_f32("t", {4}) == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("write_safetensors rejects inconsistent tensors", "[safetensors]") {
  TempDir dir("writebad");
  const std::string path = dir.file("out.safetensors");
  CHECK_THAT(input_error_of([&] { write_safetensors(path, {{"w", {2, 3}, {1, 2, 3}}}, SafetensorsDtype::F32); }),
             Contains(path) && Contains("'w'") && Contains("6 elements"));
  CHECK_THAT(input_error_of([&] { write_safetensors(path, {{"w", {-1}, {}}}, SafetensorsDtype::F32); }),
             Contains("'w'"));
  CHECK_THAT(input_error_of([&] {
               write_safetensors(path, {{"w", {1}, {1}}, {"w", {1}, {2}}}, SafetensorsDtype::F16);
             }),
             Contains("'w'"));
}
