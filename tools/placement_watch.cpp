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

#include "tools/watch_flags.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/placement.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

struct Options {
  double seconds = 120;
  std::string model = "small-110m";
  int threads = 0;
};

const servesim::bench::WatchFlags kFlags(
    "usage: servesim_placement_watch [--seconds S (120)] [--model M (small-110m)] [--threads T (0: every core)]");

Options parse(int argc, char** argv) {
  Options o;
  kFlags.parse(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--seconds") o.seconds = kFlags.positive(flag, value);
    else if (flag == "--threads") o.threads = kFlags.integer_at_least(flag, value, 0);
    else if (flag == "--model") o.model = value;
    else return false;
    return true;
  });
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace servesim;
  const Options o = parse(argc, argv);
  DriftProbeSettings settings;
  settings.model = kFlags.model(o.model);
  settings.threads = o.threads;
  settings.layers = int32_t(settings.model.num_hidden_layers);  // a decode step as a run makes it
  settings.repetitions = 20;
  DriftProber prober(settings);
  std::printf("elapsed_s,decode_step_s,gemm_flops_per_s,core_latency_before_ns,core_latency_after_ns,placement\n");
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > o.seconds) break;
    const DriftProbe p = prober.measure();
    std::printf("%.2f,%.6f,%.4g,%.1f,%.1f,%s\n", elapsed, p.decode_iteration_s, p.gemm_flops_per_s,
                p.core_latency_before_ns, p.core_latency_after_ns, to_string(p.placement()));
    std::fflush(stdout);
  }
  return 0;
}
