// How fast the CUDA decoder runs, against the GPU's own measured limits.
//
//   build/release/bench/servesim_cuda_decoder_bench [--model llama-3.1-8b]
//       [--device cuda:0] [--context 512] [--decode-steps 64]
//       [--prefill-tokens 4096] [--json FILE]
//
// Decode at batch 1 reads every weight it uses once per token, plus the
// sequence's cached K and V: bytes per step / step time is compared with the
// device-to-device copy bandwidth (bytes read + written) measured in the
// same run (target: >= 85%). Weights counted: every matrix and norm except
// an untied embedding table, of which a step reads one row. Prefill of one
// long prompt is a chain of GEMMs plus causal attention: its FLOP/s is
// compared with cuBLAS's bf16 GEMM at 8192^3 (target: >= 60%). FLOPs
// counted: 2 T per projection weight, 2 d V for the one sampled row's LM
// head, and 2 * 2 * L * H * dh * T (T + 1) / 2 for causal QK^T and PV.
// Step times are medians over the steps, wall clock around the decoder's
// synchronous call (what a serving loop sees, host work included).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "calib/cuda_ceilings.h"
#include "calib/cuda_timer.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/decoder/batch_layout.h"
#include "kernels/decoder/decoder_model.h"
#include "kernels/decoder/device_choice.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

using namespace servesim;
using Clock = std::chrono::steady_clock;

constexpr int32_t kBlockSize = 16;

struct Options {
  std::string model = "llama-3.1-8b";
  std::string device = "cuda:0";
  int32_t context = 512;
  int32_t decode_steps = 64;
  int32_t prefill_tokens = 4096;
  int32_t pause_ms = 0;  // idle time between the ceilings (heavy GEMMs) and the decode steps
  std::string json;
};

int32_t positive_int(const std::string& flag, const char* text) {
  try {
    size_t used = 0;
    const long v = std::stol(text, &used);
    if (used == std::string(text).size() && v > 0 && v <= (1 << 20)) return int32_t(v);
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("{} must be an integer in 1 .. 1048576 (got '{}')", flag, text));
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help" || flag == "-h") {
      std::puts("servesim_cuda_decoder_bench [--model M] [--device cuda:N] [--context N] [--decode-steps N]\n"
                "                            [--prefill-tokens N] [--pause-ms N] [--json FILE]\n"
                "Decode at batch 1 against the measured copy bandwidth, prefill against the bf16 GEMM.\n"
                "--pause-ms: wait this long after the ceilings' heavy GEMMs before the decode steps.");
      std::exit(0);
    }
    if (i + 1 >= argc) throw InputError(fmt::format("{} needs a value (see --help)", flag));
    const char* value = argv[++i];
    if (flag == "--model") o.model = value;
    else if (flag == "--device") o.device = value;
    else if (flag == "--context") o.context = positive_int(flag, value);
    else if (flag == "--decode-steps") o.decode_steps = positive_int(flag, value);
    else if (flag == "--prefill-tokens") o.prefill_tokens = positive_int(flag, value);
    else if (flag == "--pause-ms") o.pause_ms = positive_int(flag, value);
    else if (flag == "--json") o.json = value;
    else throw InputError(fmt::format("unknown flag {} (see --help)", flag));
  }
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

std::vector<int32_t> blocks(int32_t first, int32_t count) {
  std::vector<int32_t> b(static_cast<size_t>(count));
  std::iota(b.begin(), b.end(), first);
  return b;
}

int32_t blocks_for(int64_t tokens) { return int32_t((tokens + kBlockSize - 1) / kBlockSize); }

// Prompt ids: anything in 3 .. V - 1.
std::vector<int32_t> prompt(int32_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t i = 0; i < n; ++i) t[size_t(i)] = int32_t(3 + (int64_t(i) * 7919) % (vocab - 3));
  return t;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  const ModelSpec spec = resolve_model(o.model);
  const DeviceChoice device = parse_device(o.device);
  if (!device.cuda) throw InputError("--device must be cuda or cuda:N: this benchmark measures the CUDA decoder");
  require_device(device);
  if (int64_t(o.context) + o.decode_steps > spec.max_position_embeddings ||
      o.prefill_tokens > spec.max_position_embeddings)
    throw InputError(fmt::format("--context + --decode-steps and --prefill-tokens must fit {}'s {} positions",
                                 spec.name, spec.max_position_embeddings));

  // Ceilings first (the decoder's memory is not yet taken), as `servesim
  // calibrate --device cuda` measures them (calib/cuda_ceilings.h).
  CUDA_CHECK(cudaSetDevice(device.index));
  int l2 = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device.index));
  cudaStream_t stream = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  cuda_calib::Ceilings ceilings;
  {
    cuda_calib::TimerSettings settings;
    settings.repetitions = 10;
    cuda_calib::Timer timer(stream, size_t(l2), settings);
    ceilings = cuda_calib::measure_ceilings(timer, stream, {size_t(2) << 30, 8192}, 1);
  }
  CUDA_CHECK(cudaStreamDestroy(stream));
  const double copy_bw = ceilings.copy_bytes_per_s, gemm_flops = ceilings.gemm_flops_per_s;
  std::fprintf(stderr, "ceilings: copy %.0f GB/s, bf16 GEMM %.0f TFLOP/s\n", copy_bw / 1e9, gemm_flops / 1e12);

  // One sequence for the decode, another for the prefill, side by side.
  const int32_t decode_blocks = blocks_for(int64_t(o.context) + o.decode_steps);
  const int32_t prefill_blocks = blocks_for(o.prefill_tokens);
  CudaDecoderOptions cuda;
  cuda.device = device.index;
  auto model = make_cuda_decoder_random(spec, 0, decode_blocks + prefill_blocks, kBlockSize, cuda);
  std::fprintf(stderr, "%s on %s: %.2f GB of bf16 weights\n", spec.name.c_str(), model->device().c_str(),
               model->weight_bytes() / 1e9);
  const SamplingParams greedy;
  std::vector<int32_t> chosen;
  auto run = [&](const BatchLayout& layout) {
    const std::vector<double> uniforms(size_t(layout.num_samples()), 0.0);
    if (!model->forward_select(layout, greedy, uniforms, chosen)) model->forward(layout);
  };

  // Decode at batch 1 after a prompt of --context tokens (and --pause-ms
  // of idle time: right after the ceilings' GEMMs these steps ran slower
  // than the engine's served ones, docs/cuda.md).
  std::this_thread::sleep_for(std::chrono::milliseconds(o.pause_ms));
  const std::vector<int32_t> decode_table = blocks(0, decode_blocks);
  std::vector<int32_t> tokens = prompt(o.context, spec.vocab_size);
  BatchLayout layout;
  layout.add_sequence(tokens, 0, decode_table, true);
  run(layout);
  std::vector<double> steps;
  for (int32_t s = 0; s < o.decode_steps; ++s) {
    const int32_t next = chosen.at(0);
    layout.clear();
    layout.add_sequence(std::span<const int32_t>(&next, 1), int32_t(tokens.size()), decode_table, true);
    const auto start = Clock::now();
    run(layout);
    steps.push_back(std::chrono::duration<double>(Clock::now() - start).count());
    tokens.push_back(next);
  }
  // Skip the first steps (graph capture) when there are enough.
  const std::vector<double> steady(steps.begin() + std::min<size_t>(steps.size() / 4, 4), steps.end());
  const double step_s = median(steady);
  const double embedding_unread = spec.tie_word_embeddings ? 0.0 : double(spec.vocab_size * spec.hidden_size) * 2.0;
  const double mean_context = double(o.context) + 0.5 * double(o.decode_steps);
  const double kv_bytes = mean_context * spec.kv_bytes_per_token() * (2.0 / spec.dtype_bytes());  // bf16 cache
  const double decode_bytes = model->weight_bytes() - embedding_unread + kv_bytes;
  const double decode_bw = decode_bytes / step_s;

  // Prefill of one prompt of --prefill-tokens tokens in one pass.
  const std::vector<int32_t> prefill_table = blocks(decode_blocks, prefill_blocks);
  const std::vector<int32_t> long_prompt = prompt(o.prefill_tokens, spec.vocab_size);
  std::vector<double> prefills;
  for (int r = 0; r < 4; ++r) {
    layout.clear();
    layout.add_sequence(long_prompt, 0, prefill_table, true);
    const auto start = Clock::now();
    run(layout);
    if (r > 0) prefills.push_back(std::chrono::duration<double>(Clock::now() - start).count());  // r = 0: warm-up
  }
  const double prefill_s = median(prefills);
  const double T = o.prefill_tokens;
  const double d = double(spec.hidden_size), I = double(spec.intermediate_size), L = double(spec.num_hidden_layers);
  const double q_out = double(spec.num_attention_heads * spec.head_dim);
  const double qkv = double((spec.num_attention_heads + 2 * spec.num_key_value_heads) * spec.head_dim);
  const double projection_weights = L * (qkv * d + d * q_out + 3.0 * d * I);
  const double flops = 2.0 * T * projection_weights + 2.0 * d * double(spec.vocab_size) +
                       4.0 * L * q_out * T * (T + 1.0) / 2.0;
  const double prefill_flops = flops / prefill_s;

  std::printf("| measurement | value | ceiling | share | target |\n|---|---|---|---|---|\n");
  std::printf("| decode batch 1, %s, context %d | %.3f ms/token, %.0f GB/s | copy %.0f GB/s | %.1f%% | >= 85%% |\n",
              spec.name.c_str(), o.context, step_s * 1e3, decode_bw / 1e9, copy_bw / 1e9, 100 * decode_bw / copy_bw);
  std::printf("| prefill %d tokens, %s | %.1f ms, %.0f TFLOP/s | bf16 GEMM %.0f TFLOP/s | %.1f%% | >= 60%% |\n",
              o.prefill_tokens, spec.name.c_str(), prefill_s * 1e3, prefill_flops / 1e12, gemm_flops / 1e12,
              100 * prefill_flops / gemm_flops);

  if (!o.json.empty()) {
    nlohmann::json j = {
        {"model", spec.name},
        {"device", model->device()},
        {"copy_bytes_per_s", copy_bw},
        {"bf16_gemm_flops_per_s", gemm_flops},
        {"decode", {{"context", o.context}, {"steps", o.decode_steps}, {"pause_ms", o.pause_ms}, {"step_s_median", step_s},
                    {"step_s", steps}, {"bytes_per_step", decode_bytes}, {"bytes_per_s", decode_bw},
                    {"share_of_copy", decode_bw / copy_bw}}},
        {"prefill", {{"tokens", o.prefill_tokens}, {"seconds_median", prefill_s}, {"seconds", prefills},
                     {"flops", flops}, {"flops_per_s", prefill_flops}, {"share_of_gemm", prefill_flops / gemm_flops}}}};
    std::ofstream(o.json) << j.dump(2) << "\n";
  }
  return 0;
} catch (const servesim::InputError& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 2;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
