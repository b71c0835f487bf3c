#include "calib/validate.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>

#include "calib/in_situ_refresh.h"
#include "calib/placement.h"
#include "calib/profile_model.h"
#include "calib/replay_clock.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/device_choice.h"
#include "sim/clock.h"
#include "sim/errors.h"
#include "sim/report.h"
#include "sim/runner.h"

namespace servesim {

namespace {
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
}  // namespace

// ------------------------------------------------------------ recording

const char* to_string(IterationKind kind) {
  switch (kind) {
    case IterationKind::Decode: return "decode";
    case IterationKind::Prefill: return "prefill";
    case IterationKind::Mixed: return "mixed";
  }
  return "?";
}

IterationKind iteration_kind(int32_t prefill_sequences, int32_t decode_sequences) {
  if (prefill_sequences == 0) return IterationKind::Decode;
  if (decode_sequences == 0) return IterationKind::Prefill;
  return IterationKind::Mixed;
}

void RecordingExecutor::execute(const IterationPlan& plan, IterationResult& result) {
  const double core_latency_ns =
      placement_threads_ >= 0 ? core_to_core_latency_ns(placement_threads_) : std::numeric_limits<double>::quiet_NaN();
  inner_.execute(plan, result);
  RecordedIteration& it = out_.emplace_back();
  it.core_latency_ns = core_latency_ns;
  it.sequences.reserve(plan.sequences.size());
  for (size_t k = 0; k < plan.sequences.size(); ++k) {
    const ScheduledSequence& s = plan.sequences[k];
    RecordedSequence r;
    r.request_id = s.request_id;
    r.num_query_tokens = s.num_query_tokens;
    r.num_cached_tokens = s.num_cached_tokens;
    r.is_prefill = s.is_prefill;
    r.samples = s.samples;
    if (!result.emitted_tokens.empty()) r.emitted_tokens = result.emitted_tokens[k];
    r.eos = !result.finished.empty() && result.finished[k] != 0;
    it.sequences.push_back(r);
  }
  it.measured_s = result.duration_s;
  it.prefill_tokens = plan.num_prefill_tokens;
  it.decode_tokens = plan.num_decode_tokens;
  it.prefill_sequences = plan.num_prefill_sequences;
  it.decode_sequences = plan.num_decode_sequences;
}

void rebuild_plan(const RecordedIteration& iteration, int64_t index, int32_t block_size,
                  IterationPlan& plan, std::vector<int32_t>& block_storage) {
  if (block_size < 1) throw std::invalid_argument("rebuild_plan: block_size must be >= 1");
  auto blocks_of = [&](const RecordedSequence& s) {
    return (int64_t(s.num_cached_tokens) + s.num_query_tokens + block_size - 1) / block_size;
  };
  int64_t most = 0;
  for (const RecordedSequence& s : iteration.sequences) most = std::max(most, blocks_of(s));
  // Grown before any span points into it.
  if (int64_t(block_storage.size()) < most) block_storage.resize(size_t(most), 0);
  plan.clear();
  plan.index = index;
  for (const RecordedSequence& s : iteration.sequences) {
    ScheduledSequence seq;
    seq.request_id = s.request_id;
    seq.num_query_tokens = s.num_query_tokens;
    seq.num_cached_tokens = s.num_cached_tokens;
    seq.is_prefill = s.is_prefill;
    seq.samples = s.samples;
    // A decode samples every query row (its drafts' and the bonus's).
    seq.num_sample_rows = !s.samples ? 0 : s.is_prefill ? 1 : s.num_query_tokens;
    seq.block_table = std::span<const int32_t>(block_storage.data(), size_t(blocks_of(s)));
    plan.add(seq);
  }
}

std::vector<double> cost_iterations(const std::vector<RecordedIteration>& iterations, Executor& model,
                                    int32_t block_size) {
  std::vector<double> costs;
  costs.reserve(iterations.size());
  IterationPlan plan;
  IterationResult result;
  std::vector<int32_t> blocks;
  for (size_t k = 0; k < iterations.size(); ++k) {
    rebuild_plan(iterations[k], int64_t(k), block_size, plan, blocks);
    result.reset();
    model.execute(plan, result);
    costs.push_back(result.duration_s);
  }
  return costs;
}

std::vector<double> cost_iterations(const std::vector<RecordedIteration>& iterations,
                                    SpeculativeCostModel& model, int32_t block_size) {
  std::vector<double> costs;
  costs.reserve(iterations.size());
  IterationPlan plan;
  IterationResult result;
  std::vector<int32_t> blocks, accepted;
  for (size_t k = 0; k < iterations.size(); ++k) {
    rebuild_plan(iterations[k], int64_t(k), block_size, plan, blocks);
    accepted.clear();
    for (const RecordedSequence& s : iterations[k].sequences)
      accepted.push_back(!s.is_prefill && s.emitted_tokens > 0 ? s.emitted_tokens - 1 : 0);
    result.reset();
    model.execute_with_accepted(plan, accepted, result);
    costs.push_back(result.duration_s);
  }
  return costs;
}

// ------------------------------------------------------------ placement

void cost_in_placement(const std::vector<RecordedIteration>& iterations, const PlacementRatios& ratios,
                       std::vector<double>& costs) {
  if (costs.size() != iterations.size())
    throw std::invalid_argument(fmt::format("cost_in_placement: {} costs for {} iterations", costs.size(),
                                            iterations.size()));
  for (size_t i = 0; i < iterations.size(); ++i) {
    const RecordedIteration& it = iterations[i];
    costs[i] *= ratios.ratio(it.prefill_tokens, int64_t(it.sequences.size()), it.prefill_tokens + it.decode_tokens,
                             placement_of(it.core_latency_ns));
  }
}

void PlacementTimelineExecutor::execute(const IterationPlan& plan, IterationResult& result) {
  inner_.execute(plan, result);
  result.duration_s *= ratios_.ratio(plan, placement_at(clock_.now()));
}

void LevelTimelineExecutor::execute(const IterationPlan& plan, IterationResult& result) {
  inner_.execute(plan, result);
  result.duration_s *= levels_.at(plan.num_prefill_sequences > 0, clock_.now());
}

Placement PlacementTimelineExecutor::placement_at(double t) const {
  if (placements_.empty()) return Placement::Unknown;
  const auto after = std::upper_bound(starts_s_.begin(), starts_s_.end(), t);
  return placements_[after == starts_s_.begin() ? 0 : size_t(after - starts_s_.begin()) - 1];
}

// ------------------------------------------------------------ replay

RunRecords replay_timing(const RunRecords& measured, const std::vector<RecordedIteration>& iterations,
                         std::span<const double> durations_s) {
  if (durations_s.size() != iterations.size())
    throw std::invalid_argument(fmt::format("replay_timing: {} durations for {} iterations",
                                            durations_s.size(), iterations.size()));
  if (measured.iterations.size() != iterations.size())
    throw std::invalid_argument(fmt::format("replay_timing: {} measured iteration records for {} iterations",
                                            measured.iterations.size(), iterations.size()));
  std::vector<double> real_starts, real_durations;
  for (const IterationRecord& it : measured.iterations) {
    real_starts.push_back(it.start_s);
    real_durations.push_back(it.duration_s);
  }
  const ReplayClock clock(std::move(real_starts), std::move(real_durations), durations_s);

  RunRecords out;
  out.requests = measured.requests;
  for (RequestRecord& r : out.requests) {
    r.arrival_s = clock.at(r.arrival_s);  // the same instant, read on the replay clock
    r.first_scheduled_s = r.first_token_s = r.last_token_s = r.finish_s = -1;
    r.tokens_emitted = 0;
    r.emissions = 0;
  }
  out.rejection_reasons = measured.rejection_reasons;
  out.num_iterations = int64_t(iterations.size());
  out.preemptions = measured.preemptions;
  out.peak_kv_blocks = measured.peak_kv_blocks;
  out.num_gpu_blocks = measured.num_gpu_blocks;
  out.block_size = measured.block_size;
  out.end_s = 0;

  out.iterations.reserve(iterations.size());
  for (size_t k = 0; k < iterations.size(); ++k) {
    const RecordedIteration& it = iterations[k];
    const double start = clock.start(k), end = clock.end(k);
    for (const RecordedSequence& s : it.sequences) {
      RequestRecord& r = out.requests[size_t(s.request_id)];
      if (r.first_scheduled_s < 0) r.first_scheduled_s = start;
    }
    for (const RecordedSequence& s : it.sequences) {
      if (!s.samples) continue;
      RequestRecord& r = out.requests[size_t(s.request_id)];
      const int32_t room = std::max(1, r.output_tokens - r.tokens_emitted);
      const int32_t emitted = std::clamp(s.emitted_tokens < 0 ? 1 : s.emitted_tokens, 1, room);
      if (r.emissions == 0) {
        r.first_token_s = end;
      } else {
        out.itl_s.add(end - r.last_token_s);
      }
      r.last_token_s = end;
      r.tokens_emitted += emitted;
      r.emissions += 1;
      if (r.tokens_emitted >= r.output_tokens || s.eos) {
        r.finish_s = end;
        out.end_s = std::max(out.end_s, end);
      }
    }
    IterationRecord rec = measured.iterations[k];
    rec.start_s = start;
    rec.duration_s = durations_s[k];
    out.iterations.push_back(rec);
  }
  return out;
}

// ------------------------------------------------------------ errors

double rel_error(double predicted, double measured) {
  if (!(measured > 0)) return kNaN;
  return predicted / measured - 1.0;
}

IterationErrors iteration_errors(std::span<const double> measured, std::span<const double> predicted,
                                 std::span<const IterationKind> kinds) {
  if (measured.size() != predicted.size() || measured.size() != kinds.size())
    throw std::invalid_argument("iteration_errors: measured, predicted and kinds differ in length");
  struct Sum {
    double abs = 0, signed_ = 0;
    int64_t n = 0;
  };
  Sum all, by_kind[3];
  for (size_t i = 0; i < measured.size(); ++i) {
    const double e = rel_error(predicted[i], measured[i]);
    if (std::isnan(e)) continue;
    for (Sum* s : {&all, &by_kind[int(kinds[i])]}) {
      s->abs += std::fabs(e);
      s->signed_ += e;
      s->n += 1;
    }
  }
  auto finish = [](const Sum& s) {
    ClassError c;
    c.count = s.n;
    c.mape = s.n > 0 ? s.abs / double(s.n) : kNaN;
    c.bias = s.n > 0 ? s.signed_ / double(s.n) : kNaN;
    return c;
  };
  IterationErrors e;
  e.all = finish(all);
  e.decode = finish(by_kind[int(IterationKind::Decode)]);
  e.prefill = finish(by_kind[int(IterationKind::Prefill)]);
  e.mixed = finish(by_kind[int(IterationKind::Mixed)]);
  return e;
}

// ------------------------------------------------------------ validation

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

namespace {

// The draft's cost model of a speculative validation (see run_validation).
std::optional<ProfileModel> draft_cost_model(const EngineSetup& setup, const DeviceProfile& profile,
                                             const std::string& profile_source,
                                             const DeviceProfile* draft_profile) {
  const std::optional<ModelSpec> draft = draft_model_spec(setup.speculative, setup.model);
  if (!draft || setup.scheduler.num_speculative_tokens == 0) return std::nullopt;
  if (setup.speculative.self_draft_layers > 0) return ProfileModel::for_layers(profile, *draft, profile_source);
  if (!draft_profile)
    throw InputError(fmt::format("validating with the draft {} needs its profile (--draft-profile)", draft->name));
  return ProfileModel(*draft_profile, *draft, "--draft-profile");
}

}  // namespace

namespace {

// Measures the anchor probes of every profile a validation uses, once before
// and once after the real run, and re-anchors their cost models.
class Anchoring {
 public:
  struct Entry {
    std::string name;
    const DeviceProfile* profile;
    std::vector<ProfileModel*> models;
    AnchorSettings settings;
    AnchorProbe before, after;
  };

  Anchoring(ValidationOptions::Anchor mode, const EngineSetup& setup, std::function<void(const std::string&)> note)
      : mode_(mode), setup_(setup), note_(std::move(note)) {}

  // Re-anchors `models` (costed by `profile`) when the run ends.
  void add(const std::string& name, const DeviceProfile& profile, std::vector<ProfileModel*> models) {
    if (mode_ == ValidationOptions::Anchor::Off) return skip("--anchor off");
    const DeviceChoice device = parse_device(setup_.device);
    // The probes run the CPU decoder and cpu::matmul; a GPU keeps its speed
    // from one run to the next, and CUDA profiles carry no anchor.
    if (device.cuda) return skip("cuda");
    if (!profile.anchor) return skip(name + " has no anchor probes (calibrated by an older servesim)");
    if (profile.device_kind != device.kind())
      return skip(fmt::format("{} was measured on '{}', the run uses '{}'", name, profile.device_kind, device.kind()));
    const int threads = setup_.threads > 0 ? setup_.threads : profile.threads;
    entries_.push_back({name, &profile, std::move(models),
                        anchor_settings_of(*profile.anchor, profile.model, threads, profile.block_size,
                                           setup_.weights_seed, setup_.decoding.sampling),
                        {}, {}});
  }
  void before_run() { measure(true); }
  void after_run() { measure(false); }

  // Applies the scales (mode Apply); returns the report's "anchor" object.
  nlohmann::json apply() {
    if (!reason_.empty() || entries_.empty())
      return {{"measured", false}, {"applied", false}, {"reason", reason_.empty() ? "no profile" : reason_}};
    const bool apply = mode_ == ValidationOptions::Anchor::Apply;
    nlohmann::json j = {{"measured", true},
                        {"applied", apply},
                        {"rule", "run probe = geometric mean of the probes before and after the real run; memory "
                                 "scale = its decode time / calibration's; compute scale = calibration's GEMM "
                                 "FLOP/s / its"}};
    for (Entry& e : entries_) {
      AnchorProbe run = e.before;
      run.decode_iteration_s = std::sqrt(e.before.decode_iteration_s * e.after.decode_iteration_s);
      run.gemm_flops_per_s = std::sqrt(e.before.gemm_flops_per_s * e.after.gemm_flops_per_s);
      const AnchorScales scales = anchor_scales(*e.profile->anchor, run);
      if (apply)
        for (ProfileModel* m : e.models) m->set_anchor_scales(scales);
      j["profiles"][e.name] = {{"calibration", e.profile->anchor->to_json()},
                               {"before", e.before.to_json()},
                               {"after", e.after.to_json()},
                               {"run", run.to_json()},
                               {"scales", {{"memory", scales.memory}, {"compute", scales.compute}}}};
      if (note_)
        note_(fmt::format("anchor {}: decode probe {:.2f} ms at calibration, {:.2f} / {:.2f} ms before / after the "
                          "run (memory-bound x{:.3f}); GEMM {:.0f} -> {:.0f} GFLOP/s (compute-bound x{:.3f}){}",
                          e.name, e.profile->anchor->decode_iteration_s * 1e3, e.before.decode_iteration_s * 1e3,
                          e.after.decode_iteration_s * 1e3, scales.memory, e.profile->anchor->gemm_flops_per_s / 1e9,
                          run.gemm_flops_per_s / 1e9, scales.compute,
                          apply ? "; predictions re-anchored" : " (reported, not applied)"));
    }
    return j;
  }

 private:
  void skip(const std::string& why) {
    if (reason_.empty()) reason_ = why;
  }
  void measure(bool before) {
    if (!reason_.empty()) return;
    for (Entry& e : entries_) (before ? e.before : e.after) = measure_anchor(e.settings);
  }

  ValidationOptions::Anchor mode_;
  const EngineSetup& setup_;
  std::function<void(const std::string&)> note_;
  std::vector<Entry> entries_;
  std::string reason_;
};

// ValidationResult::placement.
// `tables_placement`: the placement an in-situ refresh measured the
// factors in (Unknown without one).
nlohmann::json placement_json(const std::vector<RecordedIteration>& iterations, const DeviceProfile& profile,
                              bool cuda, bool applied, const std::string& not_applied, Placement tables_placement) {
  if (cuda) return {{"watched", false}, {"reason", "cuda (a GPU's kernels do not move between CPU cores)"}};
  PlacementCounts run;
  std::vector<double> latencies;
  for (const RecordedIteration& it : iterations) {
    run.add(placement_of(it.core_latency_ns));
    if (!std::isnan(it.core_latency_ns)) latencies.push_back(it.core_latency_ns);
  }
  if (latencies.empty())
    return {{"watched", false}, {"reason", "one thread (no second core to measure against)"}};
  std::sort(latencies.begin(), latencies.end());
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
  if (const std::optional<PlacementCounts> counts = profile.calibration_placement_counts()) {
    const PlacementCounts& calibration = *counts;
    j["calibration"] = {{"near", calibration.near}, {"far", calibration.far}, {"unknown", calibration.unknown}};
    const Placement dominant = calibration.dominant();
    if (dominant != Placement::Unknown) {
      j["calibration_placement"] = to_string(dominant);
      j["run_share_in_calibration_placement"] = run.share(dominant);
    }
  }
  j["applied"] = applied;
  if (!not_applied.empty()) j["not_applied"] = not_applied;
  if (profile.placement_ratios) {
    j["ratios"] = profile.placement_ratios->to_json();
    // Iterations costed in the placement they ran in: the tables' own, and
    // with --placement apply the other one too.
    j["run_share_costed_in_its_placement"] =
        run.share(profile.placement_ratios->reference) + (applied ? run.share(profile.placement_ratios->other) : 0.0);
  } else if (tables_placement != Placement::Unknown) {
    j["run_share_costed_in_its_placement"] = run.share(tables_placement);  // the refresh's placement alone
  }
  if (tables_placement != Placement::Unknown) j["refreshed_in"] = to_string(tables_placement);
  return j;
}

const char* in_situ_name(ValidationOptions::InSitu in_situ) {
  switch (in_situ) {
    case ValidationOptions::InSitu::Profile: return "profile";
    case ValidationOptions::InSitu::Refresh: return "refresh";
    case ValidationOptions::InSitu::Track: return "track";
    case ValidationOptions::InSitu::Interleave: return "interleave";
  }
  return "?";
}

// report.json's in_situ.tracked: every probe with its level.
nlohmann::json tracked_json(const TrackedLevels& levels, bool in_idle_gaps) {
  auto probes = [](const std::vector<TrackLevel>& kind) {
    nlohmann::json list = nlohmann::json::array();
    for (const TrackLevel& l : kind) {
      nlohmann::json probe = {{"time_s", l.probe.time_s},
                              {"seconds", l.probe.seconds},
                              {"sequences", l.probe.sequences},
                              {"placement", to_string(l.probe.placement)},
                              {"between_iterations", l.probe.between_iterations},
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
           in_idle_gaps
               ? "1-sequence decode steps timed on the served decoder in the run's idle gaps, over the refreshed "
                 "prediction (in their placement), smoothed with their neighbours and taken relative to their "
                 "median (level); every decode-only iteration's cost is scaled by the level at its time"
               : "decode steps of the served batch (as the refresh timed it), and every so often a whole-model "
                 "prefill, timed on the served decoder between served iterations with the run's clock stopped, "
                 "over the refreshed prediction (in their placement); a decode probe's smoothed with its "
                 "neighbours, a prefill probe's as measured (level); every decode-only iteration's cost is "
                 "scaled by the decode probes' level at its time, every iteration with a prefill by the "
                 "prefill probes' (prefill_probes)"},
          {"basis", in_idle_gaps ? "run median" : "refresh"},
          {"levelled", levelled},
          {"probes", probes(levels.decode)},
          {"prefill_probes", probes(levels.prefill)}};
}

}  // namespace

void check_validation_options(const ValidationOptions& options) {
  if (options.in_situ != ValidationOptions::InSitu::Profile && options.anchor == ValidationOptions::Anchor::Apply)
    throw InputError(fmt::format("--in-situ {} and --anchor apply both correct the predictions for the device's "
                                 "drift: use one of them",
                                 in_situ_name(options.in_situ)));
  if (!(options.interleave_interval_s >= 0.01 && options.interleave_interval_s <= 60))
    throw InputError(fmt::format("--interleave-interval {}: expected 0.01 .. 60 seconds",
                                 options.interleave_interval_s));
  if (!(options.interleave_prefill_interval_s == 0 ||
        (options.interleave_prefill_interval_s >= 0.01 && options.interleave_prefill_interval_s <= 60)))
    throw InputError(fmt::format("--interleave-prefill-interval {}: expected 0 (no prefill timings) or 0.01 .. 60 "
                                 "seconds",
                                 options.interleave_prefill_interval_s));
  if (options.predict_draws < 1 || options.predict_draws > kMaxDraws)
    throw InputError(fmt::format("--predict-draws {}: expected 1 .. {}", options.predict_draws, kMaxDraws));
  if (options.predict_jitter_sigma) {
    if (options.predict_draws == 1)
      throw InputError("--predict-jitter applies with --predict-draws N > 1 (one simulation is drawn without jitter)");
    (void)CostJitter::lognormal(*options.predict_jitter_sigma);  // InputError when out of range
  }
}

ValidationResult run_validation(const EngineSetup& setup, const Workload& workload,
                                const DeviceProfile& profile, const std::string& profile_source,
                                const ValidationCallbacks& callbacks, const ValidationOptions& options) {
  // Refuse a profile of another model shape before serving anything.
  ProfileModel cost_model(profile, setup.model, profile_source);
  check_validation_options(options);
  const SchedulerConfig config = engine_scheduler_config(setup);
  std::optional<ProfileModel> draft_model = draft_cost_model(setup, profile, profile_source, options.draft_profile);
  const int32_t k = config.num_speculative_tokens;
  Anchoring anchoring(options.anchor, setup, callbacks.note);
  const bool self_draft = draft_model && setup.speculative.self_draft_layers > 0;
  std::vector<ProfileModel*> target_models = {&cost_model};
  if (self_draft) target_models.push_back(&*draft_model);
  anchoring.add("profile", profile, target_models);
  if (draft_model && !self_draft) anchoring.add("draft profile", *options.draft_profile, {&*draft_model});

  ValidationResult v;
  v.profile_source = profile_source;
  const DeviceChoice device = parse_device(setup.device);
  if (profile.device_kind != device.kind())
    v.warnings.push_back(fmt::format("the profile was measured on device '{}', the run uses '{}'",
                                     profile.device_kind, device.name()));
  if (!device.cuda && setup.threads > 0 && profile.threads > 0 && setup.threads != profile.threads)
    v.warnings.push_back(fmt::format("the profile was measured with {} threads, the run uses {}",
                                     profile.threads, setup.threads));
  if (profile.block_size != config.block_size)
    v.warnings.push_back(fmt::format("the profile timed attention with {}-token KV blocks, the run uses {}",
                                     profile.block_size, config.block_size));
  if (setup.decoding.honor_eos)
    v.warnings.push_back("--honor-eos: the real run stops requests at EOS, the predict simulation "
                         "generates every requested token");

  // The real run, every plan recorded; on the CPU with the threads'
  // placement before each iteration (calib/placement.h).
  const int placement_threads = device.cuda ? -1 : setup.threads;
  ExecutorWrapper wrap = [&v, placement_threads](Executor& decoder) -> std::unique_ptr<Executor> {
    return std::make_unique<RecordingExecutor>(decoder, v.iterations, placement_threads);
  };
  // The in-situ refresh (ValidationOptions::in_situ): timed on the served
  // decoder just before the clock starts and just after the run.
  std::optional<InSituRefresher> refresher;
  ServeHooks hooks;
  const bool tracking = options.in_situ == ValidationOptions::InSitu::Track,
             interleaving = options.in_situ == ValidationOptions::InSitu::Interleave;
  // The refresh's shapes within the served KV cache (its block size, and
  // the scheduler's blocks; the probes' own follow them).
  InSituRefreshSettings settings =
      in_situ_refresh_settings(profile, config.max_num_seqs, config.max_num_batched_tokens, config.max_model_len);
  settings.block_size = config.block_size;
  settings.probe_first_block = int32_t(config.num_gpu_blocks);
  settings.between_probe_interval_s = options.interleave_interval_s;
  settings.between_prefill_probe_interval_s = options.interleave_prefill_interval_s;
  if (options.interleave_prefill_interval_s == 0) settings.prefill_probe_tokens = 0;
  if (options.in_situ != ValidationOptions::InSitu::Profile) {
    if (device.cuda)
      v.in_situ = {{"refreshed", false}, {"reason", "cuda (a GPU keeps its speed from one run to the next)"}};
    else if (k > 0)
      v.in_situ = {{"refreshed", false}, {"reason", "speculative runs are costed with the calibrated factors"}};
    if (!v.in_situ.is_null())
      v.warnings.push_back("--in-situ refresh: not applied (" + v.in_situ["reason"].get<std::string>() + ")");
  } else {
    v.in_situ = {{"refreshed", false}, {"reason", "--in-situ profile"}};
  }
  if (v.in_situ.is_null()) {
    if (tracking || interleaving) hooks.probe_kv_blocks = track_probe_blocks(settings);
    const int threads = setup.threads;
    hooks.before_run = [&, threads](Executor& decoder) {
      auto* served = dynamic_cast<DecoderExecutor*>(&decoder);
      if (!served) throw std::logic_error("--in-situ refresh: the served executor is not a DecoderExecutor");
      refresher.emplace(fit_to_kv_cache(settings, config.num_gpu_blocks, served->model().kv_block_size()),
                        [threads] { return core_to_core_latency_ns(threads); });
      if (callbacks.note) callbacks.note("in situ: timing whole-model prefills and decode steps before the run");
      refresher->measure(decoder, true);
    };
    hooks.after_run = [&](Executor& decoder) {
      if (callbacks.note) callbacks.note("in situ: timing whole-model prefills and decode steps after the run");
      refresher->measure(decoder, false);
    };
    if (tracking)
      hooks.on_idle = [&](Executor& decoder, double now_s, double until_s) {
        refresher->probe_idle(decoder, now_s, until_s);
      };
    if (interleaving)
      hooks.between_iterations = [&](Executor& decoder, double now_s, const IterationRecord& last) {
        return refresher->probe_between(decoder, now_s, last.decode_sequences);
      };
  }
  anchoring.before_run();
  v.measured = serve(setup, workload, callbacks.run_progress, callbacks.on_ready, wrap, hooks);
  anchoring.after_run();
  // The profile the predictions cost with: the refreshed one, whose
  // factors describe `tables_placement` and whose ratios (fresh, the
  // profile's, or none) the other placement.
  std::optional<InSituRefreshResult> refreshed;
  TrackedLevels levels;  // --in-situ track and interleave
  if (refresher) {
    refreshed = refresh_in_situ(profile, refresher->settings(), refresher->samples(), callbacks.note);
    cost_model = ProfileModel(refreshed->profile, setup.model, profile_source);
    v.in_situ = refreshed->report;
    if (tracking || interleaving) {
      levels = track_levels(refreshed->profile, refresher->settings(), refresher->probes(),
                            tracking ? TrackLevelBasis::RunMedian : TrackLevelBasis::Refresh);
      v.in_situ["tracked"] = tracked_json(levels, tracking);
      if (callbacks.note)
        callbacks.note(fmt::format("in situ: {} timings ({} of them prefills) {}",
                                   levels.decode.size() + levels.prefill.size(), levels.prefill.size(),
                                   tracking ? "in the run's idle gaps"
                                            : fmt::format("between served iterations ({:.1f} s, the clock stopped)",
                                                          v.measured.clock_stopped_s)));
    }
  }
  const DeviceProfile& costed_profile = refreshed ? refreshed->profile : profile;
  v.anchor = anchoring.apply();
  v.cost_model = cost_model.describe();
  v.config = engine_setup_to_json(setup, v.measured);
  // Costing each iteration in its placement (ValidationOptions::placement).
  std::string placement_not_applied;
  if (options.placement == ValidationOptions::PlacementCosting::Apply) {
    if (device.cuda) placement_not_applied = "cuda";
    else if (!costed_profile.placement_ratios) placement_not_applied = "the profile has no placement ratios";
    else if (k > 0) placement_not_applied = "speculative runs are costed without placement ratios";
  }
  const bool placement_applied =
      options.placement == ValidationOptions::PlacementCosting::Apply && placement_not_applied.empty();
  v.placement = placement_json(v.iterations, costed_profile, device.cuda, placement_applied, placement_not_applied,
                               refreshed ? refreshed->tables_placement : Placement::Unknown);
  if (!placement_not_applied.empty())
    v.warnings.push_back("--placement apply: not applied (" + placement_not_applied + ")");
  if (placement_applied && profile.placement_ratios && v.anchor.value("measured", false) &&
      v.anchor["profiles"].contains("profile")) {
    // The anchor probes' expected values in the other placement, for a
    // probe taken there: the calibration's own probes in that placement
    // (their median) when 2 or more were, else the anchor scaled by the
    // ratios (the decode probe by the 1-sequence decode step's, the GEMM
    // probe by the largest prefill's).
    const PlacementRatios& r = *profile.placement_ratios;
    const nlohmann::json* measured = nullptr;
    if (profile.metadata.contains("anchor_probes") && profile.metadata["anchor_probes"].contains("by_placement") &&
        profile.metadata["anchor_probes"]["by_placement"].contains(to_string(r.other)))
      measured = &profile.metadata["anchor_probes"]["by_placement"][to_string(r.other)];
    nlohmann::json other = measured ? AnchorProbe::from_json(*measured, profile_source).to_json()
                                    : profile.anchor->to_json();
    other.erase("core_latency_ns");
    other["placement"] = to_string(r.other);
    if (measured) {
      other["from"] = "the calibration's anchor probes in that placement (median)";
    } else {
      other["decode_iteration_s"] = profile.anchor->decode_iteration_s * r.decode_ratio.front();
      other["gemm_flops_per_s"] = profile.anchor->gemm_flops_per_s / r.prefill_ratio.back();
      other["from"] = "the anchor scaled by the placement ratios";
    }
    v.anchor["profiles"]["profile"]["calibration_in_other_placement"] = other;
  }

  // Per iteration: the predicted cost of each real plan.
  if (k > 0) {
    // Acceptance is given by the recording, so the model's own is not drawn.
    SpeculativeCostModel replay_model(cost_model, *draft_model, AcceptanceModel::independent(0), k,
                                      setup.workload.seed);
    v.predicted_iteration_s = cost_iterations(v.iterations, replay_model, v.measured.scheduler.block_size);
  } else {
    v.predicted_iteration_s = cost_iterations(v.iterations, cost_model, v.measured.scheduler.block_size);
  }
  if (placement_applied) cost_in_placement(v.iterations, *costed_profile.placement_ratios, v.predicted_iteration_s);
  // The tracked levels: decode probes' for decode-only iterations, prefill
  // probes' for the others (LevelTimelineExecutor says why).
  for (size_t i = 0; i < v.predicted_iteration_s.size() && !levels.empty(); ++i)
    v.predicted_iteration_s[i] *= levels.at(v.iterations[i].kind() != IterationKind::Decode,
                                            v.measured.records.iterations[i].start_s);
  std::vector<double> measured_s;
  std::vector<IterationKind> kinds;
  for (const RecordedIteration& it : v.iterations) {
    measured_s.push_back(it.measured_s);
    kinds.push_back(it.kind());
  }
  v.iteration = iteration_errors(measured_s, v.predicted_iteration_s, kinds);
  v.iteration_noise = noise_around_rolling_level(measured_s, v.predicted_iteration_s);
  v.iteration_mape_floor = std::nan("");
  if (!v.iteration_noise.empty()) {
    double sum = 0;
    for (double n : v.iteration_noise) sum += std::abs(1.0 / n - 1.0);
    v.iteration_mape_floor = sum / double(v.iteration_noise.size());
  }

  // Replay: the real iterations re-timed with their predicted costs.
  v.replay = replay_timing(v.measured.records, v.iterations, v.predicted_iteration_s);
  v.replay_summary = summarize_run(v.replay, setup.slo);

  // Predict: an independent simulation, same requests and scheduler
  // settings; with draws, more of them with each cost jittered.
  std::optional<AcceptanceModel> acceptance;
  if (k > 0) {
    if (!v.measured.speculative) throw std::logic_error("a speculative run reported no statistics");
    acceptance = measured_acceptance(setup.speculative, *v.measured.speculative);
    v.predict_acceptance = acceptance->to_json();
  }
  // One simulation; `jitter` null for the cost model's own durations.
  auto simulate = [&](const CostJitter* jitter, uint64_t jitter_seed,
                      std::optional<SpeculativeStats>* speculative_out) {
    Scheduler scheduler(v.measured.scheduler);
    ProfileModel& executor = cost_model;  // stateless: replay's model, re-anchored
    std::optional<SpeculativeCostModel> speculative;
    if (k > 0) speculative.emplace(executor, *draft_model, *acceptance, k, setup.workload.seed);
    VirtualClock clock;
    std::optional<PlacementTimelineExecutor> in_placement;
    if (placement_applied) {
      std::vector<double> starts;
      std::vector<Placement> placements;
      for (size_t i = 0; i < v.iterations.size() && i < v.measured.records.iterations.size(); ++i) {
        starts.push_back(v.measured.records.iterations[i].start_s);
        placements.push_back(placement_of(v.iterations[i].core_latency_ns));
      }
      in_placement.emplace(executor, clock, *costed_profile.placement_ratios, std::move(starts),
                           std::move(placements));
    }
    Executor& in_its_placement = in_placement ? static_cast<Executor&>(*in_placement) : executor;
    LevelTimelineExecutor at_level(in_its_placement, clock, levels);
    Executor& costed = levels.empty() ? in_its_placement : at_level;
    Executor& modelled = speculative ? static_cast<Executor&>(*speculative) : costed;
    std::optional<JitteredExecutor> jittered;
    if (jitter) jittered.emplace(modelled, *jitter, jitter_seed);
    Runner runner(scheduler, jittered ? static_cast<Executor&>(*jittered) : modelled, clock);
    RunRecords records = runner.run(workload);
    if (speculative && speculative_out) *speculative_out = *speculative->speculative_stats();
    return records;
  };
  v.predict = simulate(nullptr, 0, &v.predict_speculative);
  v.predict_single_summary = summarize_run(v.predict, setup.slo);
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
    std::vector<RunSummary> drawn;
    for (int d = 0; d < options.predict_draws; ++d) {
      RunRecords records = simulate(&jitter, draw_seed(setup.workload.seed, d), nullptr);
      drawn.push_back(summarize_run(records, setup.slo));
    }
    v.predict_bands = band_latencies(drawn);
    v.predict_summary = with_medians(v.predict_single_summary, *v.predict_bands);
  }
  return v;
}

CalibrationOptions quick_calibration_options(const EngineSetup& setup, const Workload& workload) {
  const SchedulerConfig config = engine_scheduler_config(setup);
  CalibrationOptions o;
  o.device = setup.device;
  o.model = setup.model;
  o.threads = setup.threads;
  o.quick = true;
  o.block_size = config.block_size;
  o.max_batched_tokens = config.max_num_batched_tokens;
  // A CUDA calibration times at most kCudaMaxBatchedTokens tokens (without
  // chunking the budget is max_model_len, 131072 for Llama 3.1); larger
  // batches are extrapolated by the cost model's roofline rule.
  if (parse_device(setup.device).cuda) o.max_batched_tokens = std::min(o.max_batched_tokens, kCudaMaxBatchedTokens);
  int64_t longest = 1;
  for (const Request& r : workload.requests)
    longest = std::max<int64_t>(longest, int64_t(r.prompt_tokens) + r.output_tokens);
  o.max_context = std::min<int64_t>(longest, config.max_model_len);
  o.weights_seed = setup.weights_seed;
  o.max_num_seqs = config.max_num_seqs;
  o.sampling = setup.decoding.sampling;
  return o;
}

DeviceProfile quick_calibration(const EngineSetup& setup, const Workload& workload,
                                std::function<void(const std::string&)> progress) {
  return calibrate(quick_calibration_options(setup, workload), std::move(progress));
}

// ------------------------------------------------------------ report

namespace {

nlohmann::json number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(nullptr); }

nlohmann::json stats_json(const Distribution& d) {
  return {{"count", d.count}, {"mean", d.mean}, {"p50", d.p50}, {"p90", d.p90}, {"p99", d.p99}};
}

nlohmann::json comparison_json(const Distribution& measured, const Distribution& predicted) {
  return {{"measured", stats_json(measured)},
          {"predicted", stats_json(predicted)},
          {"rel_error",
           {{"mean", number(rel_error(predicted.mean, measured.mean))},
            {"p50", number(rel_error(predicted.p50, measured.p50))},
            {"p90", number(rel_error(predicted.p90, measured.p90))},
            {"p99", number(rel_error(predicted.p99, measured.p99))}}}};
}

double busy_s(const RunRecords& r) {
  double s = 0;
  for (const IterationRecord& it : r.iterations) s += it.duration_s;
  return s;
}

nlohmann::json run_json(const RunSummary& s, const RunRecords& r) {
  return {{"submitted", s.submitted},
          {"completed", s.completed},
          {"rejected", s.rejected},
          {"output_tokens", s.output_tokens},
          {"duration_s", s.duration_s},
          {"requests_per_s", s.requests_per_s},
          {"output_tokens_per_s", s.output_tokens_per_s},
          {"iterations", s.iterations},
          {"preemptions", s.preemptions},
          {"iteration_time_s", busy_s(r)}};
}

const RunSummary& summary_of(const ValidationResult& v, ValidationMode mode) {
  return mode == ValidationMode::Replay ? v.replay_summary : v.predict_summary;
}
const RunRecords& records_of(const ValidationResult& v, ValidationMode mode) {
  return mode == ValidationMode::Replay ? v.replay : v.predict;
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  if (!f) throw InputError(fmt::format("{}: cannot open for writing", path));
  f << text;
  f.flush();
  if (!f) throw InputError(fmt::format("{}: write failed", path));
}

std::string cell(double v) { return v >= 0 && std::isfinite(v) ? fmt::format("{}", v) : std::string(); }

double ttft_of(const RequestRecord& r) { return r.completed() ? r.first_token_s - r.arrival_s : -1; }
double e2e_of(const RequestRecord& r) { return r.completed() ? r.finish_s - r.arrival_s : -1; }

const RequestRecord* find(const RunRecords& records, int64_t id) {
  return id >= 0 && size_t(id) < records.requests.size() ? &records.requests[size_t(id)] : nullptr;
}

std::string pct(double e) { return std::isfinite(e) ? fmt::format("{:+.1f}%", e * 100) : std::string("-"); }
std::string abs_pct(double e) { return std::isfinite(e) ? fmt::format("{:.1f}%", e * 100) : std::string("-"); }

nlohmann::json predicted_config(const ValidationResult& v) {
  nlohmann::json c = v.config;
  c["executor"] = "profile";
  c["clock"] = "virtual";
  c["profile"] = v.profile_source;
  c["cost_model"] = v.cost_model;
  return c;
}

}  // namespace

nlohmann::json validation_report_json(const ValidationResult& v, ValidationMode mode) {
  const RunSummary& m = v.measured.summary;
  const RunSummary& p = summary_of(v, mode);
  nlohmann::json j;
  j["mode"] = to_string(mode);
  j["iteration_mape"] = {{"all", number(v.iteration.all.mape)},
                         {"decode", number(v.iteration.decode.mape)},
                         {"prefill", number(v.iteration.prefill.mape)},
                         {"mixed", number(v.iteration.mixed.mape)},
                         {"counts",
                          {{"all", v.iteration.all.count},
                           {"decode", v.iteration.decode.count},
                           {"prefill", v.iteration.prefill.count},
                           {"mixed", v.iteration.mixed.count}}},
                         {"bias",
                          {{"all", number(v.iteration.all.bias)},
                           {"decode", number(v.iteration.decode.bias)},
                           {"prefill", number(v.iteration.prefill.bias)},
                           {"mixed", number(v.iteration.mixed.bias)}}},
                         {"floor", number(v.iteration_mape_floor)}};
  j["ttft_s"] = comparison_json(m.ttft_s, p.ttft_s);
  j["tpot_s"] = comparison_json(m.tpot_s, p.tpot_s);
  j["e2e_s"] = comparison_json(m.e2e_s, p.e2e_s);
  if (mode == ValidationMode::Predict && v.predict_bands) {
    // The median over the draws is `predicted`; beside it their band and
    // the one simulation without jitter.
    const RunSummary& single = v.predict_single_summary;
    for (auto [name, band, measured, one] :
         {std::tuple{"ttft_s", &v.predict_bands->ttft_s, &m.ttft_s, &single.ttft_s},
          std::tuple{"tpot_s", &v.predict_bands->tpot_s, &m.tpot_s, &single.tpot_s},
          std::tuple{"e2e_s", &v.predict_bands->e2e_s, &m.e2e_s, &single.e2e_s}}) {
      j[name]["draws"] = band_json(*band);
      const nlohmann::json alone = comparison_json(*measured, *one);
      j[name]["single_simulation"] = {{"predicted", alone["predicted"]}, {"rel_error", alone["rel_error"]}};
    }
    j["predict_draws"] = {{"draws", v.predict_bands->ttft_s.draws}, {"jitter", v.predict_jitter}};
  }
  j["measured"] = run_json(m, v.measured.records);
  j["predicted_run"] = run_json(p, records_of(v, mode));
  j["profile"] = v.profile_source;
  if (v.profile_saved_as) j["profile_saved_as"] = *v.profile_saved_as;
  j["cost_model"] = v.cost_model;
  j["anchor"] = v.anchor;
  j["placement"] = v.placement;
  j["in_situ"] = v.in_situ;
  if (v.measured.speculative) {
    // Replay re-costs the measured acceptance; predict draws its own.
    const SpeculativeStats& ms = *v.measured.speculative;
    const SpeculativeStats* ps = mode == ValidationMode::Predict && v.predict_speculative ? &*v.predict_speculative
                                                                                         : &ms;
    j["speculative"] = {
        {"measured", ms.to_json()},
        {"predicted", ps->to_json()},
        {"predict_acceptance_model", v.predict_acceptance},
        {"rel_error_mean_accepted_tokens_per_step",
         number(rel_error(ps->mean_accepted_tokens_per_step(), ms.mean_accepted_tokens_per_step()))}};
  }
  j["warnings"] = v.warnings;
  j["definitions"] = {
      {"rel_error", "predicted / measured - 1 (positive: the prediction is too slow)"},
      {"iteration_mape",
       "mean over the real run's iterations of |predicted cost - measured time| / measured time; "
       "decode: no prefill sequence, prefill: no decode sequence, mixed: both; null when a class is empty"},
      {"iteration_mape.bias", "mean over the same iterations of predicted / measured - 1"},
      {"iteration_mape.floor",
       "the MAPE with each prediction scaled by the rolling median of measured / predicted over the 51 "
       "iterations around it: what a model that knew the run's level at every moment would have, the "
       "iteration-to-iteration noise no cost model predicts"},
      {"replay",
       "the real run's iterations costed by the profile and re-timed on the replay clock; each request "
       "is timed from its arrival read on that clock"},
      {"predict", "an independent simulation of the same workload and scheduler with the profile"},
      {"predict_draws",
       "with --predict-draws N > 1, predict's statistics are the medians over N simulations, each "
       "iteration's cost times a multiplier drawn from `jitter`; `draws` gives each statistic's 10th and "
       "90th percentile over them, `single_simulation` the one simulation without jitter"},
      {"tpot_s", "per request with >= 2 output tokens: (last token - first token) / (tokens - 1)"}};
  j["percentiles"] = "linear interpolation between closest ranks (numpy default, Hyndman-Fan type 7)";
  j["config"] = v.config;
  return j;
}

void write_validation_outputs(const std::string& dir, const ValidationResult& v, ValidationMode mode) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw InputError(fmt::format("--out: cannot create folder '{}': {}", dir, ec.message()));
  const fs::path d(dir);
  write_text((d / "report.json").string(), validation_report_json(v, mode).dump(2) + "\n");
  write_text((d / "report_replay.json").string(), validation_report_json(v, ValidationMode::Replay).dump(2) + "\n");
  write_text((d / "report_predict.json").string(),
             validation_report_json(v, ValidationMode::Predict).dump(2) + "\n");

  std::string t =
      "index,kind,measured_s,predicted_s,rel_error,prefill_tokens,decode_tokens,sequences,core_latency_ns,"
      "placement\n";
  for (size_t k = 0; k < v.iterations.size(); ++k) {
    const RecordedIteration& it = v.iterations[k];
    const double e = rel_error(v.predicted_iteration_s[k], it.measured_s);
    const bool watched = !std::isnan(it.core_latency_ns);
    t += fmt::format("{},{},{},{},{},{},{},{},{},{}\n", k, to_string(it.kind()), it.measured_s,
                     v.predicted_iteration_s[k], std::isfinite(e) ? fmt::format("{}", e) : "", it.prefill_tokens,
                     it.decode_tokens, it.sequences.size(), watched ? fmt::format("{:.1f}", it.core_latency_ns) : "",
                     watched ? to_string(placement_of(it.core_latency_ns)) : "");
  }
  write_text((d / "iterations.csv").string(), t);

  t = "id,prompt_tokens,output_tokens,measured_ttft_s,replay_ttft_s,predict_ttft_s,measured_tpot_s,"
      "replay_tpot_s,predict_tpot_s,measured_e2e_s,replay_e2e_s,predict_e2e_s\n";
  for (const RequestRecord& r : v.measured.records.requests) {
    if (!r.submitted()) continue;
    const RequestRecord* rp = find(v.replay, r.id);
    const RequestRecord* pp = find(v.predict, r.id);
    auto of = [](const RequestRecord* x, double (*f)(const RequestRecord&)) { return x ? f(*x) : -1.0; };
    t += fmt::format("{},{},{},{},{},{},{},{},{},{},{},{}\n", r.id, r.prompt_tokens, r.output_tokens,
                     cell(ttft_of(r)), cell(of(rp, ttft_of)), cell(of(pp, ttft_of)), cell(request_tpot_s(r)),
                     cell(of(rp, request_tpot_s)), cell(of(pp, request_tpot_s)), cell(e2e_of(r)),
                     cell(of(rp, e2e_of)), cell(of(pp, e2e_of)));
  }
  write_text((d / "requests.csv").string(), t);

  SloTargets no_slo;  // goodput is not part of the comparison
  nlohmann::json measured = summary_to_json(v.measured.summary, no_slo, v.config);
  nlohmann::json replayed = summary_to_json(v.replay_summary, no_slo, predicted_config(v));
  nlohmann::json predicted = summary_to_json(v.predict_summary, no_slo, predicted_config(v));
  if (v.measured.speculative) {
    measured["speculative"] = replayed["speculative"] = v.measured.speculative->to_json();
    if (v.predict_speculative) predicted["speculative"] = v.predict_speculative->to_json();
  }
  write_run_outputs((d / "measured").string(), v.measured.records, measured);
  write_run_outputs((d / "replayed").string(), v.replay, replayed);
  write_run_outputs((d / "predicted").string(), v.predict, predicted);
  if (v.measured.speculative)
    v.measured.speculative->write_requests_csv((d / "measured" / "speculative_requests.csv").string());
}

std::string format_validation_table(const ValidationResult& v, ValidationMode mode, const std::string& title) {
  std::string t = title + "\n";
  const RunSummary& m = v.measured.summary;
  t += fmt::format("  measured   {} of {} requests completed in {:.3f} s, {} iterations, {:.1f} output tok/s\n",
                   m.completed, m.submitted, m.duration_s, m.iterations, m.output_tokens_per_s);
  t += "  iteration time: predicted cost of each measured iteration, MAPE (bias)\n";
  auto klass = [&](const char* name, const ClassError& e) {
    t += fmt::format("    {:<8} {:>7} ({:>7})  {:>6} iterations\n", name, abs_pct(e.mape), pct(e.bias), e.count);
  };
  klass("all", v.iteration.all);
  klass("decode", v.iteration.decode);
  klass("prefill", v.iteration.prefill);
  klass("mixed", v.iteration.mixed);
  t += fmt::format("    {:<8} {:>7}            the run's own noise: MAPE with its level known at every moment\n",
                   "floor", abs_pct(v.iteration_mape_floor));

  const RunSummary& p = summary_of(v, mode);
  t += fmt::format("  per request, {} mode (ms; error = predicted / measured - 1)\n", to_string(mode));
  t += fmt::format("    {:<15} {:>10} {:>10} {:>10} {:>10}\n", "", "mean", "p50", "p90", "p99");
  auto block = [&](const char* name, const Distribution& a, const Distribution& b) {
    auto ms = [](double s) { return fmt::format("{:.2f}", s * 1e3); };
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", name, "measured", ms(a.mean), ms(a.p50),
                     ms(a.p90), ms(a.p99));
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", "", "predicted", ms(b.mean), ms(b.p50),
                     ms(b.p90), ms(b.p99));
    t += fmt::format("    {:<4} {:<10} {:>10} {:>10} {:>10} {:>10}\n", "", "error", pct(rel_error(b.mean, a.mean)),
                     pct(rel_error(b.p50, a.p50)), pct(rel_error(b.p90, a.p90)), pct(rel_error(b.p99, a.p99)));
  };
  block("TTFT", m.ttft_s, p.ttft_s);
  block("TPOT", m.tpot_s, p.tpot_s);
  block("E2E", m.e2e_s, p.e2e_s);
  if (v.predict_bands)
    t += fmt::format("  predict: medians over {} jittered simulations; {}\n", v.predict_bands->ttft_s.draws,
                     band_line(*v.predict_bands));

  const ValidationMode other = mode == ValidationMode::Replay ? ValidationMode::Predict : ValidationMode::Replay;
  const RunSummary& o = summary_of(v, other);
  t += fmt::format("  {} mode: mean error TTFT {}, TPOT {}, E2E {}; P90 TTFT {}, TPOT {}\n", to_string(other),
                   pct(rel_error(o.ttft_s.mean, m.ttft_s.mean)), pct(rel_error(o.tpot_s.mean, m.tpot_s.mean)),
                   pct(rel_error(o.e2e_s.mean, m.e2e_s.mean)), pct(rel_error(o.ttft_s.p90, m.ttft_s.p90)),
                   pct(rel_error(o.tpot_s.p90, m.tpot_s.p90)));
  if (v.measured.speculative) {
    const SpeculativeStats& ms = *v.measured.speculative;
    t += fmt::format("  speculation: measured {:.3f} tokens per step ({} steps, draft acceptance {:.3f})",
                     ms.mean_accepted_tokens_per_step(), ms.steps(), ms.draft_acceptance_rate());
    if (v.predict_speculative)
      t += fmt::format("; predict drew {:.3f}", v.predict_speculative->mean_accepted_tokens_per_step());
    t += "\n";
  }
  if (v.anchor.value("measured", false)) {
    for (const auto& [name, a] : v.anchor["profiles"].items())
      t += fmt::format("  device state ({}): memory-bound work ran x{:.3f}, compute-bound x{:.3f} the time it took "
                       "at calibration (anchor probes){}\n",
                       name, a["scales"]["memory"].get<double>(), a["scales"]["compute"].get<double>(),
                       v.anchor["applied"].get<bool>() ? "; predictions re-anchored by these" : "");
  } else if (v.anchor.contains("reason")) {
    t += fmt::format("  device state: not probed ({})\n", v.anchor["reason"].get<std::string>());
  }
  if (v.placement.value("watched", false)) {
    const nlohmann::json& r = v.placement["run"];
    const int64_t n = r["near"].get<int64_t>() + r["far"].get<int64_t>() + r["unknown"].get<int64_t>();
    t += fmt::format("  threads' placement: near before {} of {} iterations, far before {}, unknown {}",
                     r["near"].get<int64_t>(), n, r["far"].get<int64_t>(), r["unknown"].get<int64_t>());
    if (!v.placement["calibration"].is_null()) {
      const nlohmann::json& c = v.placement["calibration"];
      t += fmt::format("; calibration probes: {} near, {} far, {} unknown", c["near"].get<int64_t>(),
                       c["far"].get<int64_t>(), c["unknown"].get<int64_t>());
    }
    if (v.placement.value("applied", false)) t += "; each iteration costed in its placement";
    t += "\n";
  }
  if (v.in_situ.value("refreshed", false)) {
    const nlohmann::json& d = v.in_situ["drift"];
    auto ratio = [](const nlohmann::json& x) { return x.is_number() ? fmt::format("x{:.3f}", x.get<double>()) : "-"; };
    t += fmt::format("  in-situ factors refreshed around the run (decode steps after / before it {}, prefills {})\n",
                     ratio(d["decode"]), ratio(d["prefill"]));
  }
  for (const std::string& w : v.warnings) t += "  note: " + w + "\n";
  return t;
}

}  // namespace servesim
