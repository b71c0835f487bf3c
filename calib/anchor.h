// Re-anchoring a device profile on the device's state now.
//
// A shared machine (a VM on a busy host) does not keep its speed: on the
// 2-core VM servesim is developed on, small-110m's batch-1 decode step
// measured 7.1 ms and 10.9 ms one minute apart, with the same binary and
// inputs, while it stays within a few percent over the seconds of one run.
// A profile measured at one moment cannot predict a run made at another
// moment of such a machine. The anchor probes tell the two moments apart:
//   decode probe  - the decoder's own 1-token decode iteration (a decoder of
//                   the model's `layers` layers with random weights,
//                   `context` tokens of context), which streams the weights
//                   as every decode does: memory-bound;
//   GEMM probe    - cpu::matmul on an n^3 product: compute-bound.
// calibrate measures both before each benchmark family and at its end and
// stores their median in the profile (the device's typical state while the
// tables were measured); validate measures them again just before and just
// after the real run, reports the ratios (the device's drift) and, with
// --anchor apply, re-anchors the predictions on the run's probes (the
// geometric mean of before and after): the ProfileModel scales every
// operator by
//   memory_scale  = decode probe now / decode probe at calibration   (a time ratio)
//   compute_scale = GEMM FLOP/s at calibration / GEMM FLOP/s now
// in proportion to the operator's memory-bound and compute-bound shares
// (calib/profile_model.h). On the 2-core VM applying them brought one run
// of experiments/validation_cpu within 10% in replay mode at all six points
// (unanchored: up to 26% off) but over-corrected another (the whole-model
// probe slowed more than the kernels timed alone), so validate reports the
// drift by default and applies it only with --anchor apply.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/placement.h"
#include "kernels/decoder/sampler.h"
#include "sim/model_spec.h"

namespace servesim {

struct AnchorProbe {
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
  // Throws InputError naming `source` for a malformed object.
  static AnchorProbe from_json(const nlohmann::json& j, const std::string& source);
};

struct AnchorSettings {
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
AnchorProbe measure_anchor(const AnchorSettings& settings);

// The probes' decoder and GEMM, built once and measured many times (the
// calibration probes between its benchmark families).
class AnchorProber {
 public:
  explicit AnchorProber(const AnchorSettings& settings);
  ~AnchorProber();
  AnchorProbe measure();

 private:
  struct State;
  AnchorSettings settings_;
  std::unique_ptr<State> state_;
};

// The element-wise median of several probes (the device's typical state
// over them); layers, context and gemm_n from the first. Requires >= 1.
AnchorProbe median_probe(const std::vector<AnchorProbe>& probes);

// How many probes saw each placement.
PlacementCounts placement_counts(const std::vector<AnchorProbe>& probes);
// The probes taken in the placement most of them saw: the device's state
// as most of a calibration's tables saw it. All of them when no placement
// dominates (or none was measured).
std::vector<AnchorProbe> probes_in_dominant_placement(const std::vector<AnchorProbe>& probes);

// The settings that reproduce `probe` for `model` (as stored in a profile).
AnchorSettings anchor_settings_of(const AnchorProbe& probe, const ModelSpec& model, int threads,
                                  int32_t block_size, uint64_t weights_seed, const SamplingParams& sampling);

struct AnchorScales {
  double memory = 1.0;   // multiply memory-bound time by this
  double compute = 1.0;  // multiply compute-bound time by this
};
AnchorScales anchor_scales(const AnchorProbe& at_calibration, const AnchorProbe& now);

}  // namespace servesim
