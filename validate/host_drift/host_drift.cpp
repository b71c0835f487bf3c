#include "validate/host_drift/host_drift.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>

#include <fmt/format.h>

#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/device_choice.h"
#include "sim/errors.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/drift_timeline.h"
#include "validate/host_drift/placement.h"
#include "validate/host_drift/placement_ratios.h"
#include "validate/host_drift/stoppable_clock.h"

namespace servesim {

HostDriftMode parse_host_drift_mode(const std::string& name) {
  if (name == "off") return HostDriftMode::Off;
  if (name == "report") return HostDriftMode::Report;
  if (name == "interleave") return HostDriftMode::Interleave;
  throw InputError(fmt::format("--host-drift: '{}' is not one of off, report, interleave", name));
}

const char* to_string(HostDriftMode mode) {
  switch (mode) {
    case HostDriftMode::Off: return "off";
    case HostDriftMode::Report: return "report";
    case HostDriftMode::Interleave: return "interleave";
  }
  return "?";
}

void check_host_drift_options(const HostDriftOptions& o) {
  if (!(o.interleave_interval_s >= 0.01 && o.interleave_interval_s <= 60))
    throw InputError(fmt::format("--interleave-interval {}: expected 0.01 .. 60 seconds", o.interleave_interval_s));
  if (!(o.interleave_prefill_interval_s == 0 ||
        (o.interleave_prefill_interval_s >= 0.01 && o.interleave_prefill_interval_s <= 60)))
    throw InputError(fmt::format("--interleave-prefill-interval {}: expected 0 (no prefill timings) or 0.01 .. 60 "
                                 "seconds",
                                 o.interleave_prefill_interval_s));
}

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The drift probes of every profile a validation uses, once before and once
// after the real run: report.json's host_drift.drift_probes.
class DriftProbes {
 public:
  struct Entry {
    std::string name;
    const DeviceProfile* profile;
    DriftProbe calibration;
    DriftProbeSettings settings;
    DriftProbe before, after;
  };

  void add(const std::string& name, const DeviceProfile& profile, const EngineSetup& setup) {
    const DeviceChoice device = parse_device(setup.device);
    // The probes run the CPU decoder and cpu::matmul; a GPU keeps its speed
    // from one run to the next, and CUDA profiles carry no probes.
    if (device.cuda) return skip("cuda");
    const std::optional<DriftProbe> at_calibration = calibration_drift_probe(profile, name);
    if (!at_calibration)
      return skip(name + " has no drift probes (calibrate with --host-drift to measure them)");
    if (profile.device_kind != device.kind())
      return skip(fmt::format("{} was measured on '{}', the run uses '{}'", name, profile.device_kind, device.kind()));
    const int threads = setup.threads > 0 ? setup.threads : profile.threads;
    entries_.push_back({name, &profile, *at_calibration,
                        drift_probe_settings_of(*at_calibration, profile.model, threads, profile.block_size,
                                                setup.weights_seed, setup.decoding.sampling),
                        {}, {}});
  }
  void measure(bool before) {
    if (!reason_.empty()) return;
    for (Entry& e : entries_) (before ? e.before : e.after) = measure_drift_probe(e.settings);
  }
  bool measured() const { return reason_.empty() && !entries_.empty(); }

  nlohmann::json to_json(const std::function<void(const std::string&)>& note) const {
    if (!measured()) return {{"measured", false}, {"reason", reason_.empty() ? "no profile" : reason_}};
    nlohmann::json j = {{"measured", true},
                        {"rule", "run probe = geometric mean of the probes before and after the real run"}};
    for (const Entry& e : entries_) {
      DriftProbe run = e.before;
      run.decode_iteration_s = std::sqrt(e.before.decode_iteration_s * e.after.decode_iteration_s);
      run.gemm_flops_per_s = std::sqrt(e.before.gemm_flops_per_s * e.after.gemm_flops_per_s);
      j["profiles"][e.name] = {{"calibration", e.calibration.to_json()},
                               {"before", e.before.to_json()},
                               {"after", e.after.to_json()},
                               {"run", run.to_json()}};
      if (note)
        note(fmt::format("drift probes {}: decode {:.2f} ms at calibration, {:.2f} / {:.2f} ms before / after the "
                         "run; GEMM {:.0f} -> {:.0f} GFLOP/s",
                         e.name, e.calibration.decode_iteration_s * 1e3, e.before.decode_iteration_s * 1e3,
                         e.after.decode_iteration_s * 1e3, e.calibration.gemm_flops_per_s / 1e9,
                         run.gemm_flops_per_s / 1e9));
    }
    return j;
  }

 private:
  void skip(const std::string& why) {
    if (reason_.empty()) reason_ = why;
  }
  std::vector<Entry> entries_;
  std::string reason_;
};

// report.json's host_drift.refresh.interleaved: every probe with its level.
nlohmann::json interleaved_json(const DriftLevels& levels) {
  auto probes = [](const std::vector<DriftLevel>& kind) {
    nlohmann::json list = nlohmann::json::array();
    for (const DriftLevel& l : kind) {
      nlohmann::json probe = {{"time_s", l.probe.time_s},
                              {"seconds", l.probe.seconds},
                              {"sequences", l.probe.sequences},
                              {"placement", to_string(l.probe.placement)},
                              {"measured_over_predicted", l.measured_over_predicted},
                              {"smoothed", l.smoothed},
                              {"level", l.level}};
      if (l.probe.prefill_tokens > 0) probe["prefill_tokens"] = l.probe.prefill_tokens;
      list.push_back(probe);
    }
    return list;
  };
  nlohmann::json levelled = {"decode"};
  if (!levels.prefill.empty()) levelled.push_back("prefill and mixed");
  return {{"meaning",
           "decode steps of the served batch (as the refresh timed it), and every so often a whole-model prefill, "
           "timed on the served decoder between served iterations with the run's clock stopped, over the refreshed "
           "prediction (in their placement); a decode probe's smoothed with its neighbours, a prefill probe's as "
           "measured (level); every decode-only iteration's cost is scaled by the decode probes' level at its time, "
           "every iteration with a prefill by the prefill probes' (prefill_probes)"},
          {"levelled", levelled},
          {"probes", probes(levels.decode)},
          {"prefill_probes", probes(levels.prefill)}};
}

// Counts of the real run's iterations per placement.
PlacementCounts run_placements(const std::vector<double>& latencies_ns) {
  PlacementCounts counts;
  for (double ns : latencies_ns) counts.add(placement_of(ns));
  return counts;
}

}  // namespace

struct HostDriftWatch::State : LoopObserver {
  HostDriftOptions options;
  const EngineSetup& setup;
  SchedulerConfig config;
  const DeviceProfile& profile;
  std::function<void(const std::string&)> note;
  bool cuda = false;
  int threads = 0;
  bool watch_placement = false;  // report and interleave on the CPU
  std::string refresh_skipped;    // why interleave does not refresh, or ""
  DriftProbes probes;
  std::vector<double> core_latency_ns;
  std::vector<std::string> warnings;

  // Interleave.
  RefreshSettings refresh_settings;
  std::optional<WholeModelRefresher> refresher;
  Executor* served = nullptr;
  StoppableWallClock* clock = nullptr;  // the run's, while it runs
  int64_t clock_stops = 0;
  double clock_stopped_s = 0;
  std::optional<RefreshResult> refreshed;
  DriftLevels levels;
  bool placement_costed = false;
  std::string placement_not_costed;
  std::optional<DriftTimeline> timeline;
  nlohmann::json refresh_report, placement_report, probes_report;

  State(const HostDriftOptions& o, const EngineSetup& s, const SchedulerConfig& c, const DeviceProfile& p,
        std::function<void(const std::string&)> n)
      : options(o), setup(s), config(c), profile(p), note(std::move(n)) {}

  bool refreshing() const { return options.mode == HostDriftMode::Interleave && refresh_skipped.empty(); }

  void before_execute(const IterationPlan&) override {
    core_latency_ns.push_back(watch_placement ? core_to_core_latency_ns(threads) : kNaN);
  }
  void after_iteration(const IterationPlan&, const IterationResult&, const IterationRecord& last) override {
    if (!refresher || !clock || !served) return;
    clock->stopped_while([&] { return refresher->probe_between(*served, clock->now(), last.decode_sequences); });
  }

  nlohmann::json placement_json() const {
    if (cuda) return {{"watched", false}, {"reason", "cuda (a GPU's kernels do not move between CPU cores)"}};
    std::vector<double> latencies;
    for (double ns : core_latency_ns)
      if (!std::isnan(ns)) latencies.push_back(ns);
    if (latencies.empty()) return {{"watched", false}, {"reason", "one thread (no second core to measure against)"}};
    std::sort(latencies.begin(), latencies.end());
    const PlacementCounts run = run_placements(core_latency_ns);
    nlohmann::json j = {{"watched", true},
                        {"threshold_ns", kFarCoreLatencyNs},
                        {"run",
                         {{"near", run.near},
                          {"far", run.far},
                          {"unknown", run.unknown},
                          {"median_core_latency_ns", latencies[latencies.size() / 2]}}},
                        {"calibration", nullptr},
                        {"calibration_placement", nullptr},
                        {"run_share_in_calibration_placement", nullptr}};
    if (const std::optional<PlacementCounts> calibration = calibration_placement_counts(profile)) {
      j["calibration"] = {{"near", calibration->near}, {"far", calibration->far}, {"unknown", calibration->unknown}};
      const Placement dominant = calibration->dominant();
      if (dominant != Placement::Unknown) {
        j["calibration_placement"] = to_string(dominant);
        j["run_share_in_calibration_placement"] = run.share(dominant);
      }
    }
    j["costed_in_placement"] = placement_costed;
    if (!placement_not_costed.empty()) j["not_costed"] = placement_not_costed;
    const DeviceProfile& costed = refreshed ? refreshed->profile : profile;
    const Placement tables_placement = refreshed ? refreshed->tables_placement : Placement::Unknown;
    if (const std::optional<PlacementRatios> ratios = placement_ratios_of(costed, "the profile")) {
      j["ratios"] = ratios->to_json();
      j["run_share_costed_in_its_placement"] =
          run.share(ratios->reference) + (placement_costed ? run.share(ratios->other) : 0.0);
    } else if (tables_placement != Placement::Unknown) {
      j["run_share_costed_in_its_placement"] = run.share(tables_placement);
    }
    if (tables_placement != Placement::Unknown) j["refreshed_in"] = to_string(tables_placement);
    return j;
  }

  // The calibration's probes as a probe taken in the other placement is
  // compared with (the drift gate): the calibration's own probes in that
  // placement where 2 or more were, else the probe scaled by the ratios.
  void add_probes_in_other_placement(nlohmann::json& report) const {
    const std::optional<PlacementRatios> ratios = placement_ratios_of(profile, "the profile");
    const std::optional<DriftProbe> probe = calibration_drift_probe(profile, "the profile");
    if (!placement_costed || !ratios || !probe || !report.value("measured", false) ||
        !report["profiles"].contains("profile"))
      return;
    const nlohmann::json* measured = nullptr;
    const nlohmann::json& m = profile.metadata;
    if (m.contains("anchor_probes") && m["anchor_probes"].contains("by_placement") &&
        m["anchor_probes"]["by_placement"].contains(to_string(ratios->other)))
      measured = &m["anchor_probes"]["by_placement"][to_string(ratios->other)];
    nlohmann::json other = measured ? DriftProbe::from_json(*measured, "the profile").to_json() : probe->to_json();
    other.erase("core_latency_ns");
    other["placement"] = to_string(ratios->other);
    if (measured) {
      other["from"] = "the calibration's drift probes in that placement (median)";
    } else {
      other["decode_iteration_s"] = probe->decode_iteration_s * ratios->decode_ratio.front();
      other["gemm_flops_per_s"] = probe->gemm_flops_per_s / ratios->prefill_ratio.back();
      other["from"] = "the drift probe scaled by the placement ratios";
    }
    report["profiles"]["profile"]["calibration_in_other_placement"] = other;
  }
};

HostDriftWatch::HostDriftWatch(const HostDriftOptions& options, const EngineSetup& setup,
                               const SchedulerConfig& config, const DeviceProfile& profile,
                               const DeviceProfile* draft_profile, std::function<void(const std::string&)> note)
    : state_(std::make_unique<State>(options, setup, config, profile, std::move(note))) {
  check_host_drift_options(options);
  State& s = *state_;
  if (options.mode == HostDriftMode::Off) return;
  const DeviceChoice device = parse_device(setup.device);
  s.cuda = device.cuda;
  s.threads = setup.threads;
  s.watch_placement = !device.cuda;
  s.probes.add("profile", profile, setup);
  if (draft_profile) s.probes.add("draft profile", *draft_profile, setup);
  if (options.mode != HostDriftMode::Interleave) return;
  if (device.cuda) s.refresh_skipped = "cuda (a GPU keeps its speed from one run to the next)";
  else if (config.num_speculative_tokens > 0) s.refresh_skipped = "speculative runs are costed as calibrated";
  if (!s.refresh_skipped.empty()) {
    s.warnings.push_back("--host-drift interleave: the predictions are not corrected (" + s.refresh_skipped + ")");
    return;
  }
  // The refresh's shapes within the served KV cache (its block size, and
  // the scheduler's blocks; the probes' own follow them).
  RefreshSettings& r = s.refresh_settings;
  r = refresh_settings_for(profile, config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len);
  r.block_size = config.block_size;
  r.probe_first_block = int32_t(config.num_gpu_blocks);
  r.between_probe_interval_s = options.interleave_interval_s;
  r.between_prefill_probe_interval_s = options.interleave_prefill_interval_s;
  if (options.interleave_prefill_interval_s == 0) r.prefill_probe_tokens = 0;
}

HostDriftWatch::~HostDriftWatch() = default;

void HostDriftWatch::before_real_run() { state_->probes.measure(true); }
void HostDriftWatch::after_real_run() { state_->probes.measure(false); }

void HostDriftWatch::attach(EngineRunOptions& run) {
  State& s = *state_;
  if (s.options.mode == HostDriftMode::Off) return;
  run.observers.push_back(&s);
  if (!s.refreshing()) return;
  run.extra_kv_blocks = interleave_probe_blocks(s.refresh_settings);
  const int threads = s.threads;
  run.before_run = [&s, threads](Executor& decoder) {
    auto* served = dynamic_cast<DecoderExecutor*>(&decoder);
    if (!served) throw std::logic_error("--host-drift interleave: the served executor is not a DecoderExecutor");
    s.served = served;
    s.refresher.emplace(fit_to_kv_cache(s.refresh_settings, s.config.num_gpu_blocks, served->model().kv_block_size()),
                        [threads] { return core_to_core_latency_ns(threads); });
    if (s.note) s.note("host drift: timing whole-model prefills and decode steps before the run");
    s.refresher->measure(decoder, true);
  };
  run.after_run = [&s](Executor& decoder) {
    if (s.clock) {
      s.clock_stops = s.clock->stops();
      s.clock_stopped_s = s.clock->stopped_s();
    }
    s.clock = nullptr;  // the run's clock and executor go with it
    s.served = nullptr;
    if (s.note) s.note("host drift: timing whole-model prefills and decode steps after the run");
    s.refresher->measure(decoder, false);
  };
  run.make_clock = [&s]() -> std::unique_ptr<Clock> {
    auto clock = std::make_unique<StoppableWallClock>();
    s.clock = clock.get();
    return clock;
  };
}

void HostDriftWatch::finish(const RunRecords& measured, const ProfileModel& calibrated) {
  State& s = *state_;
  if (s.options.mode == HostDriftMode::Off) return;
  if (s.refreshing()) {
    s.refreshed = refresh_whole_model_factors(s.profile, s.refresher->settings(), s.refresher->samples(), s.note);
    s.refresh_report = s.refreshed->report;
    s.levels = drift_levels(s.refreshed->profile, s.refresher->settings(), s.refresher->probes());
    s.refresh_report["interleaved"] = interleaved_json(s.levels);
    if (s.note)
      s.note(fmt::format("host drift: {} timings ({} of them prefills) between served iterations ({:.1f} s, the "
                         "clock stopped)",
                         s.levels.decode.size() + s.levels.prefill.size(), s.levels.prefill.size(),
                         s.clock_stopped_s));
    std::optional<PlacementRatios> ratios = placement_ratios_of(s.refreshed->profile, "the refreshed profile");
    if (!ratios) s.placement_not_costed = "the profile has no placement ratios";
    s.placement_costed = ratios.has_value();
    std::vector<double> starts;
    std::vector<Placement> placements;
    for (size_t i = 0; i < measured.iterations.size() && i < s.core_latency_ns.size(); ++i) {
      starts.push_back(measured.iterations[i].start_s);
      placements.push_back(placement_of(s.core_latency_ns[i]));
    }
    s.timeline.emplace(calibrated, ProfileModel(s.refreshed->profile, s.setup.model, "the refreshed profile"),
                       s.placement_costed ? std::move(ratios) : std::nullopt, std::move(starts), std::move(placements),
                       s.levels);
  } else if (s.options.mode == HostDriftMode::Interleave) {
    s.refresh_report = {{"refreshed", false}, {"reason", s.refresh_skipped}};
    s.placement_not_costed = s.refresh_skipped;
  } else {
    s.refresh_report = {{"refreshed", false}, {"reason", "--host-drift report"}};
  }
  s.placement_report = s.placement_json();
  s.probes_report = s.probes.to_json(s.note);
  s.add_probes_in_other_placement(s.probes_report);
}

CostMultiplier* HostDriftWatch::timeline() { return state_->timeline ? &*state_->timeline : nullptr; }

nlohmann::json HostDriftWatch::report() const {
  const State& s = *state_;
  if (s.options.mode == HostDriftMode::Off) return {{"mode", "off"}};
  nlohmann::json j = {{"mode", to_string(s.options.mode)},
                      {"drift_probes", s.probes_report},
                      {"placement", s.placement_report},
                      {"refresh", s.refresh_report}};
  if (s.options.mode == HostDriftMode::Interleave && s.refreshing())
    j["settings"] = {{"interleave_interval_s", s.options.interleave_interval_s},
                     {"interleave_prefill_interval_s", s.options.interleave_prefill_interval_s}};
  return j;
}

nlohmann::json HostDriftWatch::clock_stopped() const {
  const State& s = *state_;
  if (s.clock_stops == 0) return nullptr;
  return {{"times", s.clock_stops},
          {"seconds", s.clock_stopped_s},
          {"meaning", "the run's clock stopped while validation timed the decoder between iterations (--host-drift "
                      "interleave); that time is in no latency"}};
}

const std::vector<double>& HostDriftWatch::core_latency_ns() const { return state_->core_latency_ns; }
const std::vector<std::string>& HostDriftWatch::warnings() const { return state_->warnings; }

}  // namespace servesim
