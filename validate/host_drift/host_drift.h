// The seam for noisy shared hosts (docs/noisy-hosts.md): everything servesim
// does to follow a machine whose speed drifts from one minute to the next,
// behind one switch, off by default.
//
//   validate --host-drift report      the drift probes (drift_probes.h) just
//       before and after the real run, and the threads' placement
//       (placement.h) before every iteration; the predictions unchanged.
//   validate --host-drift interleave  report, plus the whole-model factors
//       re-timed on the served decoder around the run, plus decode steps of
//       the served batch (and every so often a prefill) timed between served
//       iterations with the run's clock stopped (whole_model_refresh.h);
//       from them one multiplier timeline (drift_timeline.h) scales every
//       predicted cost, in replay and predict alike. CPU runs without
//       speculation only (a GPU keeps its speed; speculative runs are
//       costed as calibrated).
//   calibrate --host-drift            the drift probes at every moment of the
//       calibration and the placement ratios (calibration_hooks below).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "calib/calibrate.h"
#include "engine/decoder_run.h"
#include "sim/cost/cost_model.h"
#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/metrics.h"
#include "sim/scheduler.h"
#include "validate/host_drift/whole_model_refresh.h"

namespace servesim {

enum class HostDriftMode { Off, Report, Interleave };
// InputError naming --host-drift for anything but off, report, interleave.
HostDriftMode parse_host_drift_mode(const std::string& name);
const char* to_string(HostDriftMode mode);

struct HostDriftOptions {
  HostDriftMode mode = HostDriftMode::Off;
  // Interleave: run-clock seconds between timings (0.01 .. 60), and between
  // prefill timings (0: none, or 0.01 .. 60).
  double interleave_interval_s = kDefaultInterleaveIntervalS;
  double interleave_prefill_interval_s = kDefaultInterleavePrefillIntervalS;
};
// InputError naming the flag for an interval out of range.
void check_host_drift_options(const HostDriftOptions& options);

// What the host-drift machinery watches of one validation's real run, and
// what it makes of it. Nothing at all with mode Off.
class HostDriftWatch {
 public:
  // `profile` (and a separate draft's `draft_profile`, or null) are the
  // profiles the validation predicts with; they outlive the watch.
  HostDriftWatch(const HostDriftOptions& options, const EngineSetup& setup, const SchedulerConfig& config,
                 const DeviceProfile& profile, const DeviceProfile* draft_profile,
                 std::function<void(const std::string&)> note);
  ~HostDriftWatch();
  HostDriftWatch(const HostDriftWatch&) = delete;
  HostDriftWatch& operator=(const HostDriftWatch&) = delete;

  // Just before and just after the real run (around run_engine): the drift probes.
  void before_real_run();
  void after_real_run();
  // Adds its observer, hooks, probe KV blocks and clock to the real run.
  void attach(EngineRunOptions& run);
  // After the run, with its records and the calibrated cost model: sets up
  // the timeline and the report.
  void finish(const RunRecords& measured, const ProfileModel& calibrated);

  // The multiplier on each predicted cost (replay: at each real iteration's
  // start; predict: at the simulated time); nullptr where nothing corrects.
  CostMultiplier* timeline();
  // report.json's host_drift: {mode} and, when on, drift_probes, placement,
  // refresh (each {.., reason} where it did not apply).
  nlohmann::json report() const;
  // The real run's config.clock_stopped (null when the clock never stopped).
  nlohmann::json clock_stopped() const;
  // Per iteration of the real run, the core-to-core latency just before it
  // (NaN where not watched): iterations.csv's core_latency_ns.
  const std::vector<double>& core_latency_ns() const;
  const std::vector<std::string>& warnings() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// calibrate --host-drift: the drift probes at every moment of a CPU
// calibration (the profile's "anchor" is their median in the placement most
// of them saw, and only that placement's moments set the whole-model
// timings), then, in full mode with 2+ threads, the placement ratios for at
// most `placement_seconds` (negative: 180 in full mode, none in quick).
CalibrationHooks host_drift_calibration_hooks(const CalibrationOptions& options, double placement_seconds,
                                              std::function<void(const std::string&)> say);

}  // namespace servesim
