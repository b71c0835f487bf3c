#include "sim/cost/cost_models.h"

#include <fmt/format.h>

#include "sim/cost/profile_model.h"
#include "sim/errors.h"

namespace servesim {

nlohmann::json CostModels::describe() const {
  nlohmann::json j = target->describe();
  if (from_profile) {
    j["profile"] = profile_source;
    if (draft) j["draft"] = draft->describe();
  }
  return j;
}

CostModels build_cost_models(const CostModelSettings& settings, const ModelSpec& model,
                             const HardwareSpec& hardware, const DraftModel* draft) {
  CostModels out;
  if (!settings.profile) {
    out.target = std::make_unique<RooflineModel>(model, hardware, settings.roofline);
    // The draft is costed by the same roofline on the same hardware.
    if (draft) out.draft = std::make_unique<RooflineModel>(draft->spec, hardware, settings.roofline);
    return out;
  }
  const Quantization& have = settings.profile->quantization;
  if (model.quantization.weights != have.weights || model.quantization.kv_cache != have.kv_cache)
    throw InputError(fmt::format("{} holds the tables of {} kernels only, not of --quantization {} --kv-cache-dtype "
                                 "{}; calibrate that precision (`servesim calibrate --quantization {} "
                                 "--kv-cache-dtype {}`) or predict with the roofline (drop --profile)",
                                 settings.profile_source, settings.profile->precision(),
                                 to_string(model.quantization.weights), to_string(model.quantization.kv_cache),
                                 to_string(model.quantization.weights), to_string(model.quantization.kv_cache)));
  out.from_profile = true;
  out.profile_source = settings.profile_source;
  out.target = std::make_unique<ProfileModel>(*settings.profile, model, settings.profile_source);
  if (!draft) return out;
  if (draft->shares_target_weights) {
    // The target's per-layer tables cost the target's first L layers.
    out.draft = std::make_unique<ProfileModel>(
        ProfileModel::for_layers(*settings.profile, draft->spec, settings.profile_source));
  } else {
    if (!settings.draft_profile)
      throw InputError(fmt::format("with --profile, the draft {} needs its own --draft-profile (`servesim "
                                   "calibrate --model {}`)",
                                   draft->spec.name, draft->spec.name));
    out.draft = std::make_unique<ProfileModel>(*settings.draft_profile, draft->spec, settings.draft_profile_source);
  }
  return out;
}

}  // namespace servesim
