// Validation: serve a workload for real once, predict it with the profile
// cost model, and report how far the predictions are from the measurements.
//
// One real run gives two predictions:
//   replay  - the real run's own iterations, each costed by the ProfileModel
//             and re-timed on the replay clock (replay_timing below). The
//             batches are the measured ones, so the error is the cost
//             model's alone.
//   predict - an independent simulation of the same workload (same requests,
//             same resolved scheduler settings) with the ProfileModel on a
//             virtual clock: what a user's what-if relies on. Batches may
//             differ from the real run's once times differ.
// The per-iteration error always compares the predicted cost of each real
// plan with its measured time (the decoder executor's own wall time).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "calib/in_situ_refresh.h"
#include "calib/placement_ratios.h"
#include "calib/profile.h"
#include "kernels/decoder/engine.h"
#include "sim/clock.h"
#include "sim/cost_jitter.h"
#include "sim/draw_band.h"
#include "sim/executor.h"
#include "sim/metrics.h"
#include "sim/scheduler.h"
#include "sim/speculative_cost.h"
#include "sim/workload.h"

namespace servesim {

// ------------------------------------------------------------ recording

// One sequence of an executed plan, and what the executor reported for it.
struct RecordedSequence {
  int64_t request_id = 0;
  int32_t num_query_tokens = 0;
  int32_t num_cached_tokens = 0;
  bool is_prefill = false;
  bool samples = false;
  int32_t emitted_tokens = -1;  // -1: the executor left emitted_tokens empty (one token if sampling)
  bool eos = false;             // the executor reported end-of-sequence
};

enum class IterationKind { Decode, Prefill, Mixed };
const char* to_string(IterationKind kind);
// decode: no prefill sequence; prefill: no decode sequence; mixed: both.
IterationKind iteration_kind(int32_t prefill_sequences, int32_t decode_sequences);

struct RecordedIteration {
  std::vector<RecordedSequence> sequences;
  double measured_s = 0;  // IterationResult::duration_s of the real executor
  int32_t prefill_tokens = 0, decode_tokens = 0;
  int32_t prefill_sequences = 0, decode_sequences = 0;
  // Where the decoder's threads were just before it (calib/placement.h);
  // NaN when not watched.
  double core_latency_ns = std::numeric_limits<double>::quiet_NaN();
  IterationKind kind() const { return iteration_kind(prefill_sequences, decode_sequences); }
};

// Forwards to `inner` and appends every executed plan and its result to
// `out`. Adds a copy of the plan's sequences per iteration, nothing else.
class RecordingExecutor final : public Executor {
 public:
  // placement_threads >= 0: also measures the threads' placement before
  // each iteration, outside its timing (core_to_core_latency_ns of that
  // team size, 5-40 us); -1: does not.
  RecordingExecutor(Executor& inner, std::vector<RecordedIteration>& out, int placement_threads = -1)
      : inner_(inner), out_(out), placement_threads_(placement_threads) {}
  std::string name() const override { return inner_.name(); }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override { inner_.on_request_finished(request_id); }
  const SpeculativeStats* speculative_stats() const override { return inner_.speculative_stats(); }

 private:
  Executor& inner_;
  std::vector<RecordedIteration>& out_;
  int placement_threads_;
};

// Multiplies costs[i] by `ratios`' ratio for iteration i in the placement
// it ran in (calib/placement_ratios.h; 1 in the tables' own or unknown).
void cost_in_placement(const std::vector<RecordedIteration>& iterations, const PlacementRatios& ratios,
                       std::vector<double>& costs);

// Forwards to `inner` (a cost model) and multiplies its cost by `ratios`'
// ratio for the placement a real run had at the simulated time: the
// placement of its last iteration that started by then (`starts_s`,
// increasing, with `placements`), its first before that.
class PlacementTimelineExecutor final : public Executor {
 public:
  PlacementTimelineExecutor(Executor& inner, const Clock& clock, const PlacementRatios& ratios,
                            std::vector<double> starts_s, std::vector<Placement> placements)
      : inner_(inner), clock_(clock), ratios_(ratios), starts_s_(std::move(starts_s)),
        placements_(std::move(placements)) {}
  std::string name() const override { return inner_.name(); }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override { inner_.on_request_finished(request_id); }
  Placement placement_at(double t) const;

 private:
  Executor& inner_;
  const Clock& clock_;
  const PlacementRatios& ratios_;
  std::vector<double> starts_s_;
  std::vector<Placement> placements_;
};

// Forwards to `inner` and multiplies each plan's cost by the tracked level
// of its kind at the simulated time (calib/in_situ_refresh.h:
// TrackedLevels::at, at times on the real run's clock): a decode-only
// plan's by the decode probes' level, a plan with a prefill by the prefill
// probes' level (1 without prefill probes). The decode level does not
// carry to iterations with a prefill: over 1428 prefill and 933 mixed
// iterations of 66 points of eleven interleave runs on the 2-core AMD VM,
// scaling them by it raised their MAPE from 3.3% to 3.9% and from 2.7% to
// 3.1% (decode steps: 5.0% without it, 4.2% with it;
// experiments/validation_cpu/level_by_kind.py).
class LevelTimelineExecutor final : public Executor {
 public:
  LevelTimelineExecutor(Executor& inner, const Clock& clock, const TrackedLevels& levels)
      : inner_(inner), clock_(clock), levels_(levels) {}
  std::string name() const override { return inner_.name(); }
  void execute(const IterationPlan& plan, IterationResult& result) override;
  void on_request_finished(int64_t request_id) override { inner_.on_request_finished(request_id); }

 private:
  Executor& inner_;
  const Clock& clock_;
  const TrackedLevels& levels_;
};

// Rebuilds a recorded plan for a cost model. Block tables are zero-filled
// spans of the right length (cost models read token counts, not block ids);
// they point into `block_storage`, which must outlive the plan's use.
void rebuild_plan(const RecordedIteration& iteration, int64_t index, int32_t block_size,
                  IterationPlan& plan, std::vector<int32_t>& block_storage);

// The cost `model` predicts for every recorded plan, seconds.
std::vector<double> cost_iterations(const std::vector<RecordedIteration>& iterations, Executor& model,
                                    int32_t block_size);
// The same for a speculative run: each plan's draft passes and verification,
// with the drafts each decode accepted in the real run (emitted - 1).
std::vector<double> cost_iterations(const std::vector<RecordedIteration>& iterations,
                                    SpeculativeCostModel& model, int32_t block_size);

// ------------------------------------------------------------ replay

// Re-times a real run with other iteration durations (one per recorded
// iteration) on the replay clock (calib/replay_clock.h): iteration k starts
// at the replayed end of k-1 plus the real gap between them, and lasts
// durations_s[k]. Every request instant is read on that clock: its arrival
// is the real arrival mapped onto it (so a closed loop's release follows
// the replayed finish that released it), it is first scheduled at the start
// of its first plan, its tokens are emitted at the end of each iteration in
// which it samples (as many as the executor reported, clamped as
// Scheduler::complete does), and it finishes at the emission that completes
// its output (or carried EOS). A request's TTFT is thus the replayed time of
// the iterations it waited through and was prefilled in; the replay's lead
// or lag from before it arrived does not enter. Rejections, preemption
// counts and KV figures are copied from the measured run. Needs the measured
// iteration records (their real starts); throws std::invalid_argument
// without them or when the durations do not match the iterations. The
// result summarises with summarize_run (same TTFT/TPOT/E2E definitions as
// any run). With the measured durations it reproduces the run exactly.
RunRecords replay_timing(const RunRecords& measured, const std::vector<RecordedIteration>& iterations,
                         std::span<const double> durations_s);

// ------------------------------------------------------------ errors

// predicted / measured - 1 (positive: over-prediction); NaN when measured <= 0.
double rel_error(double predicted, double measured);

struct ClassError {
  double mape = 0;  // mean of |predicted - measured| / measured; NaN when count == 0
  double bias = 0;  // mean of predicted / measured - 1; NaN when count == 0
  int64_t count = 0;
};
struct IterationErrors {
  ClassError all, decode, prefill, mixed;
};
// Iterations with measured <= 0 are skipped (none occur in a real run).
IterationErrors iteration_errors(std::span<const double> measured, std::span<const double> predicted,
                                 std::span<const IterationKind> kinds);

// ------------------------------------------------------------ validation

enum class ValidationMode { Replay, Predict };
ValidationMode parse_validation_mode(const std::string& name);  // InputError if unknown
const char* to_string(ValidationMode mode);

struct ValidationResult {
  EngineOutput measured;                       // the real run
  nlohmann::json config;                       // engine_setup_to_json of the real run
  std::vector<RecordedIteration> iterations;   // every plan the real run executed
  std::vector<double> predicted_iteration_s;   // ProfileModel cost of each
  IterationErrors iteration;
  // The run's iteration noise (sim/cost_jitter.h: noise_around_rolling_level):
  // each iteration's measured time over its predicted cost, over that
  // ratio's rolling median across 51 iterations. The MAPE of predictions
  // scaled by that rolling median (mean |1 / noise - 1|) is the error a
  // model that knew the run's level at every moment, and nothing else,
  // would have: the floor iteration_mape.all cannot go below on this run.
  std::vector<double> iteration_noise;
  double iteration_mape_floor = 0;
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
  nlohmann::json cost_model;                   // ProfileModel::describe()
  std::vector<std::string> warnings;           // profile/run mismatches worth a look
  // The anchor probes: {measured, applied, reason | (calibration, before,
  // after, run, scales {memory, compute}) per profile}.
  nlohmann::json anchor;
  // The threads' placement (calib/placement.h) over the real run's
  // iterations and over the calibration's anchor probes: {watched, reason |
  // (threshold_ns, run {near, far, unknown, median_core_latency_ns},
  // calibration {near, far, unknown} | null, calibration_placement,
  // run_share_in_calibration_placement)}.
  nlohmann::json placement;
  // The in-situ refresh (ValidationOptions::in_situ, calib/in_situ_refresh.h):
  // {refreshed: false, reason} or {refreshed: true, rule, settings, samples
  // {before, after} per placement, calibration and run {gemm_in_situ,
  // decode_in_situ}, drift {decode, prefill, largest}}.
  nlohmann::json in_situ;
};

struct ValidationCallbacks {
  std::function<void(const RunProgress&)> run_progress;  // the real run
  std::function<void(const std::string&)> on_ready;      // decoder built
  std::function<void(const std::string&)> note;          // anchor probes and the like
};

// Predict's jittered simulations by default (ValidationOptions::predict_draws):
// each costs a simulation of the workload, milliseconds for a validation's.
inline constexpr int kDefaultPredictDraws = 51;

// The interleaved timings' default intervals, kDefaultInterleaveIntervalS and
// kDefaultInterleavePrefillIntervalS, are in calib/in_situ_refresh.h.

struct ValidationOptions {
  // The profiles' anchor probes (calib/anchor.h), measured again just
  // before and just after the real run: Off skips them; Report reports how
  // much slower or faster the device ran than at calibration (default);
  // Apply also re-anchors the predictions by those scales. Needs profiles
  // with an anchor, measured on the run's device kind; a run on cuda is not
  // probed (the probes are CPU code, and a GPU keeps its speed): the report
  // says "not probed (cuda)".
  enum class Anchor { Off, Report, Apply } anchor = Anchor::Report;
  // The threads' placement before each iteration of the real run
  // (calib/placement.h) is always recorded on the CPU. Apply also costs
  // each iteration in its placement: an iteration that ran with the threads
  // in the other placement than the profile's tables is multiplied by the
  // profile's placement ratio for its shape (calib/placement_ratios.h), in
  // replay, and in predict at the simulated time by the placement the real
  // run had then. Needs a profile with placement ratios and a run without
  // speculation; otherwise the report says why it was not applied.
  enum class PlacementCosting { Report, Apply } placement = PlacementCosting::Report;
  // The profile's in-situ factors (f and g, calib/profile_model.h): Profile
  // uses them as calibrated; Refresh measures them again just before and
  // just after the real run (calib/in_situ_refresh.h) and predicts with
  // those. Refresh and Anchor::Apply both correct for the device's drift:
  // run_validation refuses the two together. Not applied on cuda or to a
  // speculative run (the report says why).
  // Track also times 1-sequence decode steps on the served decoder in the
  // run's idle gaps (before an arrival that is known not to come before
  // they end: no request waits for them) and scales every iteration's cost
  // by the level they measured around its time (in_situ_refresh.h:
  // track_levels relative to their median over the run, TrackedLevels::at), in
  // replay at the iteration's real start and in predict at the simulated
  // time (decode-only iterations: LevelTimelineExecutor).
  // Interleave times decode steps of the served batch (the largest of the
  // refresh's batch sizes not above the last iteration's) between served
  // iterations instead, every interleave_interval_s of the run's clock, with the
  // clock stopped while they run (ServeHooks::between_iterations: no
  // request's latency and no iteration includes them) on KV blocks of
  // their own, so the busy stretches of a loaded run are followed too and
  // every probe runs where served steps run (none after an idle wait); its
  // levels are the probes' own (TrackLevelBasis::Refresh). Every
  // interleave_prefill_interval_s (0: never) one of them is a whole-model
  // prefill instead, whose level scales the iterations with a prefill.
  enum class InSitu { Profile, Refresh, Track, Interleave } in_situ = InSitu::Profile;
  double interleave_interval_s = kDefaultInterleaveIntervalS;                 // 0.01 .. 60
  double interleave_prefill_interval_s = kDefaultInterleavePrefillIntervalS;  // 0, or 0.01 .. 60
  // Predict's simulations (sim/cost_jitter.h, sim/draw_band.h). 1: one
  // simulation with the cost model's durations. N > 1 (the default): that one and N
  // seeded simulations more, each iteration's cost times a multiplier drawn
  // from the device's noise, and the median over those N of each TTFT,
  // TPOT and E2E statistic predicted (their 10th-90th percentile band
  // reported beside it). The noise: with predict_jitter_sigma, lognormal of
  // that sigma; without, the real run's own iteration noise -- each
  // iteration's measured time over its predicted cost, around the rolling
  // median of that ratio over 51 iterations (noise_around_rolling_level),
  // resampled. That takes only the spread of the run's iterations, not
  // their level or order.
  int predict_draws = kDefaultPredictDraws;
  std::optional<double> predict_jitter_sigma;
  // The separate draft's profile of a speculative run (see run_validation).
  const DeviceProfile* draft_profile = nullptr;
};

// InputError, naming the flag, for options that cannot be run together
// or are out of range (run_validation checks them before serving; the CLI
// before any quick calibration).
void check_validation_options(const ValidationOptions& options);

// Serves `workload` for real with `setup` and predicts it both ways with a
// ProfileModel built from `profile` (InputError if it was measured for
// another model shape, before anything is served).
// A speculative run (setup.scheduler.num_speculative_tokens > 0) is costed
// with a SpeculativeCostModel: a self-draft by `profile`'s tables for its
// layers, a separate draft by `draft_profile` (required then). Predict draws
// acceptance from what the real run measured: the controlled rate when the
// run set one (--acceptance-rate), else the run's accepted-length histogram
// (its per-position rates when no step proposed the full k).
ValidationResult run_validation(const EngineSetup& setup, const Workload& workload,
                                const DeviceProfile& profile, const std::string& profile_source,
                                const ValidationCallbacks& callbacks = {}, const ValidationOptions& options = {});

// The acceptance model predict uses for a real run's statistics (above).
AcceptanceModel measured_acceptance(const SpeculativeSetup& setup, const SpeculativeStats& measured);

// The options of a quick calibration for `setup`: same device, model,
// threads, block size, sampling and max_num_seqs; the GEMM grid up to the
// run's token budget (on cuda at most kCudaMaxBatchedTokens) and the
// attention grids up to the longest request of `workload` (capped at
// max_model_len).
CalibrationOptions quick_calibration_options(const EngineSetup& setup, const Workload& workload);
// calibrate(quick_calibration_options(setup, workload), progress).
DeviceProfile quick_calibration(const EngineSetup& setup, const Workload& workload,
                                std::function<void(const std::string&)> progress = {});

// report.json for one mode:
//   mode, iteration_mape {all, decode, prefill, mixed, counts {...}, bias {...}},
//   ttft_s / tpot_s / e2e_s {measured, predicted {count, mean, p50, p90, p99},
//                            rel_error {mean, p50, p90, p99}},
//   measured / predicted_run {completed, duration_s, requests_per_s, output_tokens_per_s, ...},
//   profile, [profile_saved_as], cost_model, config, percentiles, definitions.
nlohmann::json validation_report_json(const ValidationResult& result, ValidationMode mode);

// Writes into `dir`: report.json (for `mode`), report_replay.json,
// report_predict.json, iterations.csv, requests.csv, and the run outputs of
// measured/, replayed/ and predicted/ (summary.json, requests.csv,
// iterations.csv). Throws InputError if the folder cannot be written.
void write_validation_outputs(const std::string& dir, const ValidationResult& result, ValidationMode mode);

// The stdout table: iteration MAPE per class, then TTFT/TPOT/E2E measured
// against predicted for `mode`, and a one-line summary of the other mode.
std::string format_validation_table(const ValidationResult& result, ValidationMode mode,
                                    const std::string& title);

}  // namespace servesim
