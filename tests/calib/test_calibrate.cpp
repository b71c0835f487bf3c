// The calibration: a quick run on a tiny hand-built model gives a complete,
// well-formed profile (every table positive, axes ascending, the expected
// growth with size), the raw Google Benchmark JSON beside it, and grids and
// option checks as calib/calibrate.h states them.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "calib/calibration_common.h"
#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "kernels/decoder/device_choice.h"
#include "sim/errors.h"
#include "sim/model_spec.h"
#include "support/test_support.h"

using namespace servesim;

namespace {

// Small enough that a quick calibration takes a few seconds: GQA (H = 4,
// Hkv = 2) and an untied head, as in the larger models.
ModelSpec tiny_spec() {
  return test::small_model("test-calib-tiny", 64, 160, 2, 4, 2, 16, 500, 512, "float32");
}

// One folder per process: ctest runs each test case as its own process, side
// by side.
// Removed when the process ends.
std::string scratch_dir() {
  static const test::TempDir dir("calibrate");  // removed when the process ends
  return dir.path().string();
}

CalibrationOptions tiny_options(const std::string& raw_path) {
  CalibrationOptions o;
  o.model = tiny_spec();
  o.quick = true;
  o.threads = 1;  // no OpenMP barriers: steady timings on a busy machine
  o.max_batched_tokens = 256;
  o.max_num_seqs = 32;
  o.stream_array_bytes = 8 << 20;
  o.gemm_ceiling_size = 256;
  o.min_time_s = 0.002;
  o.raw_benchmarks_path = raw_path;
  return o;
}

// One quick calibration shared by the checks below (it is the slow part).
struct QuickRun {
  std::string raw_path = scratch_dir() + "/tiny.benchmarks.json";
  CalibrationOptions options = tiny_options(raw_path);
  std::vector<std::string> progress;
  DeviceProfile profile;
  QuickRun() {
    std::filesystem::remove(raw_path);
    profile = calibrate(options, [this](const std::string& line) { progress.push_back(line); });
  }
};

const QuickRun& quick_run() {
  static QuickRun run;
  return run;
}

void check_axis(const std::vector<double>& x) {
  REQUIRE(!x.empty());
  for (size_t i = 0; i < x.size(); ++i) {
    CHECK(x[i] > 0);
    if (i > 0) CHECK(x[i] > x[i - 1]);
  }
}

void check_curve(const Curve& c, const char* name) {
  INFO(name);
  check_axis(c.x);
  REQUIRE(c.seconds.size() == c.x.size());
  for (double s : c.seconds) CHECK((std::isfinite(s) && s > 0));
}

void check_grid(const Grid2D& g, const char* name) {
  INFO(name);
  check_axis(g.x);
  check_axis(g.y);
  REQUIRE(g.seconds.size() == g.x.size());
  for (const auto& row : g.seconds) {
    REQUIRE(row.size() == g.y.size());
    for (double s : row) CHECK((std::isfinite(s) && s > 0));
  }
}

std::vector<double> as_doubles(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

}  // namespace

TEST_CASE("A quick calibration of a tiny model fills every table with positive times on its grids") {
  const QuickRun& run = quick_run();
  const DeviceProfile& p = run.profile;
  const CalibrationGrids grids = calibration_grids(run.options);

  CHECK(p.device_kind == "cpu");
  CHECK(p.threads == 1);
  CHECK(p.dtype == "fp32");
  CHECK(p.block_size == 16);
  CHECK(p.matches(run.options.model));
  check_curve(p.gemm_qkv, "gemm_qkv");
  check_curve(p.gemm_o, "gemm_o");
  check_curve(p.gemm_gate_up, "gemm_gate_up");
  check_curve(p.gemm_down, "gemm_down");
  check_curve(p.elementwise, "elementwise");
  check_curve(p.lm_head, "lm_head");
  check_curve(p.sampling, "sampling");
  check_grid(p.prefill_attention, "prefill_attention");
  check_grid(p.decode_attention, "decode_attention");
  CHECK((std::isfinite(p.iteration_overhead_s) && p.iteration_overhead_s >= 0));

  // The axes are the grids; the attention y axes hold cached tokens + 1.
  CHECK(p.gemm_qkv.x == as_doubles(grids.tokens));
  CHECK(p.elementwise.x == as_doubles(grids.elementwise_tokens));
  CHECK(p.lm_head.x == as_doubles(grids.lm_head_rows));
  CHECK(p.sampling.x == as_doubles(grids.sampling_rows));
  CHECK(p.prefill_attention.x == as_doubles(grids.prefill_query));
  REQUIRE(p.prefill_attention.y.size() == grids.prefill_cached.size());
  for (size_t j = 0; j < grids.prefill_cached.size(); ++j)
    CHECK(p.prefill_attention.y[j] == prefill_grid_y(double(grids.prefill_cached[j])));
  CHECK(p.prefill_attention.y.front() == 1.0);  // a first chunk: no cached tokens
  CHECK(p.decode_attention.x == as_doubles(grids.decode_batch));
  CHECK(p.decode_attention.y == as_doubles(grids.decode_context));

  // One progress line per family (after a setup line and before "done").
  int families = 0;
  for (const auto& line : run.progress) families += line.rfind("[", 0) == 0;
  CHECK(families == 12);
  // The "done" line names the longest phases (settings.phase_seconds).
  const auto done = std::find_if(run.progress.begin(), run.progress.end(),
                                 [](const std::string& line) { return line.rfind("done: ", 0) == 0; });
  REQUIRE(done != run.progress.end());
  CHECK(done->find("(longest: ") != std::string::npos);

  // The whole model's 1-token decode at the smallest context, timed before
  // each family and at the end, sets the iteration overhead.
  const nlohmann::json& overhead = p.metadata.at("iteration_overhead");
  const auto moments = overhead.at("moments_s").get<std::vector<double>>();
  CHECK(moments.size() == 13);
  for (double s : moments) CHECK(s > 0);
  CHECK(overhead.at("measured_s").get<double>() == calibration::median(moments));
  CHECK(p.iteration_overhead_s ==
        Approx(std::max(0.0, overhead.at("measured_s").get<double>() - overhead.at("predicted_kernels_s").get<double>())));
  CHECK(p.metadata.at("settings").at("moments") == 13);
  // The attention fits the profile is written with, which a profile model uses.
  REQUIRE(p.prefill_fit.has_value());
  REQUIRE(p.decode_fit.has_value());
  const ProfileModel model(p, run.options.model);
  CHECK(model.prefill_fit().coefficients == p.prefill_fit->coefficients);
  CHECK(model.decode_fit().coefficients == p.decode_fit->coefficients);
  // No host-drift machinery unless asked (calibrate --host-drift).
  CHECK(p.anchor.is_null());
  CHECK(p.placement_ratios.is_null());
  CHECK(!p.metadata.contains("anchor_probes"));
}

TEST_CASE("Calibrated times grow with the work: GEMMs with tokens, decode attention with context") {
  const DeviceProfile& p = quick_run().profile;
  for (const Curve* c : {&p.gemm_qkv, &p.gemm_o, &p.gemm_gate_up, &p.gemm_down, &p.lm_head}) {
    // 256 tokens (or 32 rows) against 1: many times the FLOPs of the weights' one pass.
    CHECK(c->seconds.back() > c->seconds.front());
  }
  const Grid2D& d = p.decode_attention;
  for (size_t i = 0; i < d.x.size(); ++i) {
    INFO("batch " << d.x[i]);
    CHECK(d.seconds[i].back() > d.seconds[i].front());  // context 512 against 16
  }
  // A chunk of 128 queries after 511 cached against one of 16 with none.
  CHECK(p.prefill_attention.seconds.back().back() > p.prefill_attention.seconds.front().front());
}

TEST_CASE("The calibration measures the ceilings and records its provenance") {
  const QuickRun& run = quick_run();
  const DeviceProfile& p = run.profile;
  CHECK(p.stream_copy_bytes_per_s > 0);
  CHECK(p.stream_triad_bytes_per_s > 0);
  CHECK(p.gemm_flops_per_s > 0);
  const nlohmann::json& m = p.metadata;
  for (const char* key : {"date", "commit", "compiler", "libraries", "host", "device", "settings", "conventions"})
    CHECK(m.contains(key));
  CHECK(m["settings"]["mode"] == "quick");
  CHECK(m["settings"]["threads"] == 1);
  CHECK(m["settings"]["stream_array_bytes"] == 8 << 20);
  CHECK(m["date"].get<std::string>().back() == 'Z');
  CHECK(m["libraries"].contains("eigen"));
  CHECK(m["libraries"].contains("google_benchmark"));
}

TEST_CASE("A calibrated profile survives a save and load unchanged") {
  const DeviceProfile& p = quick_run().profile;
  const std::string path = scratch_dir() + "/tiny.profile.json";
  p.save(path);
  const DeviceProfile back = DeviceProfile::load(path);
  CHECK(back.to_json() == p.to_json());
  CHECK(back.raw_benchmarks_file == "tiny.benchmarks.json");
}

TEST_CASE("The raw Google Benchmark JSON is kept and names every benchmark") {
  const QuickRun& run = quick_run();
  REQUIRE(std::filesystem::exists(run.raw_path));
  std::ifstream in(run.raw_path);
  const nlohmann::json raw = nlohmann::json::parse(in);  // throws if malformed
  REQUIRE(raw.contains("context"));
  REQUIRE(raw["benchmarks"].is_array());
  std::vector<std::string> names;
  for (const auto& b : raw["benchmarks"]) names.push_back(b["name"].get<std::string>());
  auto has = [&](const std::string& prefix) {
    for (const auto& n : names)
      if (n.rfind(prefix, 0) == 0) return true;
    return false;
  };
  for (const char* expected :
       {"stream_copy/", "stream_triad/", "gemm_peak/n:256/", "gemm_qkv/M:1/", "gemm_o/M:256/",
        "gemm_gate_up/M:16/", "gemm_down/M:64/", "elementwise/M:4/", "prefill_attention/q:16/c:0/",
        "prefill_attention/q:128/c:511/", "decode_attention/b:1/L:16/", "decode_attention/b:32/L:512/",
        "lm_head/S:32/", "sampling/S:8/", "iteration/decode/b:1/L:16/"}) {
    INFO(expected);
    CHECK(has(expected));
  }
  // Each benchmark's repetitions and their median aggregate are there.
  int medians = 0;
  for (const auto& b : raw["benchmarks"]) medians += b.value("aggregate_name", "") == "median";
  CHECK(medians == int(run.profile.metadata["settings"]["benchmarks"].get<int>()));
}

TEST_CASE("Calibration grids follow the documented rules") {
  CalibrationOptions o;
  o.model = resolve_model("small-110m");  // max_position_embeddings 1024
  SECTION("full: every GEMM token and LM-head row count to 64 (the CPU's matmul changes kernel there)") {
    const CalibrationGrids g = calibration_grids(o);
    std::vector<int64_t> dense;
    for (int64_t m = 1; m <= 64; ++m) dense.push_back(m);
    std::vector<int64_t> tokens = dense, rows = dense;
    tokens.insert(tokens.end(), {128, 256, 512, 1024, 2048});
    rows.insert(rows.end(), {128, 256});
    CHECK(g.tokens == tokens);
    CHECK(g.prefill_query == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048});
    CHECK(g.prefill_cached == std::vector<int64_t>{0, 15, 31, 63, 127, 255, 511, 1023});
    CHECK(g.decode_batch == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64});
    CHECK(g.decode_context == std::vector<int64_t>{16, 32, 64, 128, 256, 512, 1024});
    CHECK(g.lm_head_rows == rows);
    // Near-linear tables: powers of two and 1.5x them, then doubling.
    CHECK(g.elementwise_tokens ==
          std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256, 512, 1024, 2048});
    CHECK(g.sampling_rows == std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256});
  }
  SECTION("full, small limits: the dense start stops at the limit") {
    o.max_batched_tokens = 40;
    o.max_num_seqs = 100;
    const CalibrationGrids g = calibration_grids(o);
    CHECK(g.tokens.size() == 40);
    CHECK(g.tokens.back() == 40);
    CHECK(g.lm_head_rows.size() == 40);
    CHECK(g.elementwise_tokens == std::vector<int64_t>{1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40});
    CHECK(g.sampling_rows == g.elementwise_tokens);
    o.max_batched_tokens = 100;  // dense to 64, then the limit
    const CalibrationGrids h = calibration_grids(o);
    CHECK(h.tokens.size() == 65);
    CHECK(h.tokens[63] == 64);
    CHECK(h.tokens.back() == 100);
    CHECK(h.lm_head_rows.back() == 100);
    CHECK(h.sampling_rows.back() == 100);
    CHECK(h.elementwise_tokens.back() == 100);
  }
  SECTION("quick") {
    o.quick = true;
    const CalibrationGrids g = calibration_grids(o);
    // Every M a decode step of up to 32 sequences runs (the CPU matmul's
    // costs between them are no power law), then sparse.
    std::vector<int64_t> dense(32);
    std::iota(dense.begin(), dense.end(), int64_t{1});
    auto with = [&](std::initializer_list<int64_t> more) {
      std::vector<int64_t> v = dense;
      v.insert(v.end(), more);
      return v;
    };
    CHECK(g.tokens == with({64, 256, 2048}));
    CHECK(g.prefill_query == std::vector<int64_t>{16, 128, 512});
    CHECK(g.prefill_cached == std::vector<int64_t>{0, 255, 1023});
    CHECK(g.decode_batch == std::vector<int64_t>{1, 8, 32});
    CHECK(g.decode_context == std::vector<int64_t>{16, 128, 1024});
    CHECK(g.lm_head_rows == with({64, 256}));
    CHECK(g.sampling_rows == std::vector<int64_t>{1, 2, 4, 8, 16, 64, 256});
    CHECK(g.elementwise_tokens == std::vector<int64_t>{1, 2, 4, 8, 16, 64, 256, 2048});
    // The decode-step factor's batch sizes are table points: g(B) corrects
    // the tables where they were measured, not where they interpolate.
    for (int64_t b : {1, 2, 4, 8, 16, 32})
      CHECK(std::find(g.tokens.begin(), g.tokens.end(), b) != g.tokens.end());
  }
  SECTION("small limits cap every axis and keep it ascending") {
    o.quick = true;
    o.max_batched_tokens = 100;
    o.max_context = 10;
    o.max_num_seqs = 5;
    const CalibrationGrids g = calibration_grids(o);
    CHECK(g.tokens.size() == 34);  // 1 .. 32, 64, 100
    CHECK(g.tokens[31] == 32);
    CHECK(g.tokens.back() == 100);
    CHECK(g.elementwise_tokens == std::vector<int64_t>{1, 2, 4, 8, 16, 64, 100});
    CHECK(g.prefill_query == std::vector<int64_t>{16, 100});
    CHECK(g.prefill_cached == std::vector<int64_t>{0, 9});
    CHECK(g.decode_batch == std::vector<int64_t>{1, 5});
    CHECK(g.decode_context == std::vector<int64_t>{10});
    CHECK(g.sampling_rows == std::vector<int64_t>{1, 2, 4, 5});
    CHECK(g.lm_head_rows == std::vector<int64_t>{1, 2, 3, 4, 5});
  }
  SECTION("the longest decode context keeps the largest cell's KV within 2 GiB") {
    o.model = resolve_model("llama-3.1-8b");  // 8 KiB of K and V per token and layer
    const CalibrationGrids g = calibration_grids(o);
    CHECK(g.decode_context.back() == 4096);  // 2 GiB / (64 sequences x 8 KiB)
    CHECK(g.prefill_cached.back() == 131071);
  }
}

TEST_CASE("Calibration grids on cuda: the decode batch reaches max_num_seqs, bf16 KV, at most 16384 tokens") {
  CalibrationOptions o;
  o.model = resolve_model("small-110m");  // max_position_embeddings 1024
  o.device = "cuda";
  SECTION("full") {
    const CalibrationGrids g = calibration_grids(o);
    // The GEMMs and the LM head at the edges of cuBLASLt's algorithm buckets
    // (kernels/decoder/gemm_buckets.h): every top to 256, then each wider
    // bucket's bottom and top.
    std::vector<int64_t> edges_to_256{1, 2, 4};
    for (int64_t m = 8; m <= 256; m += 8) edges_to_256.push_back(m);
    std::vector<int64_t> tokens = edges_to_256;
    for (int64_t m : {257, 320, 321, 384, 385, 448, 449, 512, 513, 640, 641, 768, 769, 896, 897, 1024, 1025, 1280,
                      1281, 1536, 1537, 1792, 1793, 2048})
      tokens.push_back(m);
    CHECK(g.tokens == tokens);
    CHECK(g.lm_head_rows == edges_to_256);
    const std::vector<int64_t> doubling_to_2048{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048};
    CHECK(g.prefill_query == doubling_to_2048);
    CHECK(g.elementwise_tokens == doubling_to_2048);
    CHECK(g.prefill_cached == std::vector<int64_t>{0, 15, 31, 63, 127, 255, 511, 1023});
    CHECK(g.decode_batch == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256});
    CHECK(g.decode_context == std::vector<int64_t>{16, 32, 64, 128, 256, 512, 1024});
    CHECK(g.sampling_rows == std::vector<int64_t>{1, 2, 4, 8, 16, 32, 64, 128, 256});
  }
  SECTION("full, a token budget inside a bucket: the budget is the bucket's last edge") {
    o.max_batched_tokens = 300;
    o.max_num_seqs = 20;
    const CalibrationGrids g = calibration_grids(o);
    CHECK(std::vector<int64_t>(g.tokens.end() - 4, g.tokens.end()) == std::vector<int64_t>{248, 256, 257, 300});
    CHECK(g.lm_head_rows == std::vector<int64_t>{1, 2, 4, 8, 16, 20});
    for (int64_t m : g.tokens) CHECK(m <= 300);
  }
  SECTION("quick, on another ordinal") {
    o.device = "cuda:3";
    o.quick = true;
    const CalibrationGrids g = calibration_grids(o);
    // Sparse to 256, then every algorithm bucket's edges (the buckets are wide there).
    CHECK(g.tokens == std::vector<int64_t>{1,    4,    16,   64,   256,  257,  320,  321,  384,  385,
                                           448,  449,  512,  513,  640,  641,  768,  769,  896,  897,
                                           1024, 1025, 1280, 1281, 1536, 1537, 1792, 1793, 2048});
    CHECK(g.elementwise_tokens == std::vector<int64_t>{1, 4, 16, 64, 256, 2048});
    CHECK(g.lm_head_rows == std::vector<int64_t>{1, 8, 64, 256});
    CHECK(g.sampling_rows == g.lm_head_rows);
    CHECK(g.decode_batch == std::vector<int64_t>{1, 8, 32, 256});
    CHECK(g.decode_context == std::vector<int64_t>{16, 128, 1024});
  }
  SECTION("a small max_num_seqs caps the decode batch axis") {
    o.quick = true;
    o.max_num_seqs = 20;
    CHECK(calibration_grids(o).decode_batch == std::vector<int64_t>{1, 8, 20});
    o.quick = false;
    CHECK(calibration_grids(o).decode_batch == std::vector<int64_t>{1, 2, 4, 8, 16, 20});
  }
  SECTION("the longest decode context keeps the largest cell's bf16 KV within 8 GiB") {
    o.model = resolve_model("llama-3.1-8b");  // 4 KiB of bf16 K and V per token and layer
    CHECK(calibration_grids(o).decode_context.back() == 8192);  // 8 GiB / (256 sequences x 4 KiB)
    o.quick = true;
    CHECK(calibration_grids(o).decode_context.back() == 8192);
    o.device = "cpu";  // fp32 and 2 GiB: 2 GiB / (32 sequences x 8 KiB)
    CHECK(calibration_grids(o).decode_context.back() == 8192);
    o.quick = false;  // 64 sequences
    CHECK(calibration_grids(o).decode_context.back() == 4096);
  }
  SECTION("up to 16384 batched tokens") {
    o.max_batched_tokens = kCudaMaxBatchedTokens;
    CHECK(calibration_grids(o).tokens.back() == 16384);
    o.max_batched_tokens = kCudaMaxBatchedTokens + 1;
    CHECK_THROWS_WITH(calibration_grids(o), Catch::Contains("--max-num-batched-tokens") &&
                                                Catch::Contains("16384") && Catch::Contains("cuda"));
    o.device = "cpu";  // the CPU allows more
    CHECK(calibration_grids(o).tokens.back() == kCudaMaxBatchedTokens + 1);
  }
}

TEST_CASE("Calibrating on cuda without a usable GPU is refused, naming the device and why") {
  CalibrationOptions o = tiny_options("");
  o.device = "cuda";
  const std::string why = cuda_device_unavailable(0);
  if (why.empty()) {
    WARN("a usable GPU is visible: the calibration itself is tested by the [cuda] tests");
    return;
  }
  CHECK_THROWS_AS(calibrate(o), InputError);
  CHECK_THROWS_WITH(calibrate(o), Catch::Contains("--device cuda:0") && Catch::Contains(why));
  // Bad options are reported first, naming their flag.
  o.max_batched_tokens = 0;
  CHECK_THROWS_WITH(calibrate(o), Catch::Contains("--max-num-batched-tokens"));
}

TEST_CASE("Calibration refuses options out of range, naming the flag") {
  CalibrationOptions o;
  o.model = tiny_spec();
  auto refuses = [&](const std::string& needle) {
    INFO(needle);
    CHECK_THROWS_WITH(calibration_grids(o), Catch::Contains(needle));
    CHECK_THROWS_AS(calibrate(o), InputError);
  };
  SECTION("device") {
    for (const char* device : {"gpu", "cuda:x", "cuda:-1", "cuda0", ""}) {
      o.device = device;
      refuses("--device");
      CHECK_THROWS_WITH(calibration_grids(o), Catch::Contains(fmt::format("'{}'", device)));
    }
  }
  SECTION("tokens") {
    o.max_batched_tokens = 0;
    refuses("--max-num-batched-tokens");
  }
  SECTION("block size") {
    o.block_size = 0;
    refuses("--block-size");
  }
  SECTION("threads") {
    o.threads = -1;
    refuses("--threads");
  }
  SECTION("context") {
    o.max_context = -5;
    refuses("--max-context");
  }
  SECTION("rows") {
    o.max_num_seqs = 0;
    refuses("--max-num-seqs");
  }
  SECTION("sampling") {
    o.sampling.top_p = 0;
    refuses("--top-p");
  }
  SECTION("an unwritable raw JSON path") {
    o.raw_benchmarks_path = scratch_dir() + "/no-such-dir/x.json";
    CHECK_THROWS_WITH(calibrate(o), Catch::Contains("no-such-dir"));
  }
}

TEST_CASE("A second calibration in the same process works, without keeping the raw JSON") {
  quick_run();  // the first one
  CalibrationOptions o = tiny_options("");
  o.threads = 2;
  o.max_batched_tokens = 32;
  o.max_context = 64;
  o.max_num_seqs = 4;
  const DeviceProfile p = calibrate(o);
  CHECK(p.threads == 2);
  CHECK(p.raw_benchmarks_file.empty());
  CHECK(p.gemm_qkv.x.back() == 32);
  CHECK(p.decode_attention.y.back() == 64);
  CHECK(p.to_json() == DeviceProfile::from_json(p.to_json(), "in memory").to_json());
}

TEST_CASE("A full calibration times the whole model at its moments, and the hooks choose the moments kept") {
  CalibrationOptions o = tiny_options("");
  o.quick = false;
  o.max_batched_tokens = 32;  // whole-model prefill lengths: 32 only
  o.max_context = 64;
  o.max_num_seqs = 4;
  o.repetitions = 3;
  // Hooks as calibrate --host-drift installs them: called at every moment,
  // asked which moments to keep (here every fourth), and at the end.
  CalibrationHooks hooks;
  size_t moments_seen = 0, asked = 0;
  bool finished_complete = false;
  hooks.at_moment = [&] { ++moments_seen; };
  hooks.keeps_moment = [&](size_t m) {
    ++asked;
    return m % 4 == 0;
  };
  hooks.finish = [&](DeviceProfile& profile) {
    finished_complete = !profile.gemm_qkv.x.empty() && !profile.gemm_factor.x.empty();
    profile.metadata["by_the_hook"] = true;
  };
  const DeviceProfile p = calibrate(o, {}, hooks);
  CHECK(moments_seen == 13);  // before each of the 12 families and once more at the end
  CHECK(asked > 0);
  CHECK(finished_complete);
  CHECK(p.metadata.at("by_the_hook") == true);
  // v[i] timed at moment moments[i]: those of the moments kept.
  auto kept = [](const std::vector<double>& v, const std::vector<size_t>& moments) {
    REQUIRE(v.size() == moments.size());
    std::vector<double> out;
    for (size_t i = 0; i < v.size(); ++i)
      if (moments[i] % 4 == 0) out.push_back(v[i]);
    return out;
  };
  const std::vector<size_t> every = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  // The 1-token decode at every moment, the prefills and steps at every other.
  const std::vector<size_t> in_situ = {0, 2, 4, 6, 8, 10, 12};
  // The iteration overhead from the kept moments' decodes.
  const nlohmann::json& overhead = p.metadata.at("iteration_overhead");
  const auto decodes = overhead.at("moments_s").get<std::vector<double>>();
  REQUIRE(decodes.size() == 13);
  CHECK(overhead.at("measured_s").get<double>() == calibration::median(kept(decodes, every)));
  const nlohmann::json& situ = p.metadata.at("in_situ_prefills");
  REQUIRE(situ.at("tokens") == nlohmann::json({32}));
  CHECK(situ.at("moments").get<std::vector<size_t>>() == in_situ);
  const auto seconds = situ.at("seconds").at(0).get<std::vector<double>>();
  REQUIRE(seconds.size() == in_situ.size());
  for (double s : seconds) CHECK(s > 0);
  // The factor is the whole-model rule applied to the kept moments' median.
  DeviceProfile expected = p;
  calibration::set_gemm_factor(expected, {32}, {calibration::median(kept(seconds, in_situ))}, p.block_size, {});
  REQUIRE(p.gemm_factor.x == std::vector<double>{32});
  CHECK(p.gemm_factor.factor == expected.gemm_factor.factor);

  // The decode steps too: 1, 2, 3 and 4 sequences (max_num_seqs 4) at each of
  // the 7 in-situ moments; the factor is the median over the kept ones of
  // measured / predicted, each finite and positive.
  const nlohmann::json& steps = p.metadata.at("decode_in_situ");
  CHECK(steps.at("sequences") == nlohmann::json({1, 2, 3, 4}));
  // Steps 5-8 after the in-situ prefills: the steady ones, not the first.
  CHECK(steps.at("warm_up_steps") == 4);
  CHECK(steps.at("timed_steps") == 4);
  CHECK(steps.at("moments").get<std::vector<size_t>>() == in_situ);
  REQUIRE(steps.at("seconds_median").size() == in_situ.size());
  for (const auto& moment : steps.at("seconds_median")) {
    REQUIRE(moment.size() == 4);
    for (double s : moment.get<std::vector<double>>()) CHECK(s > 0);
  }
  // How far each batch size's moments spread: the slowest over the fastest.
  const auto spread = steps.at("moment_spread").get<std::vector<double>>();
  REQUIRE(spread.size() == 4);
  for (double x : spread) CHECK(x >= 1.0);
  REQUIRE(p.decode_step_factor.x == std::vector<double>{1, 2, 3, 4});
  for (double f : p.decode_step_factor.factor) CHECK((std::isfinite(f) && f > 0.1 && f < 10));

  // Where the wall time went: each phase by name, none negative, together
  // most of the wall time (the rest: options, grids, the provenance).
  const nlohmann::json& phases = p.metadata.at("settings").at("phase_seconds");
  const std::vector<std::string> names = {
      "ceilings",          "setup",           "gemm_qkv",     "gemm_o",           "gemm_gate_up",
      "gemm_down",         "elementwise",     "prefill_attention", "decode_attention", "lm_head",
      "sampling",          "iteration_overhead", "whole_model", "whole_model_moments", "whole_model_fits",
      "host_drift_finish"};
  CHECK(phases.size() == names.size());
  double sum = 0;
  for (const std::string& name : names) {
    INFO(name);
    REQUIRE(phases.contains(name));
    CHECK(phases.at(name).get<double>() >= 0);
    sum += phases.at(name).get<double>();
  }
  CHECK(phases.at("whole_model_moments").get<double>() > 0);  // 13 moments of whole-model decodes
  const double wall = p.metadata.at("settings").at("wall_time_s").get<double>();
  CHECK(sum <= wall);
  CHECK(sum >= 0.5 * wall);
}

TEST_CASE("Calibration grids cover a short new tail over a long cached context (prefix-cache hits)", "[prefix]") {
  // A hit leaves q new tokens over c cached ones with q << c: the prefill
  // attention table must hold such a cell at the longest context, for every
  // device and grid size, so the profile model interpolates there.
  CalibrationOptions o;
  o.model = resolve_model("small-110m");  // max_position_embeddings 1024
  for (const char* device : {"cpu", "cuda"})
    for (bool quick : {false, true}) {
      INFO(device << (quick ? " quick" : " full"));
      o.device = device;
      o.quick = quick;
      const CalibrationGrids g = calibration_grids(o);
      CHECK(g.prefill_query.front() <= 16);
      CHECK(g.prefill_cached.back() == 1023);
      CHECK(double(g.prefill_cached.back()) / double(g.prefill_query.front()) >= 60);
    }
}
