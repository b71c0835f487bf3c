// The CUDA calibration (calib/calibrate_cuda.cpp): a quick run on a small
// model gives a complete profile (every table positive on its grid, growing
// with the work, bf16 on "cuda"), the raw timings beside it, a profile the
// ProfileModel loads and that validates a real CUDA run; the timer's rules;
// refusals (memory, device ordinal). Tagged [cuda]: skipped without a GPU.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "calib/cuda_timer.h"
#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "validate/validation.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/decoder/decoder_model.h"
#include "sim/errors.h"
#include "sim/model_spec.h"
#include "support/test_support.h"
#include "sim/workload.h"

using namespace servesim;

namespace {

// Two layers of a mid-size GQA model with q/k/v biases: big enough that
// the tables grow visibly with the work on a GPU, small enough to calibrate
// in seconds.
ModelSpec calib_spec() {
  ModelSpec m = resolve_model("tiny-15m");
  m.name = "test-cuda-calib";
  m.architecture = "qwen2";
  m.attention_bias = true;
  m.tie_word_embeddings = false;
  m.hidden_size = 1024;
  m.intermediate_size = 4096;
  m.num_hidden_layers = 2;
  m.num_attention_heads = 8;
  m.num_key_value_heads = 4;
  m.head_dim = 128;
  m.vocab_size = 32000;
  m.max_position_embeddings = 2048;
  return m;
}

std::string scratch_dir() {
  static const test::TempDir dir("cuda_calibration");  // removed when the process ends
  return dir.path().string();
}

CalibrationOptions quick_options(const std::string& raw_path) {
  CalibrationOptions o;
  o.device = "cuda";
  o.model = calib_spec();
  o.quick = true;
  o.max_num_seqs = 64;
  o.gemm_ceiling_size = 2048;
  o.raw_benchmarks_path = raw_path;
  return o;
}

// One quick calibration shared by the checks below.
struct QuickRun {
  std::string raw_path = scratch_dir() + "/cuda.benchmarks.json";
  CalibrationOptions options = quick_options(raw_path);
  std::vector<std::string> progress;
  DeviceProfile profile;
  QuickRun() {
    profile = calibrate(options, [this](const std::string& line) { progress.push_back(line); });
  }
};

const QuickRun& quick_run() {
  static QuickRun run;
  return run;
}

std::vector<double> as_doubles(const std::vector<int64_t>& v) { return {v.begin(), v.end()}; }

// Positive, finite, and no point below half its predecessor: timings of
// more work may tie within noise on a fast GPU, but never halve.
void check_monotone_ish(const std::vector<double>& seconds, const std::string& what) {
  INFO(what);
  REQUIRE(!seconds.empty());
  for (size_t i = 0; i < seconds.size(); ++i) {
    CHECK((std::isfinite(seconds[i]) && seconds[i] > 0));
    if (i > 0) CHECK(seconds[i] >= 0.5 * seconds[i - 1]);
  }
}

void check_grid(const Grid2D& g, const std::string& what) {
  REQUIRE(g.seconds.size() == g.x.size());
  for (size_t i = 0; i < g.x.size(); ++i) {
    REQUIRE(g.seconds[i].size() == g.y.size());
    check_monotone_ish(g.seconds[i], what + " row " + std::to_string(i));
  }
  for (size_t j = 0; j < g.y.size(); ++j) {
    std::vector<double> column;
    for (const auto& row : g.seconds) column.push_back(row[j]);
    check_monotone_ish(column, what + " column " + std::to_string(j));
  }
}

}  // namespace

TEST_CASE("cuda calibration: a quick run fills every table on its grid, bf16 on cuda", "[cuda]") {
  const QuickRun& run = quick_run();
  const DeviceProfile& p = run.profile;
  const CalibrationGrids grids = calibration_grids(run.options);

  CHECK(p.device_kind == "cuda");
  CHECK(p.dtype == "bf16");
  CHECK(p.threads == 0);
  CHECK(p.device_description.rfind("cuda:0 ", 0) == 0);
  CHECK(p.matches(run.options.model));
  CHECK(p.anchor.is_null());

  CHECK(p.gemm_qkv.x == as_doubles(grids.tokens));
  CHECK(p.elementwise.x == as_doubles(grids.elementwise_tokens));
  CHECK(p.lm_head.x == as_doubles(grids.lm_head_rows));
  CHECK(p.sampling.x == as_doubles(grids.sampling_rows));
  CHECK(p.prefill_attention.x == as_doubles(grids.prefill_query));
  CHECK(p.prefill_attention.y.front() == 1.0);
  CHECK(p.decode_attention.x == as_doubles(grids.decode_batch));
  CHECK(p.decode_attention.y == as_doubles(grids.decode_context));
  CHECK(grids.decode_batch.back() == 64);  // the GPU's decode axis reaches max_num_seqs

  for (const auto& [curve, name] : {std::pair{&p.gemm_qkv, "gemm_qkv"}, {&p.gemm_o, "gemm_o"},
                                    {&p.gemm_gate_up, "gemm_gate_up"}, {&p.gemm_down, "gemm_down"},
                                    {&p.elementwise, "elementwise"}, {&p.lm_head, "lm_head"},
                                    {&p.sampling, "sampling"}}) {
    REQUIRE(curve->seconds.size() == curve->x.size());
    check_monotone_ish(curve->seconds, name);
  }
  check_grid(p.prefill_attention, "prefill_attention");
  check_grid(p.decode_attention, "decode_attention");
  CHECK((std::isfinite(p.iteration_overhead_s) && p.iteration_overhead_s >= 0));
  CHECK(p.gemm_factor.x == std::vector<double>{32, 128});
  for (double f : p.gemm_factor.factor) CHECK((std::isfinite(f) && f >= 0.1));
  // Decode steps at every bucket the decoder pads to, up to max_num_seqs
  // (64), and the rule recorded; a graph replay is neither ten times faster
  // nor slower than its kernels timed alone.
  CHECK(p.decode_step_factor.x == std::vector<double>{1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64});
  CHECK(p.decode_padding.sizes == std::vector<int64_t>{1, 2, 4});
  CHECK(p.decode_padding.multiple == 8);
  CHECK(p.decode_padding.max_batch == CudaDecoderOptions{}.max_graph_batch);
  CHECK(p.attention_launches == DeviceProfile::AttentionLaunches::TwoLaunches);  // Backend::attention's
  for (double f : p.decode_step_factor.factor) CHECK((std::isfinite(f) && f > 0.1 && f < 10));

  int families = 0;
  for (const auto& line : run.progress) families += line.rfind("[", 0) == 0;
  CHECK(families == 11);
  CHECK(run.progress.back().rfind("done: ", 0) == 0);
}

TEST_CASE("cuda calibration: times grow with the work", "[cuda]") {
  const DeviceProfile& p = quick_run().profile;
  // 2048 tokens against 1: the weights are read once either way, so the
  // time per token falls by far more than 10x (on an H200 this model's
  // largest GEMM, 17 GFLOP, takes about as long as launching a 1-token one).
  for (const Curve* c : {&p.gemm_qkv, &p.gemm_o, &p.gemm_gate_up, &p.gemm_down}) {
    CHECK(c->seconds.back() >= c->seconds.front());
    CHECK(c->seconds.back() / c->x.back() < 0.1 * c->seconds.front() / c->x.front());
  }
  // 64 sequences of context 2048 (256 MB of K and V) against context 16.
  const Grid2D& d = p.decode_attention;
  CHECK(d.seconds.back().back() > 2 * d.seconds.back().front());
  // A 512-token chunk after 2047 cached against 16 tokens with none.
  const Grid2D& a = p.prefill_attention;
  CHECK(a.seconds.back().back() > 2 * a.seconds.front().front());
}

TEST_CASE("cuda calibration: ceilings and provenance", "[cuda]") {
  const DeviceProfile& p = quick_run().profile;
  // Loose floors any sm_90 GPU clears by far (H100: ~3 TB/s, ~700 TFLOP/s).
  CHECK(p.stream_copy_bytes_per_s > 100e9);
  CHECK(p.stream_triad_bytes_per_s > 100e9);
  CHECK(p.gemm_flops_per_s > 10e12);
  const nlohmann::json& m = p.metadata;
  for (const char* key : {"date", "commit", "compiler", "libraries", "host", "device", "gpu", "settings",
                          "conventions", "iteration_overhead"})
    CHECK(m.contains(key));
  CHECK(m["settings"]["mode"] == "quick");
  CHECK(m["settings"]["repetitions"] == 3);
  CHECK(m["settings"]["gemm_ceiling"] == "cuBLAS bf16 2048^3");
  CHECK(m["settings"]["l2_flush_bytes"].get<double>() >= 2.0 * m["gpu"]["l2_cache_bytes"].get<double>());
  CHECK(m["iteration_overhead"]["measured_s"].get<double>() > 0);
  CHECK(m["libraries"].contains("cuda_runtime"));
}

TEST_CASE("cuda calibration: the raw timings keep every repetition of every benchmark", "[cuda]") {
  const QuickRun& run = quick_run();
  REQUIRE(run.profile.raw_benchmarks_file == "cuda.benchmarks.json");
  std::ifstream in(run.raw_path);
  REQUIRE(in);
  const nlohmann::json raw = nlohmann::json::parse(in);
  REQUIRE(raw.contains("context"));
  REQUIRE(raw["benchmarks"].is_array());
  std::set<std::string> names;
  for (const auto& b : raw["benchmarks"]) {
    const std::string name = b["name"].get<std::string>();
    INFO(name);
    names.insert(name);
    REQUIRE(b["repetitions_s"].size() == 3);
    for (const auto& s : b["repetitions_s"]) CHECK(s.get<double>() > 0);
    CHECK(b["launches_per_repetition"].get<int64_t>() >= 1);
    const std::string method = b["method"].get<std::string>();
    const bool cold = name.rfind("gemm_q", 0) == 0 || name.rfind("gemm_o", 0) == 0 || name.rfind("gemm_g", 0) == 0 ||
                      name.rfind("gemm_d", 0) == 0 || name.rfind("prefill", 0) == 0 ||
                      name.rfind("decode", 0) == 0 || name.rfind("lm_head", 0) == 0;
    if (cold) CHECK(method == "cold");
    if (name.rfind("elementwise", 0) == 0 || name.rfind("sampling", 0) == 0) CHECK(method == "warm (graph)");
  }
  CHECK(int(names.size()) == run.profile.metadata["settings"]["benchmarks"].get<int>());
  for (const char* expected : {"gemm_peak/n:2048", "gemm_qkv/M:1", "gemm_o/M:2048", "gemm_gate_up/M:16",
                               "gemm_down/M:64", "elementwise/M:4", "prefill_attention/q:16/c:0",
                               "prefill_attention/q:512/c:2047", "decode_attention/b:1/L:16",
                               "decode_attention/b:64/L:2048", "lm_head/S:64", "sampling/S:8"}) {
    INFO(expected);
    CHECK(names.count(expected) == 1);
  }
}

TEST_CASE("cuda calibration: the profile loads into the ProfileModel and survives a save and load", "[cuda]") {
  const DeviceProfile& p = quick_run().profile;
  const std::string path = scratch_dir() + "/cuda.profile.json";
  p.save(path);
  const DeviceProfile back = DeviceProfile::load(path);
  CHECK(back.to_json() == p.to_json());
  const ProfileModel model(back, calib_spec(), path);
  CHECK(model.op_seconds(ProfileOp::GemmQkv, 100) > 0);
  CHECK(model.decode_attention_seconds(4, 4 * 300.0) > 0);
  CHECK(model.prefill_attention_seconds(300, 100) > 0);
  CHECK(model.describe()["device"]["kind"] == "cuda");
}

TEST_CASE("cuda calibration: a CUDA run validates against the profile, without anchor probes", "[cuda]") {
  const DeviceProfile& profile = quick_run().profile;
  EngineSetup setup;
  setup.device = "cuda";
  setup.model = calib_spec();
  setup.kv_cache_bytes = 64.0 * (1 << 20);
  setup.workload.arrival = ArrivalProcess::Poisson;
  setup.workload.rate = 50;
  setup.workload.num_requests = 6;
  setup.workload.prompt_len = "uniform:16:200";
  setup.workload.output_len = "uniform:8:32";
  const Workload workload = make_workload(setup.workload);
  const ValidationResult v = run_validation(setup, workload, profile, "quick calibration");
  REQUIRE(v.measured.summary.completed == 6);
  for (size_t k = 0; k < v.iterations.size(); ++k) {
    CHECK(v.iterations[k].measured_s > 0);
    CHECK((std::isfinite(v.predicted_iteration_s[k]) && v.predicted_iteration_s[k] > 0));
  }
  CHECK(v.host_drift["mode"] == "off");
  for (const std::string& w : v.warnings) CHECK(w.find("measured on device") == std::string::npos);
  // Loose: a broken profile is off by far more.
  CHECK(v.iteration.all.mape < 1.0);
}

TEST_CASE("cuda calibration: refuses a model that does not fit and an ordinal that is not there", "[cuda]") {
  CalibrationOptions o = quick_options("");
  o.model = resolve_model("llama-3.1-70b");
  o.model.num_hidden_layers = 400;  // ~1.1 TB of bf16 weights
  CHECK_THROWS_AS(calibrate(o), InputError);
  CHECK_THROWS_WITH(calibrate(o), Catch::Contains("bf16 weights"));
  o = quick_options("");
  o.device = "cuda:99";
  CHECK_THROWS_WITH(calibrate(o), Catch::Contains("--device cuda:99") && Catch::Contains("out of range"));
}

TEST_CASE("cuda timer: cold and warm timings keep their repetitions and are positive", "[cuda]") {
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  {
    cuda_calib::TimerSettings settings;
    settings.repetitions = 4;
    settings.min_repetition_s = 0.0005;
    cuda_calib::Timer timer(stream, size_t(8) << 20, settings);
    CHECK(timer.flush_bytes() == size_t(16) << 20);
    cuda::DeviceBuffer<float> a(size_t(1) << 22), b(size_t(1) << 22);
    auto copy = [&] {
      CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), a.bytes(), cudaMemcpyDeviceToDevice, stream));
    };
    const double cold = timer.cold("copy/cold", copy, 0, 2.0 * double(a.bytes()));
    const double warm = timer.warm("copy/warm", copy, 0, 2.0 * double(a.bytes()));
    const double eager = timer.warm("copy/eager", copy, 0, 0, cuda_calib::Timer::Graph::No);
    const double host = timer.host("sync", [&] { CUDA_CHECK(cudaStreamSynchronize(stream)); });
    for (double s : {cold, warm, eager, host}) CHECK((std::isfinite(s) && s > 0));
    REQUIRE(timer.measurements().size() == 4);
    for (const auto& m : timer.measurements()) {
      INFO(m.name);
      CHECK(m.repetitions_s.size() == 4);
      CHECK(m.launches_per_repetition >= 1);
    }
    CHECK(timer.measurements()[0].method == "cold");
    CHECK(timer.measurements()[1].method == "warm (graph)");
    CHECK(timer.measurements()[2].method == "warm (eager)");
    CHECK(timer.measurements()[3].method == "host");
    const nlohmann::json raw = timer.raw_json({{"what", "test"}});
    CHECK(raw["benchmarks"].size() == 4);
    CHECK(raw["benchmarks"][0]["bytes_per_s"].get<double>() > 0);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
}
