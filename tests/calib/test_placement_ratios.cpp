// Placement ratios (calib/placement_ratios.h): the ratio of an iteration's
// shape, the profile field, the measurement's refusal without both
// placements, and validation's costing in each iteration's placement
// (calib/validate.h: cost_in_placement, PlacementTimelineExecutor).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "calib/placement_ratios.h"
#include "calib/profile.h"
#include "calib/validate.h"
#include "sim/clock.h"
#include "sim/errors.h"

using namespace servesim;

namespace {

// Far is the tables' placement; near runs 1-sequence decodes 1.3x as long,
// 4 sequences 1.1x, and prefills 0.9x (32 tokens) to 0.8x (512).
PlacementRatios synthetic_ratios() {
  PlacementRatios r;
  r.reference = Placement::Far;
  r.other = Placement::Near;
  r.decode_batch = {1, 4};
  r.decode_ratio = {1.3, 1.1};
  r.prefill_tokens = {32, 512};
  r.prefill_ratio = {0.9, 0.8};
  r.context = 256;
  return r;
}

RecordedIteration iteration(int32_t prefill_tokens, int32_t decode_sequences, double core_latency_ns) {
  RecordedIteration it;
  it.prefill_tokens = prefill_tokens;
  it.decode_tokens = decode_sequences;
  it.prefill_sequences = prefill_tokens > 0 ? 1 : 0;
  it.decode_sequences = decode_sequences;
  it.sequences.resize(size_t(it.prefill_sequences + decode_sequences));
  it.core_latency_ns = core_latency_ns;
  return it;
}

class OneMillisecond final : public Executor {
 public:
  std::string name() const override { return "1 ms"; }
  void execute(const IterationPlan&, IterationResult& result) override { result.duration_s = 1e-3; }
};

}  // namespace

TEST_CASE("placement ratios: an iteration's ratio by its shape and placement") {
  const PlacementRatios r = synthetic_ratios();
  // The tables' own placement, or an unknown one: as measured.
  CHECK(r.ratio(0, 1, 1, Placement::Far) == 1.0);
  CHECK(r.ratio(0, 1, 1, Placement::Unknown) == 1.0);
  // Decode only: by sequences, linear in log B, the end values beyond.
  CHECK(r.ratio(0, 1, 1, Placement::Near) == Approx(1.3));
  CHECK(r.ratio(0, 2, 2, Placement::Near) == Approx(1.2));  // halfway between 1 and 4 in log B
  CHECK(r.ratio(0, 64, 64, Placement::Near) == Approx(1.1));
  // Any prefill tokens: by all the iteration's tokens.
  CHECK(r.ratio(128, 1, 128, Placement::Near) == Approx(0.85));
  CHECK(r.ratio(100, 29, 128, Placement::Near) == Approx(0.85));  // mixed: 100 prefill + 28 decode tokens
  CHECK(r.ratio(2048, 1, 2048, Placement::Near) == Approx(0.8));
  CHECK(r.ratio(8, 1, 8, Placement::Near) == Approx(0.9));
}

TEST_CASE("placement ratios: inverted, the same ratios seen from the other placement") {
  PlacementRatios r = synthetic_ratios();
  r.samples_reference = {5, 6, 7, 8};
  r.samples_other = {1, 2, 3, 4};
  const PlacementRatios i = r.inverted();
  CHECK(i.reference == Placement::Near);
  CHECK(i.other == Placement::Far);
  CHECK(i.samples_reference == r.samples_other);
  CHECK(i.samples_other == r.samples_reference);
  CHECK(i.ratio(0, 1, 1, Placement::Far) == Approx(1 / 1.3));
  CHECK(i.ratio(0, 1, 1, Placement::Near) == 1.0);
  CHECK(i.ratio(512, 1, 512, Placement::Far) == Approx(1 / 0.8));
  CHECK(i.inverted().decode_ratio == r.decode_ratio);
}

TEST_CASE("a profile's calibration placement counts come from its anchor probes' metadata") {
  DeviceProfile p;
  CHECK_FALSE(p.calibration_placement_counts());
  p.metadata["anchor_probes"] = {{"placement_counts", {{"near", 3}, {"far", 9}, {"unknown", 1}}}};
  const auto counts = p.calibration_placement_counts();
  REQUIRE(counts);
  CHECK(counts->near == 3);
  CHECK(counts->far == 9);
  CHECK(counts->unknown == 1);
  CHECK(counts->dominant() == Placement::Far);
  p.metadata["anchor_probes"] = {{"placement_counts", nullptr}};
  CHECK_FALSE(p.calibration_placement_counts());
}

TEST_CASE("placement ratios: round-trip through JSON, malformed ones refused by name") {
  const PlacementRatios r = synthetic_ratios();
  const PlacementRatios back = PlacementRatios::from_json(r.to_json(), "p.json");
  CHECK(back.reference == Placement::Far);
  CHECK(back.other == Placement::Near);
  CHECK(back.decode_ratio == r.decode_ratio);
  CHECK(back.prefill_tokens == r.prefill_tokens);

  auto refused = [&](const char* field, const nlohmann::json& value, const char* mentions) {
    nlohmann::json j = r.to_json();
    j[field] = value;
    INFO(field);
    CHECK_THROWS_WITH(PlacementRatios::from_json(j, "p.json"), Catch::Contains(mentions) && Catch::Contains("p.json"));
  };
  refused("other", "far", "must differ");
  refused("reference", "sideways", "placement_ratios.reference");
  refused("decode_batch", nlohmann::json::array({4, 1}), "must increase");
  refused("decode_ratio", nlohmann::json::array({1.3}), "differ in length");
  refused("prefill_ratio", nlohmann::json::array({0.9, -1}), "> 0");
  refused("prefill_tokens", nlohmann::json::array(), "non-empty");
  refused("samples_other", "many", "placement_ratios.samples_other");
  refused("samples_reference", nlohmann::json::array({3, -1}), "counts >= 0");
}

TEST_CASE("placement ratios: not measured when the placement cannot be told (one thread)") {
  // With one thread there is no core-to-core latency: every sample is of
  // unknown placement, so no ratio can be measured and the result is empty.
  OneMillisecond executor;
  PlacementRatioSettings s;
  s.threads = 1;
  s.max_seconds = 0.05;
  s.decode_batches = {1, 2};
  s.prefill_tokens = {32};
  s.context = 16;
  std::vector<std::string> said;
  CHECK_FALSE(measure_placement_ratios(executor, 16, Placement::Near, s, [&](const std::string& l) {
                said.push_back(l);
              }).has_value());
}

TEST_CASE("validation costs each iteration in the placement it ran in") {
  const PlacementRatios r = synthetic_ratios();
  const double near = 50, far = 200, unknown = std::numeric_limits<double>::quiet_NaN();
  const std::vector<RecordedIteration> its = {iteration(0, 1, far), iteration(0, 1, near), iteration(512, 0, near),
                                              iteration(0, 4, unknown)};
  std::vector<double> costs = {1.0, 1.0, 1.0, 1.0};
  cost_in_placement(its, r, costs);
  CHECK(costs[0] == 1.0);             // the tables' placement
  CHECK(costs[1] == Approx(1.3));     // a 1-sequence decode, threads near
  CHECK(costs[2] == Approx(0.8));     // a 512-token prefill, threads near
  CHECK(costs[3] == 1.0);             // placement unknown
  std::vector<double> too_few = {1.0};
  CHECK_THROWS_AS(cost_in_placement(its, r, too_few), std::invalid_argument);

  // Predict: the real run's placement at the simulated time.
  OneMillisecond inner;
  VirtualClock clock;
  PlacementTimelineExecutor timeline(inner, clock, r, {0.5, 1.0, 2.0}, {Placement::Near, Placement::Far,
                                                                         Placement::Near});
  CHECK(timeline.placement_at(0.1) == Placement::Near);  // before the first: the first
  CHECK(timeline.placement_at(1.5) == Placement::Far);
  CHECK(timeline.placement_at(9.0) == Placement::Near);  // after the last: the last
  IterationPlan plan;
  std::vector<int32_t> table = {0};
  ScheduledSequence s;
  s.request_id = 1;
  s.num_query_tokens = 1;
  s.num_cached_tokens = 3;
  s.samples = true;
  s.block_table = table;
  plan.add(s);
  IterationResult result;
  timeline.execute(plan, result);  // t = 0: near
  CHECK(result.duration_s == Approx(1.3e-3));
  clock.wait_until(1.2);
  result.reset();
  timeline.execute(plan, result);  // t = 1.2: far, the tables' placement
  CHECK(result.duration_s == Approx(1e-3));
}
