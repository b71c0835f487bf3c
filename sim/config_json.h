// The parts of summary.json's "config" that every run shares (simulate,
// run, validate): the model, the resolved scheduler, the workload and the
// speculative settings.
#pragma once

#include <nlohmann/json.hpp>

#include "sim/acceptance.h"
#include "sim/draft_model.h"
#include "sim/model_spec.h"
#include "sim/scheduler.h"
#include "sim/workload.h"

namespace servesim {

nlohmann::json model_to_json(const ModelSpec& model);
// The model as a Hugging Face config.json that resolve_model() reads back
// (architectures, model_type, the shape, rope_theta, rms_norm_eps, eos).
nlohmann::json hf_config_json(const ModelSpec& model);
nlohmann::json scheduler_to_json(const SchedulerConfig& config, double gpu_memory_utilization);
nlohmann::json workload_to_json(const WorkloadSpec& workload);

// config.speculative: k, the batch size that disables it, the draft and the
// acceptance model (null when absent, as in a real run).
nlohmann::json speculative_to_json(const SchedulerConfig& config, const DraftModel* draft,
                                   const AcceptanceModel* acceptance);

}  // namespace servesim
