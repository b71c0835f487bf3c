#include "validate/host_drift/placement_ratios.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <stdexcept>
#include <utility>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "sim/errors.h"

namespace servesim {
namespace {

// Linear in log x between the points of (xs, ys); the end values beyond.
double log_interpolate(const std::vector<double>& xs, const std::vector<double>& ys, double x) {
  if (xs.empty()) return 1.0;
  if (x <= xs.front()) return ys.front();
  if (x >= xs.back()) return ys.back();
  const size_t hi = size_t(std::upper_bound(xs.begin(), xs.end(), x) - xs.begin());
  const size_t lo = hi - 1;
  const double w = (std::log(x) - std::log(xs[lo])) / (std::log(xs[hi]) - std::log(xs[lo]));
  return ys[lo] + w * (ys[hi] - ys[lo]);
}

Placement placement_named(const nlohmann::json& j, const char* name, const std::string& source) {
  const std::string s = j.contains(name) && j[name].is_string() ? j[name].get<std::string>() : "";
  if (s == "near") return Placement::Near;
  if (s == "far") return Placement::Far;
  throw InputError(fmt::format("{}: placement_ratios.{} must be \"near\" or \"far\"", source, name));
}

// A ladder: increasing positive x, positive ratios, as many of each.
void read_ladder(const nlohmann::json& j, const char* x_name, const char* ratio_name, const std::string& source,
                 std::vector<double>& xs, std::vector<double>& ratios) {
  auto numbers = [&](const char* name) {
    if (!j.contains(name) || !j[name].is_array() || j[name].empty())
      throw InputError(fmt::format("{}: placement_ratios.{} must be a non-empty array of numbers", source, name));
    std::vector<double> v;
    for (const nlohmann::json& e : j[name]) {
      if (!e.is_number() || !(e.get<double>() > 0))
        throw InputError(fmt::format("{}: placement_ratios.{} must hold numbers > 0", source, name));
      v.push_back(e.get<double>());
    }
    return v;
  };
  xs = numbers(x_name);
  ratios = numbers(ratio_name);
  if (xs.size() != ratios.size())
    throw InputError(fmt::format("{}: placement_ratios.{} and .{} differ in length", source, x_name, ratio_name));
  if (!std::is_sorted(xs.begin(), xs.end()) || std::adjacent_find(xs.begin(), xs.end()) != xs.end())
    throw InputError(fmt::format("{}: placement_ratios.{} must increase", source, x_name));
}

}  // namespace

std::optional<PlacementRatios> placement_ratios_of(const DeviceProfile& profile, const std::string& source) {
  if (profile.placement_ratios.is_null()) return std::nullopt;
  return PlacementRatios::from_json(profile.placement_ratios, source);
}

PlacementRatios PlacementRatios::inverted() const {
  PlacementRatios r = *this;
  std::swap(r.reference, r.other);
  std::swap(r.samples_reference, r.samples_other);
  for (double& x : r.decode_ratio) x = 1.0 / x;
  for (double& x : r.prefill_ratio) x = 1.0 / x;
  return r;
}

double PlacementRatios::ratio(int64_t prefill, int64_t sequences, int64_t tokens, Placement placement) const {
  if (placement != other || other == Placement::Unknown) return 1.0;
  if (prefill == 0) return log_interpolate(decode_batch, decode_ratio, double(sequences));
  return log_interpolate(prefill_tokens, prefill_ratio, double(tokens));
}

nlohmann::json PlacementRatios::to_json() const {
  return {{"reference", to_string(reference)},
          {"other", to_string(other)},
          {"decode_batch", decode_batch},
          {"decode_ratio", decode_ratio},
          {"prefill_tokens", prefill_tokens},
          {"prefill_ratio", prefill_ratio},
          {"context", context},
          {"samples_reference", samples_reference},
          {"samples_other", samples_other},
          {"meaning", "time of whole-model iterations with the threads in `other` placement / in `reference` "
                      "(calib/placement_ratios.h): decode steps of B sequences, prefills of T tokens"}};
}

PlacementRatios PlacementRatios::from_json(const nlohmann::json& j, const std::string& source) {
  if (!j.is_object()) throw InputError(fmt::format("{}: placement_ratios must be an object", source));
  PlacementRatios r;
  r.reference = placement_named(j, "reference", source);
  r.other = placement_named(j, "other", source);
  if (r.reference == r.other)
    throw InputError(fmt::format("{}: placement_ratios.reference and .other must differ", source));
  read_ladder(j, "decode_batch", "decode_ratio", source, r.decode_batch, r.decode_ratio);
  read_ladder(j, "prefill_tokens", "prefill_ratio", source, r.prefill_tokens, r.prefill_ratio);
  r.context = j.value("context", int64_t(0));
  for (auto [name, samples] : {std::pair{"samples_reference", &r.samples_reference}, {"samples_other", &r.samples_other}}) {
    if (!j.contains(name)) continue;
    if (!j[name].is_array())
      throw InputError(fmt::format("{}: placement_ratios.{} must be an array of counts", source, name));
    for (const nlohmann::json& n : j[name]) {
      if (!n.is_number_integer() || n.get<int64_t>() < 0)
        throw InputError(fmt::format("{}: placement_ratios.{} must hold counts >= 0", source, name));
      samples->push_back(n.get<int64_t>());
    }
  }
  return r;
}

std::optional<PlacementRatios> measure_placement_ratios(Executor& executor, int32_t block_size,
                                                        Placement reference, const PlacementRatioSettings& s,
                                                        const std::function<void(const std::string&)>& say) {
  if (reference == Placement::Unknown) reference = Placement::Near;
  const Placement other = reference == Placement::Near ? Placement::Far : Placement::Near;
  // The ladder's plans: decode sequences on blocks of their own, prefills
  // from block 0 (their KV overwrites decode blocks: values do not matter).
  const int64_t blocks_per_sequence = (s.context + 1 + block_size - 1) / block_size;
  std::vector<std::vector<int32_t>> tables;
  int64_t longest = 0;
  for (int64_t b : s.decode_batches) longest = std::max(longest, b);
  for (int64_t i = 0; i < longest; ++i) {
    std::vector<int32_t>& t = tables.emplace_back();
    for (int64_t k = 0; k < blocks_per_sequence; ++k) t.push_back(int32_t(i * blocks_per_sequence + k));
  }
  std::vector<IterationPlan> plans;
  for (int64_t b : s.decode_batches) {
    IterationPlan& plan = plans.emplace_back();
    for (int64_t i = 0; i < b; ++i) {
      ScheduledSequence seq;
      seq.request_id = i + 1;
      seq.num_query_tokens = 1;
      seq.num_cached_tokens = int32_t(s.context);
      seq.samples = true;
      seq.block_table = tables[size_t(i)];
      plan.add(seq);
    }
  }
  std::vector<int32_t> prefill_table;
  for (int64_t t : s.prefill_tokens) {
    while (int64_t(prefill_table.size()) * block_size < t) prefill_table.push_back(int32_t(prefill_table.size()));
  }
  for (int64_t t : s.prefill_tokens) {
    IterationPlan& plan = plans.emplace_back();
    ScheduledSequence seq;
    seq.request_id = 1;
    seq.num_query_tokens = int32_t(t);
    seq.num_cached_tokens = 0;
    seq.is_prefill = true;
    seq.samples = true;
    seq.block_table = std::span<const int32_t>(prefill_table.data(), size_t((t + block_size - 1) / block_size));
    plan.add(seq);
  }

  std::vector<std::vector<double>> in_reference(plans.size()), in_other(plans.size());
  auto enough = [&] {
    for (size_t k = 0; k < plans.size(); ++k)
      if (int64_t(in_reference[k].size()) < s.samples_wanted || int64_t(in_other[k].size()) < s.samples_wanted)
        return false;
    return true;
  };
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  double next_note_s = 30;
  IterationResult result;
  for (int round = 0;; ++round) {
    const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
    if (elapsed > s.max_seconds || enough()) break;
    if (elapsed > next_note_s) {
      say(fmt::format("placement ratios: {:.0f} s, the largest prefill timed {} times {} and {} times {}", elapsed,
                      in_reference.back().size(), to_string(reference), in_other.back().size(), to_string(other)));
      next_note_s += 30;
    }
    for (size_t k = 0; k < plans.size(); ++k) {
      const Placement p = placement_of(core_to_core_latency_ns(s.threads));
      result.reset();
      executor.execute(plans[k], result);
      if (round == 0) continue;  // warm-up
      if (p == reference) in_reference[k].push_back(result.duration_s);
      if (p == other) in_other[k].push_back(result.duration_s);
    }
  }
  constexpr size_t kFewest = 3;
  for (size_t k = 0; k < plans.size(); ++k)
    if (in_reference[k].size() < kFewest || in_other[k].size() < kFewest) return std::nullopt;
  PlacementRatios r;
  r.reference = reference;
  r.other = other;
  r.context = s.context;
  for (size_t k = 0; k < plans.size(); ++k) {
    const double ratio = calibration::median(in_other[k]) / calibration::median(in_reference[k]);
    if (k < s.decode_batches.size()) {
      r.decode_batch.push_back(double(s.decode_batches[k]));
      r.decode_ratio.push_back(ratio);
    } else {
      r.prefill_tokens.push_back(double(s.prefill_tokens[k - s.decode_batches.size()]));
      r.prefill_ratio.push_back(ratio);
    }
    r.samples_reference.push_back(int64_t(in_reference[k].size()));
    r.samples_other.push_back(int64_t(in_other[k].size()));
  }
  return r;
}

}  // namespace servesim
