// How much slower or faster whole-model iterations run with the threads in
// the other placement (validate/host_drift/placement.h) than in the one the
// profile's tables were measured in.
//
// The two placements do not differ by one factor: two CCDs stream the
// weights faster, while batched work is compute-bound and its threads
// synchronise across the CCDs (docs/noisy-hosts.md has the measurements).
// So the calibration measures the ratio on a ladder of iteration shapes:
// decode steps of B sequences and prefills of T tokens, each shape timed
// repeatedly in both placements as the host moves the threads, the
// placement taken before every iteration.
//
// ratio(plan): a decode-only plan by its sequences B, any plan with prefill
// tokens by its tokens T; linear in log B or log T between ladder points,
// the end point's ratio beyond the ladder.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/cost/profile.h"
#include "sim/executor.h"
#include "sim/iteration_plan.h"
#include "validate/host_drift/placement.h"

namespace servesim {

struct PlacementRatios {
  Placement reference = Placement::Unknown;  // the placement of the profile's tables
  Placement other = Placement::Unknown;      // the placement the ratios are for
  std::vector<double> decode_batch, decode_ratio;    // B -> other / reference
  std::vector<double> prefill_tokens, prefill_ratio; // T -> other / reference
  int64_t context = 0;                               // tokens of context of each decode sequence
  std::vector<int64_t> samples_reference, samples_other;  // per ladder point (decode, then prefill)

  // 1 for `placement` == reference or Unknown, the ratio for `other`, of
  // an iteration with `prefill_tokens` (0: decode only), `sequences` and
  // `tokens` in all.
  double ratio(int64_t prefill_tokens, int64_t sequences, int64_t tokens, Placement placement) const;
  double ratio(const IterationPlan& plan, Placement placement) const {
    return ratio(plan.num_prefill_tokens, int64_t(plan.sequences.size()), plan.num_tokens(), placement);
  }

  // The same ratios seen from the other side: reference and other swapped,
  // every ratio r as 1 / r.
  PlacementRatios inverted() const;

  nlohmann::json to_json() const;
  // Throws InputError naming `source` for a malformed object.
  static PlacementRatios from_json(const nlohmann::json& j, const std::string& source);
};

// The ratios a profile carries (DeviceProfile::placement_ratios), nullopt
// when it has none; InputError naming `source` when they are malformed.
std::optional<PlacementRatios> placement_ratios_of(const DeviceProfile& profile, const std::string& source);

struct PlacementRatioSettings {
  std::vector<int64_t> decode_batches = {1, 2, 4, 8, 16, 32};
  std::vector<int64_t> prefill_tokens = {32, 128, 512};
  int64_t context = 256;
  int threads = 0;              // the decoder's team (0: every core)
  double max_seconds = 180;     // give up when a placement was not seen by then
  int64_t samples_wanted = 12;  // per shape and placement, then stop
};

// Times the ladder on `executor` (a whole-model decoder with at least
// max(decode_batches) * ceil((context + 1) / block_size) KV blocks and
// ceil(max(prefill_tokens) / block_size)) round after round until every
// shape has `samples_wanted` samples in both placements, or max_seconds.
// `reference` is the placement the ratios are relative to. nullopt when one
// of the two placements never came up (a machine that keeps its threads
// where they are needs no ratios). `say` gets progress lines.
std::optional<PlacementRatios> measure_placement_ratios(Executor& executor, int32_t block_size,
                                                        Placement reference, const PlacementRatioSettings& settings,
                                                        const std::function<void(const std::string&)>& say);

}  // namespace servesim
