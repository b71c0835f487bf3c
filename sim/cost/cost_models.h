// The one place cost models are built: the roofline on a hardware's
// datasheet, or the profile model from a calibrated device profile, for the
// target and (when the run speculates) its draft.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "sim/cost/cost_model.h"
#include "sim/cost/profile.h"
#include "sim/cost/roofline_model.h"
#include "sim/draft_model.h"
#include "sim/cost/communication_model.h"
#include "sim/hardware_spec.h"
#include "sim/interconnect.h"
#include "sim/model_spec.h"
#include "sim/parallel_config.h"

namespace servesim {

struct CostModelSettings {
  // Without a profile: the roofline with these options on the hardware.
  RooflineOptions roofline;
  // With one: the profile model; `profile_source` names it in messages and
  // in config.cost_model.profile.
  std::optional<DeviceProfile> profile;
  std::string profile_source = "profile";
  // A separate draft's profile (a self-draft is costed by `profile`'s tables
  // for its layers); needed with a profile and a separate draft.
  std::optional<DeviceProfile> draft_profile;
  std::string draft_profile_source = "--draft-profile";
  // Tensor/pipeline parallelism: the interconnect between the GPUs (unset:
  // the hardware preset's, interconnect_for_hardware).
  std::optional<Interconnect> interconnect;
};

struct CostModels {
  std::unique_ptr<CostModel> target;
  std::unique_ptr<CostModel> draft;  // null without a draft
  // summary.json's config.cost_model: the target's description; with a
  // profile also its source and the draft's description.
  nlohmann::json describe() const;
  bool from_profile = false;
  std::string profile_source;
  // The layout the target was costed for; with more than one GPU, the
  // target is a ParallelCostModel and `communication` its communication.
  ParallelConfig parallel;
  const CommunicationModel* communication = nullptr;
};

// Throws InputError when a profile does not fit the model (or the draft), or
// a separate draft has no profile of its own beside a target's profile.
// With `parallel`, the target (and a draft, at the same TP) is costed per
// rank plus its communication: the roofline at the sharded shapes, or a
// profile calibrated for the TP shard (`calibrate --tensor-parallel-size`).
CostModels build_cost_models(const CostModelSettings& settings, const ModelSpec& model,
                             const HardwareSpec& hardware, const DraftModel* draft,
                             const ParallelConfig& parallel = {});

}  // namespace servesim
