// Placement ratios (validate/host_drift/placement_ratios.h): the ratio of an
// iteration's shape, the profile field, the measurement's refusal without
// both placements; and the drift timeline that costs each iteration in its
// placement, at its level (validate/host_drift/drift_timeline.h).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/errors.h"
#include "support/synthetic_profile.h"
#include "validate/host_drift/drift_probes.h"
#include "validate/host_drift/drift_timeline.h"
#include "validate/host_drift/placement_ratios.h"

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

// One sequence: a decode of one token after 8, or a prefill of 8 tokens.
IterationPlan one_sequence(bool prefill, const std::vector<int32_t>& table) {
  IterationPlan plan;
  ScheduledSequence s;
  s.request_id = 1;
  s.num_query_tokens = prefill ? 8 : 1;
  s.num_cached_tokens = prefill ? 0 : 8;
  s.is_prefill = prefill;
  s.samples = true;
  s.block_table = table;
  plan.add(s);
  return plan;
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

TEST_CASE("a profile's calibration placement counts come from its drift probes' metadata") {
  DeviceProfile p;
  CHECK_FALSE(calibration_placement_counts(p));
  p.metadata["anchor_probes"] = {{"placement_counts", {{"near", 3}, {"far", 9}, {"unknown", 1}}}};
  const auto counts = calibration_placement_counts(p);
  REQUIRE(counts);
  CHECK(counts->near == 3);
  CHECK(counts->far == 9);
  CHECK(counts->unknown == 1);
  CHECK(counts->dominant() == Placement::Far);
  p.metadata["anchor_probes"] = {{"placement_counts", nullptr}};
  CHECK_FALSE(calibration_placement_counts(p));
  // The ratios a profile carries, and none without them.
  CHECK_FALSE(placement_ratios_of(p, "p").has_value());
  p.placement_ratios = synthetic_ratios().to_json();
  REQUIRE(placement_ratios_of(p, "p").has_value());
  CHECK(placement_ratios_of(p, "p")->decode_ratio == synthetic_ratios().decode_ratio);
  p.placement_ratios["other"] = "far";
  CHECK_THROWS_AS(placement_ratios_of(p, "p.json"), InputError);
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

TEST_CASE("the drift timeline: each iteration in its placement, at its kind's level, by the refreshed profile") {
  const ModelSpec m = test::synthetic::tiny_model();
  const DeviceProfile calibrated_profile = test::synthetic::synthetic_profile(m);
  const ProfileModel calibrated(calibrated_profile, m);
  const std::vector<int32_t> table = {0};
  const IterationPlan decode = one_sequence(false, table), prefill = one_sequence(true, table);

  // Placement: the real run's at the time, far the tables' own.
  DriftTimeline placed(calibrated, std::nullopt, synthetic_ratios(), {0.5, 1.0, 2.0},
                       {Placement::Near, Placement::Far, Placement::Near}, {});
  CHECK(placed.placement_at(0.1) == Placement::Near);  // before the first: the first
  CHECK(placed.placement_at(1.0) == Placement::Far);   // an iteration's own start: its own
  CHECK(placed.placement_at(1.5) == Placement::Far);
  CHECK(placed.placement_at(9.0) == Placement::Near);  // after the last: the last
  CHECK(placed.factor(decode, 0.0) == Approx(1.3));    // a 1-sequence decode, threads near
  CHECK(placed.factor(decode, 1.2) == 1.0);            // far: the tables' placement
  CHECK(placed.factor(prefill, 0.6) == Approx(0.9));  // an 8-token prefill: below the ladder, its first ratio

  // Levels: a decode-only plan by the decode probes' level, a plan with a
  // prefill by the prefill probes' (1 without any).
  DriftLevels levels;
  levels.decode.resize(2);
  levels.decode[0].probe.time_s = 0;
  levels.decode[0].level = 1.2;
  levels.decode[1].probe.time_s = 2;
  levels.decode[1].level = 0.8;
  DriftTimeline levelled(calibrated, std::nullopt, std::nullopt, {}, {}, levels);
  CHECK(levelled.factor(decode, 1.0) == Approx(1.0));  // halfway between the levels
  CHECK(levelled.factor(decode, 2.5) == Approx(0.8));  // after the last
  CHECK(levelled.factor(prefill, 2.5) == 1.0);         // no prefill probes
  levels.prefill.resize(1);
  levels.prefill[0].probe.time_s = 1;
  levels.prefill[0].level = 1.3;
  DriftTimeline both(calibrated, std::nullopt, std::nullopt, {}, {}, levels);
  CHECK(both.factor(prefill, 0.0) == Approx(1.3));
  CHECK(both.factor(decode, 2.5) == Approx(0.8));

  // The refresh: the refreshed profile's cost over the calibrated one's.
  DeviceProfile refreshed_profile = calibrated_profile;
  refreshed_profile.gemm_factor.x = {1, 4096};
  refreshed_profile.gemm_factor.factor = {1.25, 1.25};
  const ProfileModel refreshed(refreshed_profile, m);
  DriftTimeline refreshing(calibrated, refreshed, std::nullopt, {}, {}, {});
  CHECK(refreshing.factor(prefill, 0.0) * calibrated.seconds(prefill) == Approx(refreshed.seconds(prefill)));
  CHECK(refreshing.factor(prefill, 0.0) > 1.0);
  CHECK_THROWS_AS(DriftTimeline(calibrated, std::nullopt, std::nullopt, {1.0}, {}, {}), std::invalid_argument);
}
