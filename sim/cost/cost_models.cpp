#include "sim/cost/cost_models.h"

#include <fmt/format.h>

#include "sim/cost/parallel_cost_model.h"
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

namespace {

// --interconnect, else the hardware JSON's "interconnect", else the preset
// of the hardware's name; pcie4 for hardware without one, saying so.
Interconnect group_interconnect(const CostModelSettings& settings, const HardwareSpec& hardware) {
  if (settings.interconnect) {
    Interconnect table = *settings.interconnect;
    if (!table.p2p_given) {
      // A measured all-reduce table says nothing of point-to-point sends:
      // take the hardware's link for pipeline stages.
      const Interconnect link = hardware.interconnect.empty() ? interconnect_for_hardware(hardware.name)
                                                               : resolve_interconnect(hardware.interconnect);
      table.p2p_latency_s = link.p2p_latency_s;
      table.p2p_bandwidth = link.p2p_bandwidth;
      table.source += fmt::format("; p2p (pipeline stages) from the {} preset of {}, the table giving none",
                                  link.name, hardware.name);
    }
    return table;
  }
  if (!hardware.interconnect.empty()) return resolve_interconnect(hardware.interconnect);
  Interconnect link = interconnect_for_hardware(hardware.name);
  if (!hardware_has_interconnect(hardware.name))
    link.description += fmt::format(" -- assumed: {} names no interconnect (give --interconnect, or "
                                    "\"interconnect\" in its hardware JSON)",
                                    hardware.name);
  return link;
}

// One GPU's build_cost_models: the rank's compute at `parallel`'s shapes
// (single_gpu: the model's own), without communication.
CostModels rank_cost_models(const CostModelSettings& settings, const ModelSpec& model,
                            const HardwareSpec& hardware, const DraftModel* draft, const ParallelConfig& parallel);

}  // namespace

CostModels build_cost_models(const CostModelSettings& settings, const ModelSpec& model,
                             const HardwareSpec& hardware, const DraftModel* draft, const ParallelConfig& parallel) {
  parallel.validate_for(model);
  if (draft && !draft->shares_target_weights) {
    try {
      parallel.validate_for(draft->spec);
    } catch (const InputError& e) {
      throw InputError(fmt::format("the draft {} runs at the target's TP degree: {}", draft->spec.name, e.what()));
    }
  }
  if (draft && parallel.pipeline_parallel_size > 1)
    throw InputError("speculative decoding with --pipeline-parallel-size > 1 is not modelled (vLLM does not "
                     "support it either); use tensor parallelism");
  const int32_t tp_profiled = settings.profile ? settings.profile->tensor_parallel_size : 1;
  if (settings.profile && tp_profiled != parallel.tensor_parallel_size)
    throw InputError(fmt::format("{} timed the kernels of one rank of TP {}, not of TP {}; calibrate with "
                                 "`servesim calibrate --tensor-parallel-size {}` or predict with the roofline",
                                 settings.profile_source, tp_profiled, parallel.tensor_parallel_size,
                                 parallel.tensor_parallel_size));
  CostModels out = rank_cost_models(settings, model, hardware, draft, parallel);
  out.parallel = parallel;
  if (parallel.single_gpu()) return out;
  const Interconnect interconnect = group_interconnect(settings, hardware);
  auto parallel_target = std::make_unique<ParallelCostModel>(
      std::move(out.target), CommunicationModel(model, parallel, interconnect), parallel);
  out.communication = &parallel_target->communication();
  out.target = std::move(parallel_target);
  if (out.draft)
    out.draft = std::make_unique<ParallelCostModel>(std::move(out.draft),
                                                    CommunicationModel(draft->spec, parallel, interconnect), parallel);
  return out;
}

namespace {

CostModels rank_cost_models(const CostModelSettings& settings, const ModelSpec& model,
                            const HardwareSpec& hardware, const DraftModel* draft, const ParallelConfig& parallel) {
  CostModels out;
  if (!settings.profile) {
    out.target = std::make_unique<RooflineModel>(model, hardware, settings.roofline, parallel);
    // The draft is costed by the same roofline on the same hardware.
    if (draft) out.draft = std::make_unique<RooflineModel>(draft->spec, hardware, settings.roofline, parallel);
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
  // A TP profile's tables are one rank's: its model is costed at the shard's shapes.
  const int32_t tp = parallel.tensor_parallel_size;
  DeviceProfile rank_profile = *settings.profile;
  rank_profile.model = tensor_parallel_shard(settings.profile->model, tp);
  out.target = std::make_unique<ProfileModel>(rank_profile, tensor_parallel_shard(model, tp), settings.profile_source);
  if (!draft) return out;
  if (draft->shares_target_weights) {
    // The target's per-layer tables cost the target's first L layers.
    out.draft = std::make_unique<ProfileModel>(
        ProfileModel::for_layers(rank_profile, tensor_parallel_shard(draft->spec, tp), settings.profile_source));
  } else {
    if (!settings.draft_profile)
      throw InputError(fmt::format("with --profile, the draft {} needs its own --draft-profile (`servesim "
                                   "calibrate --model {}`)",
                                   draft->spec.name, draft->spec.name));
    if (settings.draft_profile->tensor_parallel_size != tp)
      throw InputError(fmt::format("{} timed one rank of TP {}, not of TP {}", settings.draft_profile_source,
                                   settings.draft_profile->tensor_parallel_size, tp));
    DeviceProfile draft_rank = *settings.draft_profile;
    draft_rank.model = tensor_parallel_shard(settings.draft_profile->model, tp);
    out.draft = std::make_unique<ProfileModel>(draft_rank, tensor_parallel_shard(draft->spec, tp),
                                               settings.draft_profile_source);
  }
  return out;
}

}  // namespace

}  // namespace servesim
