// Does the same decode step run at the same speed on every copy of the
// weights? Builds N anchor probers (calib/anchor.h), each a whole-model
// decoder with its own allocation of the same random weights, and measures
// their decode probes in turn, round after round (the first prober of each
// round rotating, so no copy always follows the GEMM probe of another),
// each with the threads' placement (calib/placement.h). One CSV row per
// probe on stdout; experiments/placement/allocation.py reduces the rows to
// each copy's median ratio to copy 0 within a round and a placement.
//
// On the 2-core VM (2026-11-30) copies 1 and 2 ran 4-9% slower than copy 0
// in the far placement and 2-3% in the near one, round after round: a
// decoder's speed there depends on where its weights landed, so a timing
// meant for the served decoder has to run on it (validate --in-situ
// refresh, calib/in_situ_refresh.h).
//
// Usage: servesim_allocation_watch [--copies N (3)] [--seconds S (90)] [--model M (small-110m)]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tools/watch_flags.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/placement.h"
#include "sim/errors.h"
#include "sim/model_spec.h"

namespace {

struct Options {
  int copies = 3;
  double seconds = 90;
  std::string model = "small-110m";
};

const servesim::bench::WatchFlags kFlags(
    "usage: servesim_allocation_watch [--copies N (3)] [--seconds S (90)] [--model M (small-110m)]");

Options parse(int argc, char** argv) {
  Options o;
  kFlags.parse(argc, argv, [&](const std::string& flag, const std::string& value) {
    if (flag == "--copies") o.copies = kFlags.integer_at_least(flag, value, 2);
    else if (flag == "--seconds") o.seconds = kFlags.positive(flag, value);
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
  settings.layers = int32_t(settings.model.num_hidden_layers);  // a decode step as a run makes it
  settings.repetitions = 10;
  std::vector<std::unique_ptr<DriftProber>> copies;
  for (int i = 0; i < o.copies; ++i) copies.push_back(std::make_unique<DriftProber>(settings));
  std::printf("round,elapsed_s,copy,decode_step_s,placement\n");
  const auto start = std::chrono::steady_clock::now();
  for (int round = 0;; ++round) {
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (elapsed > o.seconds) break;
    for (int j = 0; j < o.copies; ++j) {
      const int copy = (j + round) % o.copies;
      const DriftProbe p = copies[size_t(copy)]->measure();
      std::printf("%d,%.2f,%d,%.6f,%s\n", round, elapsed, copy, p.decode_iteration_s, to_string(p.placement()));
    }
    std::fflush(stdout);
  }
  return 0;
}
