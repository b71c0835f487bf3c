#include "calib/in_situ_refresh.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "calib/calibration_common.h"
#include "calib/placement_ratios.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/decoder/decoder_executor.h"
#include "kernels/decoder/host_weights.h"
#include "sim/errors.h"

namespace servesim {

using calibration::ceil_div;
using calibration::DecodeSteps;
using calibration::OneSequencePlan;

InSituRefreshSettings in_situ_refresh_settings(const DeviceProfile& profile, int64_t max_num_seqs,
                                               int64_t max_batched_tokens, int64_t max_model_len) {
  InSituRefreshSettings s;
  s.block_size = profile.block_size;
  auto axis = [](const std::vector<double>& x, std::vector<int64_t> fallback) {
    if (x.empty()) return fallback;
    std::vector<int64_t> out;
    for (double v : x) out.push_back(int64_t(std::llround(v)));
    return out;
  };
  s.prefill_tokens = axis(profile.gemm_in_situ.x, {32, 128, 512});
  s.decode_batches = axis(profile.decode_in_situ.x, {1, 2, 4, 8, 16, 32});
  std::erase_if(s.prefill_tokens,
                [&](int64_t t) { return t < 1 || t > max_batched_tokens || t > max_model_len; });
  std::erase_if(s.decode_batches, [&](int64_t b) { return b < 1 || b > max_num_seqs; });
  // The longest decode context, 3 cached / 2 + the steps, within the model's.
  const int64_t steps = s.warm_up + s.timed;
  s.cached = std::clamp<int64_t>((max_model_len - 1 - steps) * 2 / 3, 0, s.cached);
  return s;
}

int64_t in_situ_refresh_blocks(const InSituRefreshSettings& s) {
  int64_t blocks = 0;
  for (int64_t t : s.prefill_tokens) blocks = std::max(blocks, ceil_div(t, s.block_size));
  for (int64_t b : s.decode_batches)
    blocks = std::max(blocks, DecodeSteps::blocks(b, s.cached, s.warm_up + s.timed, s.block_size));
  return std::max<int64_t>(blocks, 1);
}

InSituRefresher::InSituRefresher(InSituRefreshSettings settings, Executor& executor,
                                 std::function<double()> core_latency_ns)
    : settings_(std::move(settings)), executor_(executor), core_latency_ns_(std::move(core_latency_ns)) {
  if (settings_.timed < 1 || settings_.warm_up < 0 || settings_.rounds < 1)
    throw std::invalid_argument("InSituRefresher: timed and rounds must be >= 1, warm_up >= 0");
}

void InSituRefresher::measure(bool before) {
  const InSituRefreshSettings& s = settings_;
  auto latency = [&] { return core_latency_ns_ ? core_latency_ns_() : std::numeric_limits<double>::quiet_NaN(); };
  IterationResult result;
  for (int round = 0; round < s.rounds; ++round) {
    // Prefills: one untimed, then two timed (the full calibration's moment).
    for (int64_t t : s.prefill_tokens) {
      const OneSequencePlan prefill(1, t, 0, true, s.block_size);
      const double latency_before = latency();
      std::vector<double> seconds;
      for (int i = 0; i < 3; ++i) {
        result.reset();
        executor_.execute(prefill.plan(), result);
        if (i > 0) seconds.push_back(result.duration_s);
      }
      const Placement placement = placement_of(latency_before, latency());
      for (double sec : seconds) samples_.push_back({before, t, 1, 0, sec, placement});
    }
    // Decode steps: served-like, after the warm-up steps.
    for (int64_t b : s.decode_batches) {
      const double latency_before = latency();
      const std::vector<double> seconds =
          calibration::time_decode_steps(executor_, b, s.cached, s.block_size, s.warm_up, s.timed);
      const Placement placement = placement_of(latency_before, latency());
      for (size_t k = 0; k < seconds.size(); ++k) samples_.push_back({before, 0, b, int(k), seconds[k], placement});
    }
  }
}

namespace {

// A sample's seconds in the tables' placement (the file's header).
double in_reference_placement(const InSituSample& x, const DeviceProfile& p) {
  if (!p.placement_ratios) return x.seconds;
  const int64_t tokens = x.prefill_tokens > 0 ? x.prefill_tokens : x.sequences;
  return x.seconds / p.placement_ratios->ratio(x.prefill_tokens, x.prefill_tokens > 0 ? 1 : x.sequences, tokens,
                                               x.placement);
}

bool same_shape(const InSituSample& x, int64_t prefill_tokens, int64_t sequences) {
  return prefill_tokens > 0 ? x.prefill_tokens == prefill_tokens : (x.prefill_tokens == 0 && x.sequences == sequences);
}

nlohmann::json in_situ_json(const DeviceProfile::InSitu& c) { return {{"x", c.x}, {"factor", c.factor}}; }

}  // namespace

InSituRefreshResult refresh_in_situ(const DeviceProfile& profile, const InSituRefreshSettings& s,
                                    const std::vector<InSituSample>& samples,
                                    const std::function<void(const std::string&)>& say) {
  InSituRefreshResult out{profile, {}};
  DeviceProfile& p = out.profile;

  // Per shape: every sample in the tables' placement, and the medians
  // before and after the run (the drift over the run).
  std::vector<double> decode_drift, prefill_drift;
  auto pooled = [&](int64_t prefill_tokens, int64_t sequences, std::vector<double>* drift) {
    std::vector<double> all, before, after;
    for (const InSituSample& x : samples) {
      if (!same_shape(x, prefill_tokens, sequences)) continue;
      const double sec = in_reference_placement(x, profile);
      all.push_back(sec);
      (x.before ? before : after).push_back(sec);
    }
    if (all.empty())
      throw InputError(fmt::format("in-situ refresh: no sample of a {} was measured",
                                   prefill_tokens > 0 ? fmt::format("{}-token prefill", prefill_tokens)
                                                      : fmt::format("decode step of {} sequences", sequences)));
    if (!before.empty() && !after.empty())
      drift->push_back(calibration::median(after) / calibration::median(before));
    return all;
  };

  std::vector<double> prefill_s;
  for (int64_t t : s.prefill_tokens) prefill_s.push_back(calibration::median(pooled(t, 1, &prefill_drift)));
  if (!s.prefill_tokens.empty()) calibration::set_in_situ(p, s.prefill_tokens, prefill_s, s.block_size, say);
  // In sample order, so step k of a round is sample k mod timed, as
  // set_decode_in_situ reads them.
  std::vector<std::vector<double>> decode_s;
  for (int64_t b : s.decode_batches) decode_s.push_back(pooled(0, b, &decode_drift));
  if (!s.decode_batches.empty())
    calibration::set_decode_in_situ(p, s.decode_batches, s.cached, s.block_size, s.warm_up, s.timed, decode_s, say);

  auto geometric_mean = [](const std::vector<double>& v) -> nlohmann::json {
    if (v.empty()) return nullptr;
    double log_sum = 0;
    for (double x : v) log_sum += std::log(x);
    return std::exp(log_sum / double(v.size()));
  };
  const nlohmann::json decode = geometric_mean(decode_drift), prefill = geometric_mean(prefill_drift);
  nlohmann::json largest = nullptr;
  for (const nlohmann::json& d : {decode, prefill})
    if (d.is_number())
      largest = std::max(largest.is_number() ? largest.get<double>() : 0.0, std::fabs(d.get<double>() - 1.0));

  nlohmann::json counts;
  for (bool before : {true, false}) {
    PlacementCounts c;
    for (const InSituSample& x : samples)
      if (x.before == before) c.add(x.placement);
    counts[before ? "before" : "after"] = {{"near", c.near}, {"far", c.far}, {"unknown", c.unknown}};
  }
  out.report = {
      {"refreshed", true},
      {"rule", "whole-model prefills and served-like decode steps timed just before and just after the real run, "
               "each divided by the profile's placement ratio of the placement it ran in; f (gemm_in_situ) and g "
               "(decode_in_situ) set from them by the calibration's rules (calib/in_situ_refresh.h)"},
      {"settings",
       {{"prefill_tokens", s.prefill_tokens},
        {"decode_batches", s.decode_batches},
        {"cached", s.cached},
        {"warm_up_steps", s.warm_up},
        {"timed_steps", s.timed},
        {"rounds", s.rounds}}},
      {"samples", counts},
      {"calibration", {{"gemm_in_situ", in_situ_json(profile.gemm_in_situ)},
                       {"decode_in_situ", in_situ_json(profile.decode_in_situ)}}},
      {"run", {{"gemm_in_situ", in_situ_json(p.gemm_in_situ)}, {"decode_in_situ", in_situ_json(p.decode_in_situ)}}},
      {"drift",
       {{"meaning", "after / before the real run, geometric mean over the shapes (in the tables' placement)"},
        {"decode", decode},
        {"prefill", prefill},
        {"largest", largest}}}};
  return out;
}

std::unique_ptr<Executor> make_in_situ_refresh_decoder(const ModelSpec& model, const InSituRefreshSettings& settings,
                                                       int threads, uint64_t weights_seed,
                                                       const SamplingParams& sampling) {
  CpuDecoderOptions decoder_options;
  decoder_options.threads = threads;
  DecoderExecutorOptions executor_options;
  executor_options.sampling = sampling;
  return std::make_unique<DecoderExecutor>(make_cpu_decoder(random_weights(model, weights_seed),
                                                            in_situ_refresh_blocks(settings), settings.block_size,
                                                            decoder_options),
                                           executor_options);
}

}  // namespace servesim
