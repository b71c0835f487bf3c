// Whole-model iterations at a few sizes, measured just before and just after
// a real run (`validate --anchor rescale`), to re-level a profile's
// predictions on the device's speed at the time of the run.
//
// The anchor probes (calib/anchor.h) re-anchor with a rule: memory-bound
// work moves with a decode step, compute-bound work with a GEMM. On the
// 2-core VM the rule missed decode batches of 3-9 by 13-22% after a change
// of speed, because how much a batch moves with the VM's state depends on
// the CPU kernel it uses (dot products below 8 tokens, Eigen's GEMM from 8).
// These probes measure that instead: decode steps of 1, 2, 4, 8 and 16
// sequences and prefills of 32 and 128 tokens through the real decoder; the
// ProfileModel then multiplies an iteration of T tokens by
//   s(T) = measured(T) / predicted(T) of the probes,
// linear in log T between them and the nearest probe's outside
// (ProfileModel::set_iteration_scale). Each probe runs on the run's own
// model and threads, random weights from the run's seed; contexts of 64.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/decoder/sampler.h"
#include "sim/iteration_plan.h"
#include "sim/model_spec.h"

namespace servesim {

struct IterationProbeSettings {
  ModelSpec model;
  int threads = 0;  // 0: every core
  int32_t block_size = 16;
  uint64_t weights_seed = 0;
  SamplingParams sampling;
  int repetitions = 10;  // timed runs of each plan (prefills: a third as many, at least 3); the median is kept
};

// The probe plans, smallest first: decode steps of 1, 2, 4, 8, 16 sequences
// (context 64 each), then prefills of 32 and 128 tokens.
struct IterationProbePlans {
  std::vector<std::string> names;   // "decode b=4", "prefill 128"
  std::vector<IterationPlan> plans;  // their block tables point into `tables`
  std::vector<std::vector<int32_t>> tables;
  int64_t blocks = 0;  // KV blocks the plans use
};
IterationProbePlans iteration_probe_plans(int32_t block_size);

// Medians of whole-model iterations; one decoder built once, measured many times.
class IterationProber {
 public:
  explicit IterationProber(const IterationProbeSettings& settings);
  ~IterationProber();
  const IterationProbePlans& plans() const;
  std::vector<double> measure();  // seconds, one per plan

 private:
  struct State;
  IterationProbeSettings settings_;
  std::unique_ptr<State> state_;
};

}  // namespace servesim
