// The calibration's whole-model helpers (calib/calibration_common.h): the
// served-like decode steps and the decode-step factor they measure.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "calib/calibration_common.h"
#include "sim/cost/profile.h"
#include "sim/cost/profile_model.h"
#include "sim/executor.h"
#include "support/synthetic_profile.h"
#include "support/test_support.h"

using namespace servesim;
using namespace servesim::test::synthetic;

TEST_CASE("calibration::DecodeSteps: contexts spread over c/2 .. 3c/2, own blocks, one token further each step") {
  calibration::DecodeSteps steps(5, 256, 10, 16);
  const IterationPlan& plan = steps.plan();
  REQUIRE(plan.sequences.size() == 5);
  CHECK(plan.sequences.front().num_cached_tokens == 128);
  CHECK(plan.sequences.back().num_cached_tokens == 384);
  CHECK(plan.sequences[2].num_cached_tokens == 256);  // the middle one at c
  std::set<int32_t> blocks;
  for (const ScheduledSequence& s : plan.sequences) {
    CHECK(s.num_query_tokens == 1);
    CHECK(!s.is_prefill);
    CHECK(s.samples);
    // Room for 10 more tokens after the first step's.
    CHECK(int64_t(s.block_table.size()) * 16 >= s.num_cached_tokens + 10 + 1);
    for (int32_t b : s.block_table) CHECK(blocks.insert(b).second);  // no block shared
  }
  CHECK(int64_t(blocks.size()) == calibration::DecodeSteps::blocks(5, 256, 10, 16));
  CHECK(*blocks.rbegin() == int32_t(blocks.size()) - 1);  // blocks 0, 1, ...
  steps.advance();
  CHECK(plan.sequences.front().num_cached_tokens == 129);
  CHECK(plan.sequences.back().num_cached_tokens == 385);
  calibration::DecodeSteps one(1, 256, 3, 16);
  CHECK(one.plan().sequences.front().num_cached_tokens == 256);
}

namespace {

// Takes `scale` times the profile's prediction of every plan, one step in
// ten twice as long (the median ignores it).
class ScaledExecutor final : public Executor {
 public:
  ScaledExecutor(const ProfileModel& model, double scale) : model_(model), scale_(scale) {}
  std::string name() const override { return "scaled profile"; }
  void execute(const IterationPlan& plan, IterationResult& result) override {
    result.duration_s = scale_ * model_.breakdown(plan).total() * (++calls_ % 10 == 0 ? 2.0 : 1.0);
    contexts.push_back(plan.sequences.front().num_cached_tokens);
  }
  std::vector<int32_t> contexts;

 private:
  const ProfileModel& model_;
  double scale_;
  int calls_ = 0;
};

}  // namespace

TEST_CASE("measure_decode_step_factor: the median of measured over predicted per batch size, on advancing steps") {
  const ModelSpec m = tiny_model();
  DeviceProfile p = synthetic_profile(m);
  const ProfileModel tables(p, m);
  ScaledExecutor executor(tables, 0.8);
  calibration::measure_decode_step_factor(p, executor, {1, 4, 16}, 255, 16, 9, {});
  REQUIRE(p.decode_step_factor.x == std::vector<double>{1, 4, 16});
  for (double f : p.decode_step_factor.factor) CHECK(f == Approx(0.8));
  // 3 warm-ups and 9 timed steps per batch size, each one token further.
  REQUIRE(executor.contexts.size() == 36);
  CHECK(executor.contexts[1] == executor.contexts[0] + 1);
  CHECK(executor.contexts[11] == executor.contexts[0] + 11);
  // The factor then makes the profile predict those steps as measured.
  const ProfileModel fitted(p, m);
  calibration::DecodeSteps steps(4, 255, 1, 16);
  CHECK(fitted.breakdown(steps.plan()).total() == Approx(0.8 * tables.breakdown(steps.plan()).total()));
}

TEST_CASE("moment_spread: per batch size the slowest moment over the fastest, and a warning naming the wide ones") {
  // medians[moment][batch] for batch sizes 1, 8, 16: 16 flips between two speeds.
  const std::vector<std::vector<double>> medians = {{0.016, 0.052, 0.072}, {0.017, 0.080, 0.100},
                                                    {0.018, 0.053, 0.075}};
  const std::vector<double> spread = calibration::moment_spread(medians);
  REQUIRE(spread.size() == 3);
  CHECK(spread[0] == Approx(0.018 / 0.016));
  CHECK(spread[1] == Approx(0.080 / 0.052));
  CHECK(spread[2] == Approx(0.100 / 0.072));
  const std::string warning = unsteady_decode_steps_warning({1, 8, 16}, spread, 1.3);
  CHECK(warning.find("of 8, 16 sequences") != std::string::npos);
  CHECK(warning.find("1.54x apart") != std::string::npos);
  CHECK(warning.find("1 sequence(s): 1.12x") != std::string::npos);
  // Within the limit: no warning; one moment: no spread.
  CHECK(unsteady_decode_steps_warning({1, 8, 16}, spread, 1.6).empty());
  CHECK(calibration::moment_spread({{0.01, 0.02}}) == std::vector<double>{1.0, 1.0});
  CHECK(calibration::moment_spread({}).empty());
  CHECK_THROWS(calibration::moment_spread({{0.01, 0.02}, {0.01}}));
  CHECK_THROWS(unsteady_decode_steps_warning({1, 8}, spread, 1.3));
}
