// `servesim calibrate`: time the decoder's own kernels on this device
// (Google Benchmark on the CPU, CUDA events on a GPU) and write the device
// profile, with the raw timings (JSON) beside it.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include <fmt/format.h>

#include "calib/calibrate.h"
#include "sim/cost/profile.h"
#include "sim/parallel_config.h"
#include "cli/commands.h"
#include "cli/common_options.h"
#include "cli/engine_options.h"
#include "kernels/decoder/device_choice.h"
#include "sim/cost/profile.h"
#include "sim/errors.h"
#include "validate/host_drift/host_drift.h"

namespace servesim::cli {
namespace {

// profile.json -> profile.benchmarks.json; anything else gets the suffix.
std::string raw_benchmarks_path_for(const std::string& out) {
  const std::filesystem::path p(out);
  if (p.extension() == ".json") return (p.parent_path() / (p.stem().string() + ".benchmarks.json")).string();
  return out + ".benchmarks.json";
}

// A 1-D table at x: log-log interpolation between grid points, the edge
// value outside (for the headline figures only; the cost model has its own
// rules).
double at(const Curve& c, double x) {
  if (x <= c.x.front()) return c.seconds.front();
  if (x >= c.x.back()) return c.seconds.back();
  const size_t i = size_t(std::upper_bound(c.x.begin(), c.x.end(), x) - c.x.begin());
  const double t = std::log(x / c.x[i - 1]) / std::log(c.x[i] / c.x[i - 1]);
  return std::exp(std::log(c.seconds[i - 1]) + t * (std::log(c.seconds[i]) - std::log(c.seconds[i - 1])));
}

// One iteration of L layers on `tokens` tokens with the given attention
// seconds per layer, sampling one row.
double iteration_s(const DeviceProfile& p, double tokens, double attention_per_layer) {
  const double per_layer = at(p.gemm_qkv, tokens) + at(p.gemm_o, tokens) + at(p.gemm_gate_up, tokens) +
                           at(p.gemm_down, tokens) + at(p.elementwise, tokens) + attention_per_layer;
  return double(p.model.num_hidden_layers) * per_layer + at(p.lm_head, 1) + at(p.sampling, 1) +
         p.iteration_overhead_s;
}

void print_summary(const DeviceProfile& p, const std::string& out, const std::string& raw, double wall_s) {
  const auto& settings = p.metadata.value("settings", nlohmann::json::object());
  auto row = [](const std::string& label, const std::string& value) {
    std::cout << fmt::format("    {:<40} {}\n", label, value);
  };
  std::cout << fmt::format("servesim calibrate: {} ({}) on {}, {} grids, {} benchmarks in {:.1f} s\n", p.model.name,
                           p.precision(), p.device_description, settings.value("mode", "?"),
                           settings.value("benchmarks", 0), wall_s);
  const bool cuda = p.device_kind == "cuda";
  std::cout << "  ceilings\n";
  row(cuda ? "copy (device to device)" : "STREAM copy", fmt::format("{:10.1f} GB/s", p.stream_copy_bytes_per_s / 1e9));
  row(cuda ? "triad (cuBLAS saxpy)" : "STREAM triad", fmt::format("{:10.1f} GB/s", p.stream_triad_bytes_per_s / 1e9));
  row("GEMM, " + settings.value("gemm_ceiling", std::string("?")), fmt::format("{:10.1f} GFLOP/s", p.gemm_flops_per_s / 1e9));
  std::cout << fmt::format("  predicted from the tables ({} layers)\n", p.model.num_hidden_layers);
  const auto& da = p.decode_attention;
  for (size_t j : {size_t(0), da.y.size() - 1}) {
    const double s = iteration_s(p, 1, da.seconds[0][j]);
    row(fmt::format("decode step, batch 1, context {}", da.y[j]),
        fmt::format("{:10.2f} ms   ({:.1f} tokens/s)", s * 1e3, 1.0 / s));
    if (da.y.size() == 1) break;
  }
  const auto& pa = p.prefill_attention;
  const double q = pa.x.back();
  const double s = iteration_s(p, q, pa.seconds.back()[0]);
  row(fmt::format("prefill of {} tokens, nothing cached", q), fmt::format("{:10.2f} ms   ({:.0f} tokens/s)", s * 1e3, q / s));
  row("iteration overhead", fmt::format("{:10.1f} us", p.iteration_overhead_s * 1e6));
  if (!cuda) {
    const double others = p.metadata.value("machine_load", nlohmann::json::object()).value("others_cpu_share", 0.0);
    row("CPU time taken by other processes", fmt::format("{:10.1f} %{}", 100 * others,
                                                          others > 0.05 ? "   (busy machine: rerun when idle)" : ""));
  }
  std::cout << fmt::format("  profile     {}\n  benchmarks  {} ({})\n", out, raw,
                           cuda ? "every repetition's CUDA-event timings, JSON" : "Google Benchmark JSON");
}

}  // namespace

int calibrate_command(int argc, const char* const* argv) {
  po::options_description general(
      "servesim calibrate: time the decoder's own kernels on this device (Google Benchmark on the CPU, "
      "CUDA events on a GPU) and write a device profile for the profile cost model\n\nGeneral", kHelpWidth);
  general.add_options()
      ("help,h", "show this help")
      ("device", po::value<std::string>()->default_value("cpu"),
       "cpu, or cuda / cuda:N: the CUDA decoder's kernels in bf16 (needs a build with nvcc and an sm_90 GPU; "
       "without one, exit 2)")
      ("model", po::value<std::string>()->default_value("small-110m"),
       "a preset or a Hugging Face config.json: the shapes timed (weights are random)")
      ("quick", "coarse grids and few repeats, seconds instead of minutes (tests, first looks; a quick validation "
                "calibrates this way)")
      ("threads", po::value<int>()->default_value(0), "CPU threads, 0 .. 1024 (0: every core; cpu only)")
      ("host-drift",
       "for a host whose speed drifts (a shared VM; docs/noisy-hosts.md): also time the drift probes (a "
       "whole-model decode step and an n^3 GEMM) at every moment of the calibration, with the threads' "
       "placement, and (cpu, 2+ threads, full mode) the placement ratios, for `validate --host-drift`")
      ("placement-seconds", po::value<double>(),
       "with --host-drift: at most this long timing whole-model iterations with the threads in each placement "
       "(cores sharing an L3, or two CCDs) (default: 180 in full mode, 0 with --quick; 0: skip; at most 3600)")
      ("block-size", po::value<int32_t>()->default_value(16), "KV block size to time attention with")
      ("max-num-batched-tokens", po::value<int32_t>()->default_value(2048),
       "largest token count M timed (GEMMs, elementwise, prefill chunks; at most 16384 on cuda)")
      ("max-context", po::value<int64_t>()->default_value(0),
       "largest context on the attention grids (0: the model's max_position_embeddings; lower it "
       "to shorten the calibration of a long-context model)")
      ("max-num-seqs", po::value<int32_t>()->default_value(256),
       "largest number of sampled rows timed (LM head, sampling); caps the decode batch axis (cpu: at 64 in "
       "full mode; cuda: the batch axis reaches it)")
      ("min-time", po::value<double>(),
       "least seconds each timed repetition of a kernel runs, its calls averaged (Google Benchmark's "
       "min_time; default: cpu 0.03, 0.01 with --quick; cuda 0.005, 0.001 with --quick; at most 60)")
      ("repetitions", po::value<int>(),
       "timed repetitions of each kernel, their median kept (default 5; cuda --quick 3; at most 1000)")
      ("weights-seed", po::value<std::string>()->default_value("0"), "seed of the random weights")
      ("temperature", po::value<double>()->default_value(0.0, "0"), "sampling timed with this (0 = greedy)")
      ("top-p", po::value<double>()->default_value(1.0, "1"), "nucleus threshold of the sampling timed");
  general.add_options()
      ("tensor-parallel-size", po::value<int32_t>()->default_value(1),
       "time the kernels of one rank of this TP degree (heads, KV heads, MLP width and vocabulary split, as "
       "docs/parallelism.md says) on this one device; `simulate --profile` then adds the communication, "
       "analytic: multi-GPU all-reduce is not measured here");
  add_precision_options(general);  // the kernels timed: a profile holds one precision's tables
  po::options_description output("Output", kHelpWidth);
  output.add_options()
      ("out", po::value<std::string>(),
       "required: the profile (JSON); the raw timings (Google Benchmark's JSON on the CPU, every "
       "repetition's CUDA-event timings on a GPU) go beside it as NAME.benchmarks.json")
      ("quiet,q", "no progress on stderr");
  po::options_description all(kHelpWidth);
  all.add(general).add(output);

  const po::variables_map vm = parse_or_throw(argc, argv, all);
  if (vm.count("help")) {
    std::cout << all << "\nExit status: 0 success, 2 bad input (the message says which), 1 "
                        "runtime failure.\n";
    return 0;
  }

  CalibrationOptions o;
  const DeviceChoice device = parse_device(vm["device"].as<std::string>());  // InputError naming --device
  o.device = device.name();
  if (!vm.count("out")) throw InputError("--out is required: where to write the profile (e.g. profile.json)");
  const std::string out = vm["out"].as<std::string>();
  if (out.empty() || std::filesystem::is_directory(out))
    throw InputError(fmt::format("--out '{}': give a file name for the profile, e.g. profile.json", out));
  const ModelSpec model = resolve_model(vm["model"].as<std::string>());
  const ParallelConfig parallel{vm["tensor-parallel-size"].as<int32_t>(), 1};
  parallel.validate_for(model);
  o.model = tensor_parallel_shard(model, parallel.tensor_parallel_size);
  o.precision = decoder_precision_from(vm).on(device);
  o.quick = vm.count("quick") > 0;
  o.threads = vm["threads"].as<int>();
  const bool host_drift = vm.count("host-drift") > 0;
  if (host_drift && device.cuda)
    throw InputError("--host-drift applies to cpu calibrations (a GPU keeps its speed from one run to the next)");
  double placement_seconds = -1;
  if (vm.count("placement-seconds")) {
    if (!host_drift) throw InputError("--placement-seconds applies with --host-drift");
    placement_seconds = vm["placement-seconds"].as<double>();
    if (!(placement_seconds >= 0 && placement_seconds <= 3600))
      throw InputError(fmt::format("--placement-seconds must be in [0, 3600] (got {})", placement_seconds));
  }
  if (vm.count("min-time")) {
    o.min_time_s = vm["min-time"].as<double>();
    if (!(o.min_time_s > 0 && o.min_time_s <= 60))
      throw InputError(fmt::format("--min-time must be in (0, 60] seconds (got {})", o.min_time_s));
  }
  if (vm.count("repetitions")) {
    o.repetitions = vm["repetitions"].as<int>();
    if (o.repetitions < 1 || o.repetitions > 1000)
      throw InputError(fmt::format("--repetitions must be in [1, 1000] (got {})", o.repetitions));
  }
  o.block_size = vm["block-size"].as<int32_t>();
  o.max_batched_tokens = vm["max-num-batched-tokens"].as<int32_t>();
  o.max_context = vm["max-context"].as<int64_t>();
  o.max_num_seqs = vm["max-num-seqs"].as<int32_t>();
  o.weights_seed = parse_seed(vm["weights-seed"].as<std::string>(), "--weights-seed");
  o.sampling.temperature = vm["temperature"].as<double>();
  o.sampling.top_p = vm["top-p"].as<double>();
  o.raw_benchmarks_path = raw_benchmarks_path_for(out);
  calibration_grids(o);  // every option checked before anything runs
  require_device(device);  // a GPU that is not there: exit 2, saying why, before any file is made
  const std::filesystem::path out_dir = std::filesystem::path(out).parent_path();
  if (!out_dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(out_dir, ec);
    if (ec) throw InputError(fmt::format("--out '{}': cannot create {} ({})", out, out_dir.string(), ec.message()));
  }

  const bool quiet = vm.count("quiet") > 0;
  auto progress = [quiet](const std::string& line) {
    if (quiet) return;
    std::fprintf(stderr, "calibrate: %s\n", line.c_str());
    std::fflush(stderr);
  };
  DeviceProfile profile =
      calibrate(o, progress, host_drift ? host_drift_calibration_hooks(o, placement_seconds, progress) : CalibrationHooks{});
  // The tables are one rank's; the profile names the whole model and the degree.
  profile.model = model;
  profile.tensor_parallel_size = parallel.tensor_parallel_size;
  profile.save(out);
  print_summary(profile, out, o.raw_benchmarks_path,
                profile.metadata["settings"].value("wall_time_s", 0.0));
  return 0;
}

}  // namespace servesim::cli
