// The profile cost model: an Executor that predicts an iteration's time from
// a calibrated DeviceProfile instead of datasheet numbers.
#pragma once

#include "calib/profile.h"
#include "sim/executor.h"

namespace servesim {

// Seconds per component for one iteration (summed over layers).
struct ProfileBreakdown {
  double gemm = 0;               // qkv, o, gate_up, down projections
  double elementwise = 0;        // norms, rotary + KV write, SwiGLU, residuals
  double prefill_attention = 0;  // every prefill chunk
  double decode_attention = 0;   // the decode batch
  double lm_head = 0;            // final norm + LM head + sampling
  double overhead = 0;           // fixed per iteration
  double total() const {
    return gemm + elementwise + prefill_attention + decode_attention + lm_head + overhead;
  }
};

class ProfileModel final : public Executor {
 public:
  // Throws InputError if the profile is not usable for `model`.
  ProfileModel(DeviceProfile profile, const ModelSpec& model);

  std::string name() const override { return "profile"; }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  ProfileBreakdown breakdown(const IterationPlan& plan) const;
  const DeviceProfile& profile() const { return profile_; }

 private:
  DeviceProfile profile_;
  ModelSpec model_;
};

}  // namespace servesim
