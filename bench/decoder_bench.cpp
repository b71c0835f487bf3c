// How fast the built-in CPU decoder runs, against this machine's own limits,
// at each precision it builds (fp32; bf16 weights and KV; w8a16, int8
// weights; w8a16 with an int8 KV cache), and how far each strays from fp32.
//
//   build/release/bench/servesim_decoder_bench --benchmark_counters_tabular=true
//       --benchmark_repetitions=5 --benchmark_display_aggregates_only=true
//   (one command line; `make bench` runs it)
//
// Decode at batch 1 reads every weight once per token, so it is bound by
// memory bandwidth: its achieved GB/s is compared with STREAM-style copy and
// triad (target: at least 70% of the better of the two). Prefill of a long
// prompt is a chain of GEMMs: its achieved GFLOP/s is compared with the
// decoder's own GEMM, cpu::matmul (Eigen's GEMM on every core), at 2048^3
// (target: at least 60%).
//
// STREAM and the GEMM also run as benchmarks of their own, but the ratios
// use references measured alongside, in the same seconds: on a shared VM
// the memory bandwidth drifts by tens of percent from one second to the
// next. The decode and prefill benchmarks therefore pause Google Benchmark's
// timer to run a STREAM pass (every few decode steps) or one reference GEMM
// (after every prefill) and report both figures and their ratio. Each
// benchmark also times its own work with a steady clock (wall time: the
// work runs on every core). A summary (medians across repetitions) follows
// the Google Benchmark table: per precision, the decode and prefill figures
// and their speed-up over fp32 measured in the same run, and each
// precision's logits against fp32's over kAccuracySteps greedy steps
// (max |dlogit| / max |logit|, and the share of steps whose greedy token
// agrees).

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>
#include <omp.h>

#include "calib/ceilings.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/decoder_precision.h"
#include "kernels/decoder/host_weights.h"
#include "kernels/decoder/precision_agreement.h"
#include "sim/model_spec.h"

namespace {

using namespace servesim;
using Clock = std::chrono::steady_clock;

constexpr const char* kModel = "small-110m";
constexpr int32_t kDecodeContext = 128;   // tokens already cached when a decode step runs
constexpr int32_t kPrefillTokens = 512;   // prompt length of the prefill benchmark
constexpr int64_t kGemmSize = 2048;       // M = N = K of the reference GEMM
constexpr int32_t kBlockSize = 16;
constexpr double kDecodeTarget = 0.70;   // of the STREAM bandwidth
constexpr double kPrefillTarget = 0.60;  // of the GEMM throughput
constexpr int kAccuracySteps = 300;      // greedy steps of the accuracy check

// The precisions benchmarked (the benchmarks' argument is the index).
struct PrecisionCase {
  const char* name;
  cpu::Precision storage;
};
using cpu::Storage;
const PrecisionCase kPrecisions[] = {
    {"fp32", {}},
    {"bf16", {Storage::Bf16, Storage::Bf16, Storage::Bf16}},
    {"w8a16", {Storage::Int8, Storage::Fp32, Storage::Fp32}},
    {"w8a16+int8kv", {Storage::Int8, Storage::Fp32, Storage::Int8}},
    // --dtype bfloat16 --quantization w8a16 --kv-cache-dtype int8: the head in bf16 too.
    {"bf16+w8a16+i8kv", {Storage::Int8, Storage::Bf16, Storage::Int8}},
};
constexpr int kNumPrecisions = int(std::size(kPrecisions));

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---------------------------------------------------------------- STREAM ---
// The STREAM arrays, copy and triad passes and the reference GEMM live in
// calib/ceilings.h, shared with `servesim calibrate`.

using ceilings::copy_bytes;
using ceilings::copy_pass;
using ceilings::stream_array_bytes;
using ceilings::StreamArrays;
using ceilings::triad_bytes;
using ceilings::triad_pass;

// Allocated once (4x the last-level cache each) and kept for the whole run.
StreamArrays& stream_arrays() {
  static StreamArrays arrays(stream_array_bytes());
  return arrays;
}

void BM_StreamCopy(benchmark::State& state) {
  StreamArrays& s = stream_arrays();
  double seconds = 0;
  for (auto _ : state) seconds += copy_pass(s);
  state.counters["GB/s"] = copy_bytes(s) * double(state.iterations()) / seconds / 1e9;
  state.counters["array_MiB"] = double(stream_array_bytes()) / double(1 << 20);
  state.counters["threads"] = omp_get_max_threads();
}

void BM_StreamTriad(benchmark::State& state) {
  StreamArrays& s = stream_arrays();
  double seconds = 0;
  for (auto _ : state) seconds += triad_pass(s);
  state.counters["GB/s"] = triad_bytes(s) * double(state.iterations()) / seconds / 1e9;
  state.counters["array_MiB"] = double(stream_array_bytes()) / double(1 << 20);
  state.counters["threads"] = omp_get_max_threads();
}

// ------------------------------------------------------------------ GEMM ---

using ceilings::random_matrix;

// The decoder's GEMM, out = in W^T with in [M, K] and W [N, K] (M = N = K =
// kGemmSize), split across every core by cpu::matmul.
struct Gemm : ceilings::Gemm {
  Gemm() : ceilings::Gemm(kGemmSize) {}
  // FLOPs = 2 x M x N x K (one multiply-add per term).
  static double flops() { return 2.0 * double(kGemmSize) * double(kGemmSize) * double(kGemmSize); }
};

void BM_GemmMatmul(benchmark::State& state) {
  Gemm gemm;
  double seconds = 0;
  for (auto _ : state) seconds += gemm.pass();
  state.counters["GFLOP/s"] = Gemm::flops() * double(state.iterations()) / seconds / 1e9;
  state.counters["threads"] = omp_get_max_threads();
}

// Plain Eigen on one thread (the kernels build Eigen with
// EIGEN_DONT_PARALLELIZE), the same product: FLOPs = 2 x M x N x K.
void BM_GemmEigenOneThread(benchmark::State& state) {
  const int64_t n = kGemmSize;
  const cpu::Matrix in = random_matrix(n, n, 1), w = random_matrix(n, n, 2);
  cpu::Matrix out(n, n);
  const auto start = Clock::now();
  for (auto _ : state) {
    out.noalias() = in * w.transpose();
    benchmark::DoNotOptimize(out.data());
  }
  const double flops = 2.0 * double(n) * double(n) * double(n);
  state.counters["GFLOP/s"] = flops * double(state.iterations()) / seconds_since(start) / 1e9;
}

// --------------------------------------------------------------- decoder ---

// small-110m with random weights on every core, built once per precision.
// Decode and prefill write K and V into separate blocks.
struct DecoderFixture {
  ModelSpec spec = resolve_model(kModel);
  cpu::Precision storage;
  std::unique_ptr<DecoderModel> model;
  std::vector<int32_t> decode_blocks, prefill_blocks;

  explicit DecoderFixture(const cpu::Precision& precision) : storage(precision) {
    const int32_t decode_n = (kDecodeContext + 1 + kBlockSize - 1) / kBlockSize;
    const int32_t prefill_n = (kPrefillTokens + kBlockSize - 1) / kBlockSize;
    for (int32_t b = 0; b < decode_n; ++b) decode_blocks.push_back(b);
    for (int32_t b = 0; b < prefill_n; ++b) prefill_blocks.push_back(decode_n + b);
    model = make_cpu_decoder(random_weights(spec, 7), decode_n + prefill_n, kBlockSize,
                             CpuDecoderOptions{0, precision});
  }

  std::vector<int32_t> token_ids(int32_t count, uint64_t seed) const {
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> u(0, int32_t(spec.vocab_size) - 1);
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (auto& id : ids) id = u(rng);
    return ids;
  }
};

// One decoder at a time: a fixture is freed when another precision's is built.
DecoderFixture& decoder(int precision) {
  static std::unique_ptr<DecoderFixture> fixture;
  static int built = -1;
  if (built != precision) {
    fixture.reset();
    fixture = std::make_unique<DecoderFixture>(kPrecisions[precision].storage);
    built = precision;
  }
  return *fixture;
}

// Parameters of the matrices every token is multiplied by, per layer:
// q, k, v: (H + 2 Hkv) dh d; o: H dh d; gate, up, down: 3 I d.
double layer_matrix_params(const ModelSpec& m) {
  const double d = double(m.hidden_size), dh = double(m.head_dim), I = double(m.intermediate_size);
  const double H = double(m.num_attention_heads), Hkv = double(m.num_key_value_heads);
  return (H + 2 * Hkv) * dh * d + H * dh * d + 3 * I * d;
}

// Output rows of the matrices, per layer (one int8 scale each): (H + 2 Hkv) dh + d + 2 I + d.
double layer_matrix_rows(const ModelSpec& m) {
  return double((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim + 2 * m.hidden_size +
                2 * m.intermediate_size);
}

// Bytes one decode step reads from the weights: every layer's matrices (b
// bytes each, plus a 4-byte scale per row for int8), its two RMSNorm
// vectors and q, k, v biases (fp32), the final norm, and the LM head V d and
// the one embedding row gathered for the new token (d) in the embedding's
// storage e:
//   L x (b matrices + scales + 4 (2 d + bias)) + 4 d + e (V d + d)
double decode_weight_bytes(const ModelSpec& m, const cpu::Precision& p) {
  const double d = double(m.hidden_size), V = double(m.vocab_size), L = double(m.num_hidden_layers);
  const double bias = m.attention_bias ? double((m.num_attention_heads + 2 * m.num_key_value_heads) * m.head_dim) : 0;
  const double b = cpu::storage_bytes(p.linear), e = cpu::storage_bytes(p.embedding);
  const double scales = p.linear == Storage::Int8 ? 4.0 * layer_matrix_rows(m) : 0.0;
  return L * (b * layer_matrix_params(m) + scales + 4.0 * (2 * d + bias)) + 4.0 * d + e * (V * d + d);
}

// Bytes of K and V one decode step reads with `context` tokens visible
// (cached + the new one): context x the bytes per token as stored (fp32:
// 4 x 2 (K, V) x L x Hkv x dh; int8 adds a 4-byte scale per head and tensor).
double decode_kv_bytes(const ModelSpec& m, const cpu::Precision& p, int64_t context) {
  DecoderPrecision precision;
  precision.dtype = p.kv == Storage::Bf16 ? "bf16" : "fp32";
  if (p.kv == Storage::Int8) precision.quantization.kv_cache = KvCacheDtype::Int8;
  return double(context) * decoder_kv_bytes_per_token(m, DeviceChoice{}, precision);
}

// One decode step of one sequence with kDecodeContext tokens cached: the
// same step (same position) repeats, so the context stays fixed.
//
// This machine's memory bandwidth drifts by tens of percent over seconds
// (other tenants of the host), so the STREAM reference for this benchmark's
// ratio is measured in the same window: a copy and a triad pass, untimed by
// Google Benchmark, before every kStepsPerStreamPass steps.
constexpr int64_t kStepsPerStreamPass = 16;

void BM_DecodeBatch1(benchmark::State& state) {
  DecoderFixture& f = decoder(int(state.range(0)));
  state.SetLabel(kPrecisions[state.range(0)].name);
  StreamArrays& arrays = stream_arrays();
  const std::vector<int32_t> prompt = f.token_ids(kDecodeContext + 1, 11);
  BatchLayout fill, step;
  fill.add_sequence(std::span(prompt).first(kDecodeContext), 0, f.decode_blocks, true);
  f.model->forward(fill);  // the cached context
  step.add_sequence(std::span(prompt).last(1), kDecodeContext, f.decode_blocks, true);
  f.model->forward(step);  // warm-up
  double decode_s = 0, copy_s = 0, triad_s = 0;
  int64_t steps = 0, passes = 0;
  for (auto _ : state) {
    if (steps % kStepsPerStreamPass == 0) {
      state.PauseTiming();
      copy_s += copy_pass(arrays);
      triad_s += triad_pass(arrays);
      ++passes;
      state.ResumeTiming();
    }
    const auto start = Clock::now();
    benchmark::DoNotOptimize(f.model->forward(step).data());
    decode_s += seconds_since(start);
    ++steps;
  }
  const double bytes = decode_weight_bytes(f.spec, f.storage) + decode_kv_bytes(f.spec, f.storage, kDecodeContext + 1);
  const double decode = bytes * double(steps) / decode_s / 1e9;
  const double stream = std::max(copy_bytes(arrays) * double(passes) / copy_s,
                                 triad_bytes(arrays) * double(passes) / triad_s) / 1e9;
  state.counters["ms/token"] = decode_s / double(steps) * 1e3;
  state.counters["tokens/s"] = double(steps) / decode_s;
  state.counters["MB/step"] = bytes / 1e6;
  state.counters["GB/s"] = decode;
  state.counters["STREAM_GB/s"] = stream;  // the better of copy and triad, same window
  state.counters["%STREAM"] = 100 * decode / stream;
}

// FLOPs of a prefill of T new tokens (no cache) that samples S rows:
//   matrices:  2 x T x L x layer_matrix_params     (one multiply-add each)
//   LM head:   2 x S x V x d                       (only the sampled rows)
//   attention: L x H x 2 dh x T (T + 1)            (q.k and p.v, 2 dh each,
//              over the T (T + 1) / 2 causally visible (query, key) pairs)
double prefill_flops(const ModelSpec& m, double T, double S) {
  const double L = double(m.num_hidden_layers), H = double(m.num_attention_heads), dh = double(m.head_dim);
  return 2.0 * T * L * layer_matrix_params(m) + 2.0 * S * double(m.vocab_size * m.hidden_size) +
         L * H * 2.0 * dh * T * (T + 1);
}

// The prefill of one kPrefillTokens-token prompt (rewriting the same
// blocks), each pass followed by one reference GEMM (untimed by Google
// Benchmark) so that the ratio compares the same window.
void BM_Prefill(benchmark::State& state) {
  DecoderFixture& f = decoder(int(state.range(0)));
  state.SetLabel(kPrecisions[state.range(0)].name);
  Gemm gemm;
  const std::vector<int32_t> prompt = f.token_ids(kPrefillTokens, 13);
  BatchLayout layout;
  layout.add_sequence(prompt, 0, f.prefill_blocks, true);
  f.model->forward(layout);  // warm-up: sizes the scratch matrices
  double prefill_s = 0, gemm_s = 0;
  for (auto _ : state) {
    const auto start = Clock::now();
    benchmark::DoNotOptimize(f.model->forward(layout).data());
    prefill_s += seconds_since(start);
    state.PauseTiming();
    gemm_s += gemm.pass();
    state.ResumeTiming();
  }
  const double passes = double(state.iterations());
  const double prefill = prefill_flops(f.spec, kPrefillTokens, 1) * passes / prefill_s / 1e9;
  const double reference = Gemm::flops() * passes / gemm_s / 1e9;
  state.counters["tokens/s"] = passes * kPrefillTokens / prefill_s;
  state.counters["GFLOP/s"] = prefill;
  state.counters["GEMM_GFLOP/s"] = reference;  // cpu::matmul at kGemmSize^3, same window
  state.counters["%GEMM"] = 100 * prefill / reference;
}

BENCHMARK(BM_StreamCopy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_StreamTriad)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmMatmul)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_GemmEigenOneThread)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_DecodeBatch1)->DenseRange(0, kNumPrecisions - 1)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_Prefill)->DenseRange(0, kNumPrecisions - 1)->Unit(benchmark::kMillisecond)->UseRealTime();

// ------------------------------------------------------------- accuracy ---

// The precision against fp32 on small-110m over kAccuracySteps greedy steps
// of a 32-token prompt (kernels/decoder/precision_agreement.h).
PrecisionAgreement accuracy_against_fp32(const cpu::Precision& precision) {
  const ModelSpec spec = resolve_model(kModel);
  const int32_t prompt = 32;
  const int64_t blocks = (prompt + kAccuracySteps) / kBlockSize + 2;
  auto fp32 = make_cpu_decoder(random_weights(spec, 7), blocks, kBlockSize, CpuDecoderOptions{});
  auto other = make_cpu_decoder(random_weights(spec, 7), blocks, kBlockSize, CpuDecoderOptions{0, precision});
  std::mt19937_64 rng(5);
  std::vector<int32_t> tokens(prompt);
  for (auto& t : tokens) t = int32_t(rng() % uint64_t(spec.vocab_size));
  return precision_agreement(*fp32, *other, tokens, kAccuracySteps);
}

// --------------------------------------------------------------- summary ---

// CPU time that other processes took while the benchmarks ran: see
// ceilings::CpuUse (shared with `servesim calibrate`).
using ceilings::CpuUse;

// Passes every report to the usual display reporter and keeps each
// benchmark's counters: the "median" aggregate when there are repetitions,
// otherwise the median of the single runs.
class SummaryReporter final : public benchmark::BenchmarkReporter {
 public:
  explicit SummaryReporter(benchmark::BenchmarkReporter* display) : display_(display) {}

  bool ReportContext(const Context& context) override { return display_->ReportContext(context); }
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& run : runs) {
      if (run.error_occurred) continue;
      // "BM_DecodeBatch1/2" for a benchmark with an argument (the precision).
      const std::string name =
          run.run_name.function_name + (run.run_name.args.empty() ? "" : "/" + run.run_name.args);
      for (const auto& [counter, value] : run.counters) {
        if (run.run_type == Run::RT_Iteration) samples_[name][counter].push_back(value.value);
        else if (run.aggregate_name == "median") medians_[name][counter] = value.value;
      }
      repetitions_ = std::max(repetitions_, int(run.repetitions));
    }
    display_->ReportRuns(runs);
  }
  void Finalize() override { display_->Finalize(); }

  // 0 when the benchmark did not run.
  double value(const std::string& name, const std::string& counter) const {
    if (auto b = medians_.find(name); b != medians_.end())
      if (auto c = b->second.find(counter); c != b->second.end()) return c->second;
    auto b = samples_.find(name);
    if (b == samples_.end()) return 0;
    auto c = b->second.find(counter);
    if (c == b->second.end() || c->second.empty()) return 0;
    std::vector<double> v = c->second;
    std::sort(v.begin(), v.end());
    return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
  }
  int repetitions() const { return repetitions_; }

 private:
  benchmark::BenchmarkReporter* display_;
  std::map<std::string, std::map<std::string, std::vector<double>>> samples_;
  std::map<std::string, std::map<std::string, double>> medians_;
  int repetitions_ = 0;
};

void print_summary(std::FILE* out, const SummaryReporter& r, double others_share, bool accuracy) {
  const double copy = r.value("BM_StreamCopy", "GB/s"), triad = r.value("BM_StreamTriad", "GB/s");
  const double gemm = r.value("BM_GemmMatmul", "GFLOP/s"), gemm1 = r.value("BM_GemmEigenOneThread", "GFLOP/s");
  auto verdict = [](double percent, double target) {
    return percent <= 0 ? "n/a (not run)" : percent >= 100 * target ? "PASS" : "below";
  };
  auto name = [](const char* bench, int p) { return std::string(bench) + "/" + std::to_string(p); };
  std::fprintf(out, "\nSummary (%s, %d threads; medians of %d repetition(s))\n", kModel, omp_get_max_threads(),
               r.repetitions());
  std::fprintf(out, "  STREAM, 3 arrays of %.0f MiB: copy %.1f GB/s, triad %.1f GB/s\n",
               double(stream_array_bytes()) / double(1 << 20), copy, triad);
  std::fprintf(out, "  GEMM %lld^3 fp32: cpu::matmul %.1f GFLOP/s (plain Eigen on one thread: %.1f)\n",
               static_cast<long long>(kGemmSize), gemm, gemm1);
  const std::string decode0 = name("BM_DecodeBatch1", 0), prefill0 = name("BM_Prefill", 0);
  std::fprintf(out, "  decode, batch 1, %d cached tokens (fp32): %.2f ms/token, %.1f tokens/s, %.1f GB/s\n",
               kDecodeContext, r.value(decode0, "ms/token"), r.value(decode0, "tokens/s"), r.value(decode0, "GB/s"));
  std::fprintf(out, "      %.1f%% of STREAM (%.1f GB/s alongside)   target >= %.0f%%: %s\n",
               r.value(decode0, "%STREAM"), r.value(decode0, "STREAM_GB/s"), 100 * kDecodeTarget,
               verdict(r.value(decode0, "%STREAM"), kDecodeTarget));
  std::fprintf(out, "  prefill, %d-token prompt (fp32): %.0f tokens/s, %.1f GFLOP/s\n", kPrefillTokens,
               r.value(prefill0, "tokens/s"), r.value(prefill0, "GFLOP/s"));
  std::fprintf(out, "      %.1f%% of GEMM (%.1f GFLOP/s alongside)   target >= %.0f%%: %s\n",
               r.value(prefill0, "%GEMM"), r.value(prefill0, "GEMM_GFLOP/s"), 100 * kPrefillTarget,
               verdict(r.value(prefill0, "%GEMM"), kPrefillTarget));
  std::fprintf(out, "  per precision (speed-ups over fp32 from the same run%s):\n",
               accuracy ? "; accuracy against fp32 over greedy steps" : "");
  std::fprintf(out, "    %-15s %9s %8s %8s %8s %10s %8s", "precision", "ms/token", "MB/step", "%STREAM", "decode",
               "prefill/s", "prefill");
  if (accuracy) std::fprintf(out, " %12s %7s", "max|dlogit|", "agree");
  std::fprintf(out, "\n");
  const double decode_fp32 = r.value(decode0, "ms/token"), prefill_fp32 = r.value(prefill0, "tokens/s");
  for (int p = 0; p < kNumPrecisions; ++p) {
    const std::string d = name("BM_DecodeBatch1", p), f = name("BM_Prefill", p);
    const double ms = r.value(d, "ms/token"), tps = r.value(f, "tokens/s");
    if (ms <= 0 && tps <= 0) continue;
    std::fprintf(out, "    %-15s %9.2f %8.1f %7.1f%% %7.2fx %10.0f %7.2fx", kPrecisions[p].name, ms,
                 r.value(d, "MB/step"), r.value(d, "%STREAM"), ms > 0 ? decode_fp32 / ms : 0.0, tps,
                 prefill_fp32 > 0 ? tps / prefill_fp32 : 0.0);
    if (accuracy) {
      const PrecisionAgreement a = accuracy_against_fp32(kPrecisions[p].storage);
      std::fprintf(out, " %12.5f %6.1f%%", a.max_rel_diff, 100 * a.greedy_agree);
    }
    std::fprintf(out, "\n");
  }
  std::fprintf(out, "  other processes took %.1f%% of the CPUs during the run%s\n", 100 * others_share,
               others_share > 0.05 ? " -- a busy machine: rerun when it is idle" : "");
}

}  // namespace

int main(int argc, char** argv) {
  // The summary goes to stdout after the console table, to stderr when
  // stdout carries JSON or CSV.
  // --no-accuracy skips the accuracy check (kAccuracySteps greedy steps per precision).
  bool console = true, accuracy = true;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]).starts_with("--benchmark_format=")) console = std::string(argv[i]).ends_with("=console");
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--no-accuracy") {
      accuracy = false;
      for (int j = i; j + 1 < argc; ++j) argv[j] = argv[j + 1];
      --argc;
      break;
    }
  omp_set_num_threads(omp_get_num_procs());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  SummaryReporter reporter(benchmark::CreateDefaultDisplayReporter());
  const CpuUse start = CpuUse::now();
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_summary(console ? stdout : stderr, reporter, CpuUse::now().others_share_since(start), accuracy);
  benchmark::Shutdown();
  return 0;
}
