// Validation: serve a workload for real once, predict it with the profile
// cost model, and report how far the predictions are from the measurements.
//
//   record  - the real run (engine/decoder_run.h) with an observer that
//             keeps every plan it executed and its measured time
//             (validate/record.h);
//   replay  - the real run's own iterations, each costed by the profile
//             model and re-timed on the replay timeline (validate/replay.h).
//             The batches are the measured ones, so the error is the cost
//             model's alone;
//   predict - an independent simulation of the same workload (same
//             requests, same resolved scheduler settings) with the profile
//             model on a virtual clock (engine/simulation.h): what a user's
//             what-if relies on. Batches may differ from the real run's once
//             times differ;
//   report  - validate/report.h.
// The per-iteration error always compares the predicted cost of each real
// plan with its measured time (the decoder executor's own wall time). On a
// noisy shared host validate/host_drift/ (off by default) adds one
// multiplier timeline to both predictions.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/decoder_run.h"
#include "sim/acceptance.h"
#include "sim/cost/profile.h"
#include "sim/draw_band.h"
#include "sim/metrics.h"
#include "sim/speculative_stats.h"
#include "sim/workload.h"
#include "validate/host_drift/host_drift.h"
#include "validate/iteration_errors.h"
#include "validate/record.h"
#include "validate/shape_breakdown.h"

namespace servesim {

enum class ValidationMode { Replay, Predict };
ValidationMode parse_validation_mode(const std::string& name);  // InputError if unknown
const char* to_string(ValidationMode mode);

struct ValidationResult {
  EngineOutput measured;                       // the real run
  nlohmann::json config;                       // engine_setup_to_json of the real run
  std::vector<RecordedIteration> iterations;   // every plan the real run executed
  std::vector<double> predicted_iteration_s;   // the profile model's cost of each
  IterationErrors iteration;
  ShapeBreakdown iteration_shapes;              // the same errors by kind x sequences x context
  // The run's iteration noise (sim/cost/cost_jitter.h:
  // noise_around_rolling_level): each iteration's measured time over its
  // predicted cost, over that ratio's rolling median across 51 iterations;
  // and its noise floor (iteration_errors.h), the floor iteration.all's
  // MAPE cannot go below on this run.
  std::vector<double> iteration_noise;
  double noise_floor = 0;
  RunRecords replay;                           // replay_timing with the predicted costs
  RunSummary replay_summary;
  RunRecords predict;                          // the independent simulation (no jitter)
  // What predict reports: `predict`'s summary, with TTFT, TPOT and E2E the
  // medians over the draws when ValidationOptions::predict_draws > 1.
  RunSummary predict_summary;
  RunSummary predict_single_summary;           // `predict`'s own
  // With predict_draws > 1: the jitter drawn (CostJitter::to_json) and the
  // band of each statistic over the draws; else null and empty.
  nlohmann::json predict_jitter;
  std::optional<LatencyBands> predict_bands;
  // A speculative run: what the predict simulation's acceptance model drew
  // (the real run's statistics are in measured.speculative), and that model.
  std::optional<SpeculativeStats> predict_speculative;
  nlohmann::json predict_acceptance;
  std::string profile_source;                  // a path, or "quick calibration"
  std::optional<std::string> profile_saved_as; // where a quick calibration was written
  nlohmann::json cost_model;                   // CostModels::describe()
  std::vector<std::string> warnings;           // profile/run mismatches worth a look
  nlohmann::json host_drift;                   // HostDriftWatch::report()
  // Per iteration, the core-to-core latency before it (host drift; NaN
  // where not watched).
  std::vector<double> core_latency_ns;
};

struct ValidationCallbacks {
  std::function<void(const RunProgress&)> run_progress;  // the real run
  std::function<void(const std::string&)> on_ready;      // decoder built
  std::function<void(const std::string&)> note;          // host drift and the like
};

// Predict's jittered simulations by default (ValidationOptions::predict_draws):
// each costs a simulation of the workload, milliseconds for a validation's.
inline constexpr int kDefaultPredictDraws = 51;

struct ValidationOptions {
  HostDriftOptions host_drift;  // off by default
  // Predict's simulations (engine/simulation.h: simulate_draws). 1: one
  // simulation with the cost model's durations. N > 1 (the default): that
  // one and N seeded simulations more, each iteration's cost times a
  // multiplier drawn from the device's noise, and the median over those N of
  // each TTFT, TPOT and E2E statistic predicted (their 10th-90th percentile
  // band reported beside it). The noise: with predict_jitter_sigma,
  // lognormal of that sigma; without, the real run's own iteration noise,
  // resampled. That takes only the spread of the run's iterations, not their
  // level or order.
  int predict_draws = kDefaultPredictDraws;
  std::optional<double> predict_jitter_sigma;
  // The separate draft's profile of a speculative run (see run_validation).
  const DeviceProfile* draft_profile = nullptr;
};

// InputError, naming the flag, for options that cannot be run together
// or are out of range (run_validation checks them before serving; the CLI
// before any quick calibration).
void check_validation_options(const ValidationOptions& options);

// Serves `workload` for real with `setup` and predicts it both ways with the
// profile model built from `profile` (InputError if it was measured for
// another model shape, before anything is served).
// A speculative run (setup.scheduler.num_speculative_tokens > 0) is costed
// with the draft's passes too: a self-draft by `profile`'s tables for its
// layers, a separate draft by options.draft_profile (required then). Predict
// draws acceptance from what the real run measured: the controlled rate when
// the run set one (--acceptance-rate), else the run's accepted-length
// histogram (its per-position rates when no step proposed the full k).
ValidationResult run_validation(const EngineSetup& setup, const Workload& workload, const DeviceProfile& profile,
                                const std::string& profile_source, const ValidationCallbacks& callbacks = {},
                                const ValidationOptions& options = {});

// The acceptance model predict uses for a real run's statistics (above).
AcceptanceModel measured_acceptance(const SpeculativeSetup& setup, const SpeculativeStats& measured);

}  // namespace servesim
