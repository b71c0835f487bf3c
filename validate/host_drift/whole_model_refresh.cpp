#include "validate/host_drift/whole_model_refresh.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/placement_ratios.h"

namespace servesim {

using calibration::ceil_div;
using calibration::DecodeSteps;
using calibration::OneSequencePlan;

RefreshSettings refresh_settings_for(const DeviceProfile& profile, int64_t max_num_seqs,
                                               int64_t max_batched_tokens, int64_t max_model_len) {
  RefreshSettings s;
  s.block_size = profile.block_size;
  auto axis = [](const std::vector<double>& x, std::vector<int64_t> fallback) {
    if (x.empty()) return fallback;
    std::vector<int64_t> out;
    for (double v : x) out.push_back(int64_t(std::llround(v)));
    return out;
  };
  s.prefill_tokens = axis(profile.gemm_factor.x, {32, 128, 512});
  s.decode_batches = axis(profile.decode_step_factor.x, {1, 2, 4, 8, 16, 32});
  std::erase_if(s.prefill_tokens,
                [&](int64_t t) { return t < 1 || t > max_batched_tokens || t > max_model_len; });
  std::erase_if(s.decode_batches, [&](int64_t b) { return b < 1 || b > max_num_seqs; });
  for (int64_t t : s.prefill_tokens)
    if (s.prefill_probe_tokens == 0 ||
        std::fabs(std::log(double(t) / 128.0)) < std::fabs(std::log(double(s.prefill_probe_tokens) / 128.0)))
      s.prefill_probe_tokens = t;
  // The longest decode context, 3 cached / 2 + the steps, within the model's.
  const int64_t steps = s.warm_up + s.timed;
  s.cached = std::clamp<int64_t>((max_model_len - 1 - steps) * 2 / 3, 0, s.cached);
  return s;
}

namespace {

// KV blocks of one prefill of t tokens (and its lead decode steps), and of the decode steps of b sequences.
int64_t prefill_blocks(const RefreshSettings& s, int64_t t) {
  return calibration::prefill_blocks_with_lead(t, s.block_size, calibration::kPrefillLeadSteps, s.cached);
}
int64_t decode_blocks(const RefreshSettings& s, int64_t b) {
  return DecodeSteps::blocks(b, s.cached, s.warm_up + s.timed, s.block_size);
}

}  // namespace

int64_t interleave_probe_blocks(const RefreshSettings& s) {
  int64_t largest = 1;
  for (int64_t b : s.decode_batches) largest = std::max(largest, b);
  const int64_t decode = DecodeSteps::blocks(
      largest, s.cached, WholeModelRefresher::kProbeWarmUp + WholeModelRefresher::kProbeTimed, s.block_size);
  return s.prefill_probe_tokens > 0 ? std::max(decode, prefill_blocks(s, s.prefill_probe_tokens)) : decode;
}

int64_t refresh_blocks(const RefreshSettings& s) {
  int64_t blocks = 1;
  for (int64_t t : s.prefill_tokens) blocks = std::max(blocks, prefill_blocks(s, t));
  for (int64_t b : s.decode_batches) blocks = std::max(blocks, decode_blocks(s, b));
  return blocks;
}

RefreshSettings fit_to_kv_cache(RefreshSettings s, int64_t kv_blocks, int32_t block_size) {
  s.block_size = block_size;
  std::erase_if(s.prefill_tokens, [&](int64_t t) { return prefill_blocks(s, t) > kv_blocks; });
  std::erase_if(s.decode_batches, [&](int64_t b) { return decode_blocks(s, b) > kv_blocks; });
  if (s.prefill_probe_tokens > 0 && prefill_blocks(s, s.prefill_probe_tokens) > kv_blocks) s.prefill_probe_tokens = 0;
  return s;
}

WholeModelRefresher::WholeModelRefresher(RefreshSettings settings, std::function<double()> core_latency_ns)
    : settings_(std::move(settings)), core_latency_ns_(std::move(core_latency_ns)) {
  if (settings_.timed < 1 || settings_.warm_up < 0 || settings_.rounds < 1)
    throw std::invalid_argument("WholeModelRefresher: timed and rounds must be >= 1, warm_up >= 0");
}

double WholeModelRefresher::latency_ns() const {
  return core_latency_ns_ ? core_latency_ns_() : std::numeric_limits<double>::quiet_NaN();
}

void WholeModelRefresher::measure(Executor& executor, bool before) {
  const RefreshSettings& s = settings_;
  for (int round = 0; round < s.rounds; ++round) {
    // Prefills: one untimed, then two timed (the full calibration's
    // moment), each after calibration::kPrefillLeadSteps decode steps of
    // another sequence, as a served prefill follows decode steps.
    for (int64_t t : s.prefill_tokens) {
      const double latency_before = latency_ns();
      const std::vector<double> seconds =
          calibration::time_prefills(executor, t, s.block_size, 1, 2, calibration::kPrefillLeadSteps, s.cached);
      const Placement placement = placement_of(latency_before, latency_ns());
      for (double sec : seconds) samples_.push_back({before, t, 1, 0, sec, placement});
    }
    // Decode steps: served-like, after the warm-up steps.
    for (int64_t b : s.decode_batches) {
      const double latency_before = latency_ns();
      const std::vector<double> seconds =
          calibration::time_decode_steps(executor, b, s.cached, s.block_size, s.warm_up, s.timed);
      const Placement placement = placement_of(latency_before, latency_ns());
      for (size_t k = 0; k < seconds.size(); ++k) samples_.push_back({before, 0, b, int(k), seconds[k], placement});
    }
  }
}

std::vector<double> WholeModelRefresher::time_probe_steps(Executor& executor, int64_t sequences) const {
  return calibration::time_decode_steps(executor, sequences, settings_.cached, settings_.block_size, kProbeWarmUp,
                                        kProbeTimed, settings_.probe_first_block, kProbeRequestId);
}

bool WholeModelRefresher::probe_between(Executor& executor, double now_s, int64_t served_sequences) {
  const RefreshSettings& s = settings_;
  if (s.prefill_probe_tokens > 0 && s.between_prefill_probe_interval_s > 0 &&
      (last_prefill_probe_s_ < 0 || now_s - last_prefill_probe_s_ >= s.between_prefill_probe_interval_s)) {
    const double latency_before = latency_ns();
    const std::vector<double> seconds =
        calibration::time_prefills(executor, s.prefill_probe_tokens, s.block_size, 0, 1,
                                   calibration::kPrefillLeadSteps, s.cached, s.probe_first_block, kProbeRequestId);
    probes_.push_back({now_s, seconds.front(), 1, s.prefill_probe_tokens, placement_of(latency_before, latency_ns())});
    last_prefill_probe_s_ = now_s;
    return true;
  }
  if (!probes_.empty() && now_s - probes_.back().time_s < settings_.between_probe_interval_s) return false;
  int64_t sequences = 1;
  for (int64_t b : settings_.decode_batches)
    if (b <= served_sequences) sequences = std::max(sequences, b);
  const double latency_before = latency_ns();
  const std::vector<double> seconds = time_probe_steps(executor, sequences);
  probes_.push_back({now_s, calibration::median(seconds), sequences, 0, placement_of(latency_before, latency_ns())});
  return true;
}

namespace {

// Each level's smoothed value: the median of its measured_over_predicted
// and those of `neighbours` levels on each side (sorted by time first).
void smooth(std::vector<DriftLevel>& levels, size_t neighbours) {
  std::sort(levels.begin(), levels.end(),
            [](const DriftLevel& a, const DriftLevel& b) { return a.probe.time_s < b.probe.time_s; });
  for (size_t i = 0; i < levels.size(); ++i) {
    std::vector<double> around;
    for (size_t j = i > neighbours ? i - neighbours : 0; j <= i + neighbours && j < levels.size(); ++j)
      around.push_back(levels[j].measured_over_predicted);
    levels[i].smoothed = calibration::median(around);
  }
}

// The level at time t: linear between the levels around it, the nearest
// one's before the first and after the last, 1 without any.
double level_along(const std::vector<DriftLevel>& levels, double t) {
  if (levels.empty()) return 1.0;
  if (t <= levels.front().probe.time_s) return levels.front().level;
  if (t >= levels.back().probe.time_s) return levels.back().level;
  const auto hi = std::upper_bound(levels.begin(), levels.end(), t,
                                   [](double time, const DriftLevel& l) { return time < l.probe.time_s; });
  const auto lo = hi - 1;
  const double w = (t - lo->probe.time_s) / (hi->probe.time_s - lo->probe.time_s);
  return lo->level + w * (hi->level - lo->level);
}

}  // namespace

DriftLevels drift_levels(const DeviceProfile& refreshed, const RefreshSettings& s,
                         const std::vector<InterleavedProbe>& probes) {
  const ProfileModel model(refreshed, refreshed.model, "the refreshed profile");
  const std::optional<PlacementRatios> ratios = placement_ratios_of(refreshed, "the refreshed profile");
  // What the refreshed profile predicts for a probe of b sequences (the
  // median over its timed steps), or a prefill probe of t tokens, in the
  // reference placement.
  std::map<int64_t, double> predicted_decode_s, predicted_prefill_s;
  auto predicted_decode = [&](int64_t b) {
    auto it = predicted_decode_s.find(b);
    if (it != predicted_decode_s.end()) return it->second;
    DecodeSteps steps(b, s.cached, WholeModelRefresher::kProbeWarmUp + WholeModelRefresher::kProbeTimed,
                      s.block_size);
    for (int k = 0; k < WholeModelRefresher::kProbeWarmUp; ++k) steps.advance();
    std::vector<double> each;
    for (int k = 0; k < WholeModelRefresher::kProbeTimed; ++k, steps.advance())
      each.push_back(model.breakdown(steps.plan()).total());
    return predicted_decode_s[b] = calibration::median(each);
  };
  auto predicted_prefill = [&](int64_t t) {
    auto it = predicted_prefill_s.find(t);
    if (it != predicted_prefill_s.end()) return it->second;
    return predicted_prefill_s[t] = model.breakdown(OneSequencePlan(1, t, 0, true, s.block_size).plan()).total();
  };
  DriftLevels out;
  for (const InterleavedProbe& p : probes) {
    const bool prefill = p.prefill_tokens > 0;
    const int64_t tokens = prefill ? p.prefill_tokens : p.sequences;
    const double ratio =
        ratios ? ratios->ratio(p.prefill_tokens, prefill ? 1 : p.sequences, tokens, p.placement) : 1.0;
    DriftLevel l;
    l.probe = p;
    l.measured_over_predicted =
        p.seconds / ((prefill ? predicted_prefill(p.prefill_tokens) : predicted_decode(p.sequences)) * ratio);
    (prefill ? out.prefill : out.decode).push_back(l);
  }
  smooth(out.decode, kDecodeNeighbours);
  smooth(out.prefill, kPrefillNeighbours);
  // The probes run where served steps run (between them), so their level
  // is taken as measured.
  for (std::vector<DriftLevel>* levels : {&out.decode, &out.prefill})
    for (DriftLevel& l : *levels) l.level = l.smoothed;
  return out;
}

double DriftLevels::at(bool has_prefill, double t) const {
  return level_along(has_prefill ? prefill : decode, t);
}

namespace {

bool same_shape(const RefreshSample& x, int64_t prefill_tokens, int64_t sequences) {
  return prefill_tokens > 0 ? x.prefill_tokens == prefill_tokens : (x.prefill_tokens == 0 && x.sequences == sequences);
}

std::string shape_name(int64_t prefill_tokens, int64_t sequences) {
  return prefill_tokens > 0 ? fmt::format("{}-token prefill", prefill_tokens)
                            : fmt::format("decode step of {} sequence{}", sequences, sequences == 1 ? "" : "s");
}

// The seconds of every shape's samples that `keep` accepts, in sample
// order (so step k of a round of decode steps is sample k mod timed),
// each divided by `divisor` (the placement correction).
struct Pool {
  std::vector<std::vector<double>> prefill;  // per settings.prefill_tokens
  std::vector<std::vector<double>> decode;   // per settings.decode_batches
  bool complete() const {
    for (const auto* v : {&prefill, &decode})
      for (const std::vector<double>& x : *v)
        if (x.empty()) return false;
    return true;
  }
};

Pool pool(const RefreshSettings& s, const std::vector<RefreshSample>& samples,
          const std::function<bool(const RefreshSample&)>& keep,
          const std::function<double(const RefreshSample&)>& divisor) {
  Pool out;
  for (int64_t t : s.prefill_tokens) {
    std::vector<double>& v = out.prefill.emplace_back();
    for (const RefreshSample& x : samples)
      if (same_shape(x, t, 1) && keep(x)) v.push_back(x.seconds / divisor(x));
  }
  for (int64_t b : s.decode_batches) {
    std::vector<double>& v = out.decode.emplace_back();
    for (const RefreshSample& x : samples)
      if (same_shape(x, 0, b) && keep(x)) v.push_back(x.seconds / divisor(x));
  }
  return out;
}

// The profile's ratios, seen from `reference` (inverted when the profile's
// reference is the other placement).
std::optional<PlacementRatios> ratios_from(const std::optional<PlacementRatios>& ratios, Placement reference) {
  if (!ratios) return std::nullopt;
  return ratios->reference == reference ? *ratios : ratios->inverted();
}

// Ratios other / reference measured by the refresh: the median of each
// shape's samples in each placement.
PlacementRatios fresh_ratios(const RefreshSettings& s, const Pool& reference, const Pool& other,
                             Placement reference_placement, Placement other_placement) {
  PlacementRatios r;
  r.reference = reference_placement;
  r.other = other_placement;
  r.context = s.cached;
  for (size_t i = 0; i < s.decode_batches.size(); ++i) {
    r.decode_batch.push_back(double(s.decode_batches[i]));
    r.decode_ratio.push_back(calibration::median(other.decode[i]) / calibration::median(reference.decode[i]));
    r.samples_reference.push_back(int64_t(reference.decode[i].size()));
    r.samples_other.push_back(int64_t(other.decode[i].size()));
  }
  for (size_t i = 0; i < s.prefill_tokens.size(); ++i) {
    r.prefill_tokens.push_back(double(s.prefill_tokens[i]));
    r.prefill_ratio.push_back(calibration::median(other.prefill[i]) / calibration::median(reference.prefill[i]));
    r.samples_reference.push_back(int64_t(reference.prefill[i].size()));
    r.samples_other.push_back(int64_t(other.prefill[i].size()));
  }
  return r;
}

nlohmann::json factor_json(const DeviceProfile::FactorCurve& c) { return {{"x", c.x}, {"factor", c.factor}}; }

nlohmann::json geometric_mean(const std::vector<double>& v) {
  if (v.empty()) return nullptr;
  double log_sum = 0;
  for (double x : v) log_sum += std::log(x);
  return std::exp(log_sum / double(v.size()));
}

}  // namespace

RefreshResult refresh_whole_model_factors(const DeviceProfile& profile, const RefreshSettings& s,
                                    const std::vector<RefreshSample>& samples,
                                    const std::function<void(const std::string&)>& say) {
  for (int64_t t : s.prefill_tokens)
    if (std::none_of(samples.begin(), samples.end(), [&](const RefreshSample& x) { return same_shape(x, t, 1); }))
      throw InputError(fmt::format("whole-model refresh: no sample of a {} was measured", shape_name(t, 1)));
  for (int64_t b : s.decode_batches)
    if (std::none_of(samples.begin(), samples.end(), [&](const RefreshSample& x) { return same_shape(x, 0, b); }))
      throw InputError(fmt::format("whole-model refresh: no sample of a {} was measured", shape_name(0, b)));

  RefreshResult out{profile, Placement::Unknown, {}};
  DeviceProfile& p = out.profile;
  const std::optional<PlacementRatios> profile_ratios = placement_ratios_of(profile, "the profile");
  std::optional<PlacementRatios> ratios;

  // Which placement the refreshed factors describe, and the ratios to the
  // other (the file's header).
  const std::optional<PlacementCounts> calibration = calibration_placement_counts(profile);
  const Placement calibrated_in = calibration ? calibration->dominant() : Placement::Unknown;
  const Placement reference = profile_ratios                        ? profile_ratios->reference
                              : calibrated_in != Placement::Unknown ? calibrated_in
                                                                    : Placement::Near;
  const Placement other = reference == Placement::Near ? Placement::Far : Placement::Near;
  auto in = [](Placement where) { return [where](const RefreshSample& x) { return x.placement == where; }; };
  auto as_measured = [](const RefreshSample&) { return 1.0; };
  const Pool in_reference = pool(s, samples, in(reference), as_measured);
  const Pool in_other = pool(s, samples, in(other), as_measured);
  Pool used;
  std::string basis;
  if (in_reference.complete() && in_other.complete()) {
    used = in_reference;
    out.tables_placement = reference;
    ratios = fresh_ratios(s, in_reference, in_other, reference, other);
    basis = fmt::format("every shape timed in both placements: the factors from the {} samples, placement ratios "
                        "from the two (measured around the run)", to_string(reference));
  } else if (in_reference.complete() || in_other.complete()) {
    out.tables_placement = in_reference.complete() ? reference : other;
    used = in_reference.complete() ? in_reference : in_other;
    ratios = ratios_from(profile_ratios, out.tables_placement);
    basis = fmt::format("every shape timed {}: the factors from those samples, {}", to_string(out.tables_placement),
                        ratios ? "the profile's placement ratios for the other placement"
                               : "no placement ratios (the profile has none)");
  } else {
    // Timed in no placement throughout (one thread, or the host moving the
    // threads between shapes): every sample, in the profile's reference
    // placement by its ratios where it has them.
    out.tables_placement = profile_ratios ? reference : Placement::Unknown;
    ratios = profile_ratios;
    used = pool(s, samples, [](const RefreshSample&) { return true; }, [&](const RefreshSample& x) {
      if (!profile_ratios) return 1.0;
      const int64_t tokens = x.prefill_tokens > 0 ? x.prefill_tokens : x.sequences;
      return profile_ratios->ratio(x.prefill_tokens, x.prefill_tokens > 0 ? 1 : x.sequences, tokens, x.placement);
    });
    basis = profile_ratios ? "no placement held for every shape: every sample, divided by the profile's "
                             "placement ratio for the placement it ran in"
                           : "every sample as measured (no placement held for every shape, no ratios)";
  }
  p.placement_ratios = ratios ? ratios->to_json() : nlohmann::json();
  if (say) say("refresh: " + basis);

  std::vector<double> prefill_s;
  for (const std::vector<double>& v : used.prefill) prefill_s.push_back(calibration::median(v));
  if (!s.prefill_tokens.empty()) calibration::set_gemm_factor(p, s.prefill_tokens, prefill_s, s.block_size, say);
  if (!s.decode_batches.empty())
    calibration::set_decode_step_factor(p, s.decode_batches, s.cached, s.block_size, s.warm_up, s.timed, used.decode,
                                    say);

  // The drift over the run: per shape and placement with samples before
  // and after the run, after / before; the geometric mean over them.
  std::vector<double> decode_drift, prefill_drift;
  for (Placement where : {Placement::Near, Placement::Far, Placement::Unknown}) {
    auto at = [&](bool before) {
      return pool(s, samples, [&](const RefreshSample& x) { return x.placement == where && x.before == before; },
                  as_measured);
    };
    const Pool before = at(true), after = at(false);
    for (size_t i = 0; i < s.prefill_tokens.size(); ++i)
      if (!before.prefill[i].empty() && !after.prefill[i].empty())
        prefill_drift.push_back(calibration::median(after.prefill[i]) / calibration::median(before.prefill[i]));
    for (size_t i = 0; i < s.decode_batches.size(); ++i)
      if (!before.decode[i].empty() && !after.decode[i].empty())
        decode_drift.push_back(calibration::median(after.decode[i]) / calibration::median(before.decode[i]));
  }
  const nlohmann::json decode = geometric_mean(decode_drift), prefill = geometric_mean(prefill_drift);
  nlohmann::json largest = nullptr;
  for (const nlohmann::json& d : {decode, prefill}) {
    if (!d.is_number()) continue;
    const double off = std::fabs(d.get<double>() - 1.0);
    if (!largest.is_number() || off > largest.get<double>()) largest = off;
  }

  nlohmann::json counts;
  for (bool before : {true, false}) {
    PlacementCounts c;
    for (const RefreshSample& x : samples)
      if (x.before == before) c.add(x.placement);
    counts[before ? "before" : "after"] = {{"near", c.near}, {"far", c.far}, {"unknown", c.unknown}};
  }
  out.report = {
      {"refreshed", true},
      {"rule", "whole-model prefills and served-like decode steps timed just before and just after the real run; "
               "f (tables.gemm_in_situ) and g (tables.decode_in_situ) set from them by the calibration's rules "
               "(validate/host_drift/whole_model_refresh.h)"},
      {"basis", basis},
      {"tables_placement", to_string(out.tables_placement)},
      {"placement_ratios", p.placement_ratios},
      {"settings",
       {{"prefill_tokens", s.prefill_tokens},
        {"decode_batches", s.decode_batches},
        {"cached", s.cached},
        {"warm_up_steps", s.warm_up},
        {"timed_steps", s.timed},
        {"rounds", s.rounds}}},
      {"samples", counts},
      {"calibration", {{"gemm_in_situ", factor_json(profile.gemm_factor)},
                       {"decode_in_situ", factor_json(profile.decode_step_factor)}}},
      {"run", {{"gemm_in_situ", factor_json(p.gemm_factor)}, {"decode_in_situ", factor_json(p.decode_step_factor)}}},
      {"drift",
       {{"meaning", "after / before the real run per shape timed in the same placement both times, geometric mean "
                    "over the shapes; null when no shape was"},
        {"decode", decode},
        {"prefill", prefill},
        {"largest", largest}}}};
  return out;
}

}  // namespace servesim
