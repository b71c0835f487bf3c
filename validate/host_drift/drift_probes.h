// Drift probes: two short measurements that tell one moment of a machine's
// speed from another (docs/noisy-hosts.md). A shared VM does not keep its
// speed from one minute to the next, so a profile measured at one moment
// may not describe a run made at another:
//   decode probe - the decoder's own 1-token decode iteration (a decoder of
//                  the model's `layers` layers with random weights,
//                  `context` tokens of context), which streams the weights
//                  as every decode does: memory-bound;
//   GEMM probe   - cpu::matmul on an n^3 product: compute-bound.
// `calibrate --host-drift` measures both before each benchmark family and
// at the end and stores their median in the profile ("anchor");
// `validate --host-drift report` measures them again just before and just
// after the real run and reports the drift.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "validate/host_drift/placement.h"
#include "kernels/decoder/sampler.h"
#include "sim/cost/profile.h"
#include "sim/model_spec.h"

namespace servesim {

struct DriftProbe {
  double decode_iteration_s = 0;  // median wall time of the 1-token decode iteration
  double gemm_flops_per_s = 0;    // median cpu::matmul throughput
  int32_t layers = 0;             // decoder layers of the decode probe
  int64_t context = 0;            // its context length (cached tokens + 1)
  int64_t gemm_n = 0;             // n of the n^3 GEMM
  // Where the threads were (calib/placement.h): one-way core-to-core
  // latency just before the decode probe and just after the GEMM probe;
  // NaN when not measured (one thread, or a profile from an older servesim).
  double core_latency_before_ns = std::numeric_limits<double>::quiet_NaN();
  double core_latency_after_ns = std::numeric_limits<double>::quiet_NaN();
  Placement placement() const { return placement_of(core_latency_before_ns, core_latency_after_ns); }

  nlohmann::json to_json() const;
  // Throws InputError naming `source` for a malformed object (the profile's
  // "anchor", and older profiles' names for it).
  static DriftProbe from_json(const nlohmann::json& j, const std::string& source);
};

struct DriftProbeSettings {
  ModelSpec model;       // the profiled shape; the probe uses `layers` of its layers
  int threads = 0;       // 0: every core
  int32_t layers = 1;
  int64_t context = 16;
  int32_t block_size = 16;
  uint64_t weights_seed = 0;
  SamplingParams sampling;
  int64_t gemm_n = 1024;
  int repetitions = 40;  // timed decode iterations (the GEMM: a quarter as many, at least 3)
};

// Measures both probes (about half a second for small-110m on 2 cores).
DriftProbe measure_drift_probe(const DriftProbeSettings& settings);

// The probes' decoder and GEMM, built once and measured many times (the
// calibration probes between its benchmark families).
class DriftProber {
 public:
  explicit DriftProber(const DriftProbeSettings& settings);
  ~DriftProber();
  DriftProbe measure();

 private:
  struct State;
  DriftProbeSettings settings_;
  std::unique_ptr<State> state_;
};

// The element-wise median of several probes (the device's typical state
// over them); layers, context and gemm_n from the first. Requires >= 1.
DriftProbe median_probe(const std::vector<DriftProbe>& probes);

// How many probes saw each placement.
PlacementCounts placement_counts(const std::vector<DriftProbe>& probes);
// The probes taken in the placement most of them saw: the device's state
// as most of a calibration's tables saw it. All of them when no placement
// dominates (or none was measured).
std::vector<DriftProbe> probes_in_dominant_placement(const std::vector<DriftProbe>& probes);

// How many of a calibration's drift probes saw each placement of the
// threads (metadata.anchor_probes.placement_counts); nullopt when the
// calibration did not record them.
std::optional<PlacementCounts> calibration_placement_counts(const DeviceProfile& profile);
// The profile's drift probe ("anchor"); nullopt when it has none;
// InputError naming `source` when it is malformed.
std::optional<DriftProbe> calibration_drift_probe(const DeviceProfile& profile, const std::string& source);

// The settings that reproduce `probe` for `model` (as stored in a profile).
DriftProbeSettings drift_probe_settings_of(const DriftProbe& probe, const ModelSpec& model, int threads,
                                  int32_t block_size, uint64_t weights_seed, const SamplingParams& sampling);

}  // namespace servesim
