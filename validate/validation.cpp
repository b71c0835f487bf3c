#include "validate/validation.h"

#include <stdexcept>

#include <fmt/format.h>

#include "engine/simulation.h"
#include "kernels/decoder/device_choice.h"
#include "sim/cost/cost_jitter.h"
#include "sim/cost/cost_models.h"
#include "sim/cost/profile_model.h"
#include "sim/cost/speculative_cost.h"
#include "sim/errors.h"
#include "validate/replay.h"

namespace servesim {

ValidationMode parse_validation_mode(const std::string& name) {
  if (name == "replay") return ValidationMode::Replay;
  if (name == "predict") return ValidationMode::Predict;
  throw InputError(fmt::format("--mode '{}': expected replay or predict", name));
}

const char* to_string(ValidationMode mode) { return mode == ValidationMode::Replay ? "replay" : "predict"; }

AcceptanceModel measured_acceptance(const SpeculativeSetup& setup, const SpeculativeStats& measured) {
  if (setup.acceptance_rate) return AcceptanceModel::independent(*setup.acceptance_rate);
  int64_t full_steps = 0;
  for (int64_t n : measured.accepted_length_histogram()) full_steps += n;
  if (full_steps > 0) return AcceptanceModel::histogram(measured.accepted_length_histogram(), "the measured run");
  return AcceptanceModel::curve(measured.acceptance_rate_per_position());
}

void check_validation_options(const ValidationOptions& options) {
  check_host_drift_options(options.host_drift);
  if (options.predict_draws < 1 || options.predict_draws > kMaxDraws)
    throw InputError(fmt::format("--predict-draws {}: expected 1 .. {}", options.predict_draws, kMaxDraws));
  if (options.predict_jitter_sigma) {
    if (options.predict_draws == 1)
      throw InputError("--predict-jitter applies with --predict-draws N > 1 (one simulation is drawn without jitter)");
    (void)CostJitter::lognormal(*options.predict_jitter_sigma);  // InputError when out of range
  }
}

namespace {

// The profile and the run it predicts, where they disagree in ways worth a look.
std::vector<std::string> profile_warnings(const EngineSetup& setup, const SchedulerConfig& config,
                                          const DeviceProfile& profile) {
  std::vector<std::string> w;
  const DeviceChoice device = parse_device(setup.device);
  if (profile.device_kind != device.kind())
    w.push_back(fmt::format("the profile was measured on device '{}', the run uses '{}'", profile.device_kind,
                            device.name()));
  if (!device.cuda && setup.threads > 0 && profile.threads > 0 && setup.threads != profile.threads)
    w.push_back(fmt::format("the profile was measured with {} threads, the run uses {}", profile.threads,
                            setup.threads));
  if (profile.block_size != config.block_size)
    w.push_back(fmt::format("the profile timed attention with {}-token KV blocks, the run uses {}",
                            profile.block_size, config.block_size));
  if (const std::string unsteady = profile.unsteadiness_warning(); !unsteady.empty())
    w.push_back("the profile's calibration: " + unsteady);
  if (setup.decoding.honor_eos)
    w.push_back("--honor-eos: the real run stops requests at EOS, the predict simulation generates every "
                "requested token");
  return w;
}

// The profile models of the target and (speculating) its draft.
CostModels validation_cost_models(const EngineSetup& setup, const DeviceProfile& profile,
                                  const std::string& profile_source, const DeviceProfile* draft_profile) {
  // The tables hold one precision's kernels: a run at another is refused
  // (the quantization by build_cost_models, through setup.model).
  const DecoderPrecision run = setup.precision.on(parse_device(setup.device));
  if (profile.dtype != run.dtype)
    throw InputError(fmt::format("{} holds the tables of {} kernels, the run serves {}: calibrate with --dtype {} "
                                 "(or run with the profile's)",
                                 profile_source, profile.precision(), run.describe(),
                                 run.dtype == "bf16" ? "bfloat16" : "float32"));
  CostModelSettings settings;
  settings.profile = profile;
  settings.profile_source = profile_source;
  if (draft_profile) settings.draft_profile = *draft_profile;
  const std::optional<DraftModel> draft = engine_draft_model(setup.speculative, setup.model);
  const bool speculating = draft && setup.scheduler.num_speculative_tokens > 0;
  return build_cost_models(settings, setup.model, HardwareSpec{}, speculating ? &*draft : nullptr);
}

}  // namespace

ValidationResult run_validation(const EngineSetup& setup, const Workload& workload, const DeviceProfile& profile,
                                const std::string& profile_source, const ValidationCallbacks& callbacks,
                                const ValidationOptions& options) {
  // A profile of another model shape is refused before anything is served.
  const CostModels costs = validation_cost_models(setup, profile, profile_source, options.draft_profile);
  const auto& calibrated = dynamic_cast<const ProfileModel&>(*costs.target);
  check_validation_options(options);
  const SchedulerConfig config = engine_scheduler_config(setup);
  const int32_t k = config.num_speculative_tokens;

  ValidationResult v;
  v.profile_source = profile_source;
  v.warnings = profile_warnings(setup, config, profile);

  // record: the real run, every plan kept, host drift watching.
  const bool separate_draft = k > 0 && setup.speculative.self_draft_layers == 0;
  HostDriftWatch drift(options.host_drift, setup, config, profile, separate_draft ? options.draft_profile : nullptr,
                       callbacks.note);
  for (const std::string& w : drift.warnings()) v.warnings.push_back(w);
  IterationRecorder recorder(v.iterations);
  EngineRunOptions run;
  run.progress = callbacks.run_progress;
  run.on_ready = callbacks.on_ready;
  run.observers.push_back(&recorder);
  drift.attach(run);
  drift.before_real_run();
  v.measured = run_engine(setup, workload, run);
  drift.after_real_run();
  drift.finish(v.measured.records, calibrated);
  CostMultiplier* timeline = drift.timeline();
  v.host_drift = drift.report();
  v.core_latency_ns = drift.core_latency_ns();
  v.cost_model = costs.describe();
  v.config = engine_setup_to_json(setup, v.measured);
  if (const nlohmann::json stopped = drift.clock_stopped(); !stopped.is_null()) v.config["clock_stopped"] = stopped;

  // Per iteration: the predicted cost of each real plan.
  const int32_t block_size = v.measured.scheduler.block_size;
  std::vector<double> starts;
  for (const IterationRecord& it : v.measured.records.iterations) starts.push_back(it.start_s);
  if (k > 0) {
    // The drafts each verification accepted are the recording's.
    v.predicted_iteration_s = cost_recorded(v.iterations, SpeculativeCost(*costs.target, *costs.draft), block_size);
  } else {
    v.predicted_iteration_s = cost_recorded(v.iterations, *costs.target, block_size, timeline, starts);
  }
  const std::vector<double> measured_s = measured_times(v.iterations);
  v.iteration = iteration_errors(v.iterations, v.predicted_iteration_s);
  v.iteration_shapes = shape_breakdown(v.iterations, v.predicted_iteration_s);
  v.iteration_noise = noise_around_rolling_level(measured_s, v.predicted_iteration_s);
  v.noise_floor = noise_floor(v.iteration_noise);

  // replay: the real iterations re-timed with their predicted costs.
  v.replay = replay_timing(v.measured.records, v.iterations, v.predicted_iteration_s);
  v.replay_summary = summarize_run(v.replay, setup.slo);

  // predict: an independent simulation, same requests and scheduler
  // settings; with draws, more of them with each cost jittered.
  std::optional<SimulatedSpeculation> speculation;
  if (k > 0) {
    if (!v.measured.speculative) throw std::logic_error("a speculative run reported no statistics");
    speculation = SimulatedSpeculation{measured_acceptance(setup.speculative, *v.measured.speculative),
                                       setup.workload.seed};
    v.predict_acceptance = speculation->acceptance.to_json();
  }
  auto simulate_with = [&](CostMultiplier* jitter) {
    std::vector<CostMultiplier*> multipliers;
    if (timeline) multipliers.push_back(timeline);
    if (jitter) multipliers.push_back(jitter);
    return simulate_costed(v.measured.scheduler, workload, costs, speculation ? &*speculation : nullptr,
                           multipliers, setup.slo);
  };
  SimulationOutput single = simulate_with(nullptr);
  v.predict = std::move(single.records);
  v.predict_speculative = single.speculative;
  v.predict_single_summary = single.summary;
  v.predict_summary = v.predict_single_summary;
  if (options.predict_draws > 1 && !options.predict_jitter_sigma && v.iteration_noise.size() < 2) {
    v.warnings.push_back(fmt::format("--predict-draws {}: one simulation only, the run had too few iterations to "
                                     "measure its noise",
                                     options.predict_draws));
  } else if (options.predict_draws > 1) {
    const CostJitter jitter =
        options.predict_jitter_sigma
            ? CostJitter::lognormal(*options.predict_jitter_sigma)
            : CostJitter::resampled(v.iteration_noise,
                                    "the real run's iterations: measured / predicted, over its rolling median "
                                    "across 51 iterations");
    v.predict_jitter = jitter.to_json();
    v.predict_bands = simulate_draws(options.predict_draws, jitter, setup.workload.seed,
                                     [&](CostMultiplier& m) { return simulate_with(&m).summary; });
    v.predict_summary = with_medians(v.predict_single_summary, *v.predict_bands);
  }
  return v;
}

}  // namespace servesim
