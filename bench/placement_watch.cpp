// Watches this machine's speed and where its threads are: the anchor probes
// (a whole-model decode step and a GEMM, calib/anchor.h) over and over,
// each with the core-to-core latency of the decoder's threads just before
// and just after it (calib/placement.h). One CSV row per probe on stdout.
//
// On a VM whose host moves the vCPUs between cores this shows the decode
// step's speed following the placement; on a steady machine, one placement
// and one speed. experiments/placement/run.sh runs it and plots the rows.
//
// Usage: servesim_placement_watch [--seconds S] [--model M] [--threads T]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "calib/anchor.h"
#include "calib/placement.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

struct Options {
  double seconds = 120;
  std::string model = "small-110m";
  int threads = 0;
};

[[noreturn]] void usage(const std::string& error) {
  std::fprintf(stderr,
               "%s%susage: servesim_placement_watch [--seconds S (120)] [--model M (small-110m)] [--threads T (0: "
               "every core)]\n",
               error.c_str(), error.empty() ? "" : "\n");
  std::exit(error.empty() ? 0 : 2);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "-h" || flag == "--help") usage("");
    if (i + 1 >= argc) usage(fmt::format("{}: needs a value", flag));
    const std::string value = argv[++i];
    char* end = nullptr;
    if (flag == "--seconds") {
      o.seconds = std::strtod(value.c_str(), &end);
      if (*end != '\0' || !(o.seconds > 0)) usage(fmt::format("--seconds: expected a number > 0, got '{}'", value));
    } else if (flag == "--threads") {
      o.threads = int(std::strtol(value.c_str(), &end, 10));
      if (*end != '\0' || o.threads < 0) usage(fmt::format("--threads: expected an integer >= 0, got '{}'", value));
    } else if (flag == "--model") {
      o.model = value;
    } else {
      usage(fmt::format("unknown flag '{}'", flag));
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace servesim;
  const Options o = parse(argc, argv);
  AnchorSettings settings;
  try {
    settings.model = resolve_model(o.model);
  } catch (const InputError& e) {
    usage(fmt::format("--model: {}", e.what()));
  }
  settings.threads = o.threads;
  settings.layers = int32_t(settings.model.num_hidden_layers);  // a decode step as a run makes it
  settings.repetitions = 20;
  AnchorProber prober(settings);
  std::printf("elapsed_s,decode_step_s,gemm_flops_per_s,core_latency_before_ns,core_latency_after_ns,placement\n");
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > o.seconds) break;
    const AnchorProbe p = prober.measure();
    std::printf("%.2f,%.6f,%.4g,%.1f,%.1f,%s\n", elapsed, p.decode_iteration_s, p.gemm_flops_per_s,
                p.core_latency_before_ns, p.core_latency_after_ns, to_string(p.placement()));
    std::fflush(stdout);
  }
  return 0;
}
